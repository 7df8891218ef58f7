"""``--method fed-moments``: the pooled second moments in two sum-shaped exchanges, then NOTEARS on them.

Everything the coordinator pools is a plain sum over the participants (so ``bnsl serve
--secure-sum`` can hide the terms). Each participant sends (:class:`~bnsl_cli.federated.messages.ShareReply`)

1. its share of the column means, ``s_p / n`` (``s_p`` its column sums, ``n`` the public total row
   count); the coordinator sums them into the pooled mean ``μ`` and broadcasts it
   (:class:`~bnsl_cli.federated.messages.CentreBroadcast`);
2. its share of the pooled centred second moments about ``μ``, the upper triangle of
   ``Σ_rows (x − μ)(x − μ)ᵀ / n``, computed from its rows centred at ``μ`` (no raw-moment
   cancellation on columns far from 0). The sum is ``S``, the pooled centred second-moment matrix
   (divisor n), exactly ``X_cᵀX_c / n`` of all rows centred with the pooled mean up to rounding.

The coordinator runs :func:`bnsl_cli.solvers.notears.notears_linear` on ``S`` — the same solver, λ and
tolerances as ``--method notears`` on the pooled rows, which computes its matrix from the same blocks
with the same functions (:func:`bnsl_cli.stats.pooled_moments_of_blocks`), so a non-private fed-moments run is
bit-for-bit ``notears``. With ``--standardize`` the coordinator uses ``D⁻¹ S D⁻¹`` (``D`` the pooled
standard deviations, the square roots of ``diag S``): the same as standardising every row with the
pooled statistics, with no extra message.

Under ``--dp`` each participant makes the one-off releases of DP-Fed-BNSL (noisy column means ``ĉ_p``
and second moments ``v̂_p``, each with its noisy range bound unless ``--value-bound``), then one
Gaussian release of ``Σ_rows z zᵀ`` of its rows centred at ``ĉ_p`` and scaled column-wise by the
released ``√v̂_p`` (``z_j = (x_j − ĉ_j)/√v̂_j``, so the clip and the noise are the same on every
column whatever its units), each row clipped to ℓ₂ norm ``C_x = c·√d`` (replace-one sensitivity
``√2·C_x²``; symmetric Gaussian noise), release kind ``moment-matrix``. Its two shares are
post-processing of these releases and of the broadcast ``μ`` (itself post-processing of released
shares): ``n_p ĉ_p / n``, then ``[M_p + n_p (ĉ_p − μ)(ĉ_p − μ)ᵀ] / n`` with
``M_p = diag(√v̂) M_z diag(√v̂)`` — no release more than before the sum-shaped encoding. The
coordinator projects the pooled sum to PSD once (projecting every participant's matrix rectified the
noise P times: d = 50 ER2, ε = 10, seed 1: SHD 88 → 80). Everything the coordinator computes from
these is post-processing.

**Split noise** (``bnsl serve --secure-sum --split-noise``, :mod:`bnsl_cli.privacy.split_noise`): every site
adds ``1/P`` of the moment matrix's noise variance and only the secure sum carries all of it. So that
the shares add up in every site's units, the rows are then scaled by the pooled standard deviations
``σ̄`` (one more sum-shaped exchange of variance shares, post-processing of the released ``ĉ_p``,
``v̂_p``; ``σ̄`` is broadcast with a :class:`~bnsl_cli.federated.messages.StandardizeBroadcast`) instead
of each site's own ``√v̂_p``.

Orientation: ``W[i, j]`` is the edge ``i → j``.

The package, by job: :mod:`.releases`, :mod:`.site`, :mod:`.sequence` (what the coordinator accepts of
the shares), :mod:`.driver`.

(The site side, :mod:`.site`, is not imported here: the coordinator side imports without it; the
registry binds it.)
"""

from bnsl_cli.federated.methods.moments.driver import drive_moments
from bnsl_cli.federated.methods.moments.releases import (
    dp_fed_moments_builder,
    dp_fed_moments_releases,
    private_moment_matrix,
)
from bnsl_cli.federated.methods.moments.sequence import site_sequence, MomentShares, reply_rules

__all__ = [
    "site_sequence",
    "drive_moments",
    "MomentShares",
    "reply_rules",
    "dp_fed_moments_releases",
    "dp_fed_moments_builder",
    "private_moment_matrix",
]
