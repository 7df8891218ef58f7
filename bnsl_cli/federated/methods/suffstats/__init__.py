"""``--method fed-suffstats``: private sufficient statistics in a few sum-shaped releases, then a
structure search that knows their noise (:mod:`bnsl_cli.solvers.moment_search`).

Everything a site sends is a share the coordinator only sums (:class:`ShareReply`, summable under
``bnsl serve --secure-sum`` and in process, see :class:`bnsl_cli.federated.secure_local.SecureLocalFleet`).

Private run (releases of :class:`~bnsl_cli.privacy.releases.ReleaseKind`; docs/privacy.md derives
the sensitivities):

1. ``scale-histogram`` — per column two histograms on fixed, data-independent log-spaced bins:
   of the row values (signed, quarter-octave bins) and of the absolute differences of consecutive
   row pairs (half-octave bins; pairs by row position, so no centre is needed). Replace-one changes
   one count in two bins of each histogram per column: L2 sensitivity ``2√d``. The coordinator fits
   Gaussian shapes (public counts, all bins, least squares): a scale ``s̃_j`` from the pairs and the
   values together (their joint likelihood) and a coarse interval for the centre from the values
   (:func:`coarse_bins`); columns whose fit stays within the noise are named in the report, and
   where no scale explains anything, merged quartile bins give the interval.
1b. ``centre-histogram`` — per column :data:`CENTRE_BINS` linear bins placed by step 1 (public:
   post-processing) over the coarse interval ± ``CENTRE_MARGIN·s̃``; replace-one moves one count per
   column: L2 sensitivity ``√(2d)``. A fitted normal shape gives the centre ``m̃_j`` to a fraction of a
   standard deviation and the scale (:func:`refine_centre`) — log bins alone are ≈ 19 % of ``|x|``
   wide, so a centre read from them is off by many standard deviations when ``|m| ≫ s``.
2. ``whitened-moments``, ``STAGES`` times — the coordinator broadcasts ``m̃``, ``s̃`` and a lower
   triangular ``L`` (public: post-processing of earlier releases; ``L = I`` first); each site
   releases ``Σ a aᵀ`` over its rows, ``a = [1; L⁻¹ (x − m̃)/s̃]`` clipped to ℓ₂ norm
   ``C = clip·√(d + 1)`` (replace-one sensitivity ``√2·C²``), plus symmetric Gaussian noise. The
   coordinator gets the weighted mean and second moments in the whitened basis, maps them back
   (``L · L⁻ᵀ``, then raw units), runs the noise-aware search, and turns the graph into the next
   stage's ``L``: the Cholesky factor of the model covariance ``(I − B)⁻ᵀ diag(R) (I − B)⁻¹``.
   Isotropic noise in a whitened basis enters the moments as ``L N Lᵀ``, nearly proportional to
   the covariance, like sampling noise; its small eigen-directions are no longer swamped. The
   next stage's centre is moved to the released weighted mean. A stage whose clipped weight is
   within 3 noise stds is skipped (the next one uses the last basis that worked, or the same); if
   all are, the run stops with the ε and rows per site that would work (:func:`usable_at`).

The graph of the last stage is the result (``W[i, j]`` is the edge ``i → j``, raw units).

Non-private run: one exchange of mean shares (``Σ x / n``), then one stage with ``m̃`` the pooled
mean, ``s̃ = 1``, ``L = I``, no clip, no noise: the exact pooled moments, the same search with τ = 0.

The package, by job: :mod:`.bins` (the histograms' bins and counts), :mod:`.fits` (post-processing of the
summed histograms), :mod:`.releases` (shares, clip, release list, sensitivities, the noisy releases),
:mod:`.sequence` (what a site accepts of each request and what the coordinator accepts of each share),
:mod:`.site` (the participant), :mod:`.driver` (the coordinator), :mod:`.budget` (when the releases are
usable, the noise scale and its warning).

(The site side, :mod:`.site`, is not imported here: the coordinator side imports without it; the
registry binds it.)
"""

from bnsl_cli.federated.methods.suffstats.bins import (
    CENTRE_BINS,
    centre_histograms,
    pair_bins,
    scale_histograms,
    value_bins,
)
from bnsl_cli.federated.methods.suffstats.budget import (
    clipped_rows_warning,
    clipped_weight_fraction,
    noise_scale,
    noisy_moments_warning,
    usable_at,
)
from bnsl_cli.federated.methods.suffstats.driver import drive_suffstats, model_whitening
from bnsl_cli.federated.methods.suffstats.fits import centre_and_scale, coarse_bins, refine_centre
from bnsl_cli.federated.methods.suffstats.releases import (
    CLIP,
    MECHANISM,
    STAGE_Z,
    STAGES,
    centre_histogram_release,
    release_builder,
    release_sensitivity,
    whitened_moments_release,
)
from bnsl_cli.federated.methods.suffstats.sequence import site_sequence, basis_problem, reply_rules, whitening_bound

__all__ = [
    "site_sequence",
    "CENTRE_BINS",
    "centre_histograms",
    "pair_bins",
    "scale_histograms",
    "value_bins",
    "clipped_rows_warning",
    "clipped_weight_fraction",
    "noise_scale",
    "noisy_moments_warning",
    "usable_at",
    "drive_suffstats",
    "model_whitening",
    "centre_and_scale",
    "coarse_bins",
    "refine_centre",
    "CLIP",
    "MECHANISM",
    "STAGE_Z",
    "STAGES",
    "centre_histogram_release",
    "release_builder",
    "release_sensitivity",
    "whitened_moments_release",
    "basis_problem",
    "reply_rules",
    "whitening_bound",
]
