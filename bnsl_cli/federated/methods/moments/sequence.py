"""What the coordinator accepts of a fed-moments site's shares (:mod:`bnsl_cli.federated.reply_limits`)."""

from __future__ import annotations

import numpy as np

from bnsl_cli.federated.messages import (
    CentreBroadcast,
    MessageKind,
)
from bnsl_cli.federated.site_sequence import OnceBeforeRounds, centre_name
from bnsl_cli.federated.reply_limits import (
    NOISE_TAIL,
    ROUNDING,
    ROW_VALUE_LIMIT,
    CentreShares,
    MeanShares,
    Rule,
    own_mean_floor,
    psd_message,
)
from bnsl_cli.privacy.releases import ReleaseKind

# ----------------------------------------------------------------------------------------------
# the coordinator side
# ----------------------------------------------------------------------------------------------


class MomentShares(Rule):
    """The limits of a share of the pooled centred moments (the answer to a full
    :class:`CentreBroadcast`), the upper triangle of ``Σ_rows (x − μ)(x − μ)ᵀ / n``.

    Non-private: every entry at most ``n_p/n · (ROW_VALUE_LIMIT + |μ_a|)(ROW_VALUE_LIMIT + |μ_b|)``; in
    the clear, one site's matrix is positive semi-definite (``|S_ab| ≤ √(S_aa S_bb)``) and its
    diagonal at least ``n_p (x̄_p − μ)² / n`` (its own mean share). Private:
    ``[s_a s_b (Z_sᵀZ_s + N)_ab + n_p (ĉ_a − μ_a)(ĉ_b − μ_b)] / n`` with rows clipped to
    ``C_x = clip·√d`` (``|Z_sᵀZ_s|_ab ≤ n_p C_x²``), the moment-matrix release's noise tail, and ``s`` the
    site's released ``√v̂`` (bounded by the one-off release's clip and noise) or, with split noise,
    the broadcast common scale."""

    what = "share of the pooled moments"

    def limit(self, lim, request, index):
        mu = CentreBroadcast.decode(request).mean
        a, b = np.triu_indices(lim.d)
        n_p = lim.rows[index]
        if lim.privacy is None:
            top = ROW_VALUE_LIMIT + np.abs(mu)
            return (n_p / lim.n * top[a] * top[b] * (1.0 + ROUNDING),
                    f"n_p/n times products about μ of values below {ROW_VALUE_LIMIT:.0e}")
        rel = lim.release(ReleaseKind.MOMENT_MATRIX)
        if rel is None:
            return None
        c2 = lim.privacy.clip**2 * lim.d  # C_x² with C_x = clip·√d
        sigma = lim.site_noise(rel, np.sqrt(2.0) * c2)
        if rel.split > 1 and lim.scale is not None:
            s = np.asarray(lim.scale, float)
        else:
            s = np.sqrt(lim.v_hat(index, working_units=False))
        off = lim.centre_offsets(index, mu)
        return ((s[a] * s[b] * (n_p * c2 + NOISE_TAIL * sigma) + n_p * off[a] * off[b]) / lim.n * (1.0 + ROUNDING),
                f"n_p rows clipped to C_x² = {c2:.3g} plus {NOISE_TAIL:g} noise stds ({sigma:.3g}) of the moment-matrix "
                "release, in the site's released scales, and its centre's distance to μ, over n")

    def consistent(self, lim, request, index, values):
        if lim.privacy is not None:
            return None  # the noisy matrix need not be positive semi-definite
        a, b = np.triu_indices(lim.d)
        on = a == b
        diag = values[on]
        low = np.zeros(lim.d)
        if lim.site_means is not None:
            low = own_mean_floor(lim, index, CentreBroadcast.decode(request).mean)
        short = diag < low
        if short.any():
            j = int(np.argmax(short))
            return (f"sent a share of the pooled moments whose diagonal ({diag[j]:.3g} in column {j + 1}) is below what "
                    f"its own column means imply ({low[j]:.3g}): a sum of squares about μ")
        return psd_message(values, a, b, {j: float(diag[j]) for j in range(lim.d)}, "a share of the pooled moments")


def reply_rules(plan) -> dict:
    """What fed-moments' replies may hold (:mod:`bnsl_cli.federated.reply_limits`): a share of the column
    means answers the :class:`MomentRequest`; a share of the pooled variances (split noise) or of the
    pooled moments (:class:`MomentShares`) a :class:`CentreBroadcast`."""
    return {MessageKind.MOMENT_REQUEST: MeanShares(), MessageKind.CENTRE: CentreShares(full=MomentShares())}


#: fed-moments' message sequence at a site: the moment request, the centre broadcast (split noise:
#: also the variances' one) and, with split noise, the scale broadcast that makes its moment-matrix
#: release; once each.
MOMENT_EXCHANGE = OnceBeforeRounds(
    {
        MessageKind.MOMENT_REQUEST: lambda data: "moment request",
        MessageKind.CENTRE: centre_name,
        MessageKind.STANDARDIZE: lambda data: "standardisation broadcast",
    },
    made={MessageKind.STANDARDIZE: {ReleaseKind.MOMENT_MATRIX: 1}},
)


def site_sequence(plan) -> tuple:
    """fed-moments' message sequence at a site."""
    return (MOMENT_EXCHANGE,)
