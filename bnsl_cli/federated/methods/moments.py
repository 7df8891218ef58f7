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
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from bnsl_cli.dag import finish_graph, fit_required
from bnsl_cli.errors import ConvergenceWarning, NoDagError, PrivacyBudgetError, UnsafeMessageError, warn
from bnsl_cli.privacy import one_off
from bnsl_cli.federated.messages import (
    CentreBroadcast,
    MessageKind,
    MomentRequest,
    ShareReply,
    StandardizeBroadcast,
    message_kind,
)
from bnsl_cli.federated.outcome import SolverOutcome
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
from bnsl_cli.federated.share_site import ShareSite
from bnsl_cli.privacy.bounding import STANDARDISED_MAX, clamp_abs, clamp_rows, clip_factors, row_norms, standardised_bound
from bnsl_cli.privacy.ledger import PrivacyEvent, PrivacyLedger
from bnsl_cli.privacy.mechanisms import project_psd, symmetric_gaussian_matrix
from bnsl_cli.privacy.release_plan import dp_fed_bnsl_releases
from bnsl_cli.privacy.releases import PlannedRelease, ReleaseKind
from bnsl_cli.privacy.split_noise import split_of
from bnsl_cli.solvers.notears import notears_linear
from bnsl_cli.stats import (
    check_scales,
    from_upper_triangle,
    mean_share,
    scatter_share,
    standardized,
    sum_shares,
    upper_triangle,
)

__all__ = [
    "MomentSite",
    "make_moment_site",
    "drive_moments",
    "MomentShares",
    "reply_rules",
    "dp_fed_moments_releases",
    "dp_fed_moments_builder",
    "private_moment_matrix",
]


# ----------------------------------------------------------------------------------------------
# privacy: the release list
# ----------------------------------------------------------------------------------------------


def dp_fed_moments_releases(rho_star: float, *, mean_share: float, moment_share: float, value_bound_given: bool) -> list:
    """DP fed-moments' releases: DP-Fed-BNSL's one-offs, then the moment matrix with the rest of ``rho_star``."""
    out = []
    for r in dp_fed_bnsl_releases(rho_star, mean_share=mean_share, moment_share=moment_share, value_bound_given=value_bound_given):
        kind = ReleaseKind.MOMENT_MATRIX if r.kind == ReleaseKind.COVARIANCE else r.kind
        out.append(PlannedRelease(kind, r.mechanism, r.multiplier, r.count))
    return out


def dp_fed_moments_builder(*, mean_share, moment_share, value_bound_given, **_):
    """``ρ* -> releases`` of DP fed-moments for the plan's shape."""
    return lambda rho_star: dp_fed_moments_releases(
        rho_star, mean_share=mean_share, moment_share=moment_share, value_bound_given=value_bound_given
    )


# ----------------------------------------------------------------------------------------------
# the site side
# ----------------------------------------------------------------------------------------------


def private_moment_matrix(Z: np.ndarray, clip: float, multiplier: float, rng, split: int = 1):
    """``Σ_rows z zᵀ`` with rows clipped to ℓ₂ norm ``C = clip·√d``, plus symmetric Gaussian noise
    (replace-one sensitivity ``√2·C²``). Not projected here: the coordinator projects the pooled sum
    once (post-processing), which keeps the noise of P participants from being rectified P times."""
    d = Z.shape[1]
    c_x = clip * float(np.sqrt(d))
    Z = clamp_abs(Z)  # finite whatever arrives; the clip factor below is never 0·inf (bounding)
    Zs = Z * clip_factors(row_norms(Z), c_x)[:, None]
    sens = float(np.sqrt(2.0) * c_x**2)
    std = multiplier * sens  # the noise of the release; with split noise, of the sum of ``split`` sites' shares
    noise = symmetric_gaussian_matrix(d, std / np.sqrt(split), rng)
    return Zs.T @ Zs + noise, PrivacyEvent(ReleaseKind.MOMENT_MATRIX, "gaussian", sens, std, 1, int(split))


class MomentSite(ShareSite):
    """A fed-moments participant: answers one :class:`MomentRequest` with its share of the column
    means and then one :class:`CentreBroadcast` with its share of the centred second moments about
    the broadcast pooled mean (each once). ``n_total`` is the public total row count (defaults to
    its own rows: a single participant).

    With split noise (the plan's moment-matrix release has ``split = P``, ``bnsl serve --split-noise``)
    the release waits for the common public scale: a :class:`CentreBroadcast` without ``full`` asks
    for its share of the pooled variances (post-processing of its released ``ĉ``, ``v̂``), a
    :class:`StandardizeBroadcast` brings the pooled ``σ̄``, and the release is made on ``(x − ĉ)/σ̄``
    with ``1/P`` of the noise variance (:mod:`bnsl_cli.privacy.split_noise`)."""

    def __init__(self, pid: int, X: np.ndarray, *, privacy=None, rng=None, label: Optional[str] = None,
                 n_total: Optional[int] = None):
        t0 = time.perf_counter()
        self.pid = int(pid)
        self.who = f"participant {self.pid + 1}"
        X = np.asarray(X, dtype=float)
        self.n_rows, self.d = int(X.shape[0]), int(X.shape[1])
        self.n_total = int(self.n_rows if n_total is None else n_total)
        self.ledger = PrivacyLedger()
        self.ledger.add_participant(self.pid)
        self.notes: dict = {}
        self.answered: set = set()
        self._split = 1
        self._M = None
        if privacy is None:
            self._X = X
            self._centre = None
        else:
            if rng is None:
                raise PrivacyBudgetError("a private participant needs its own noise source (rng)")
            centre, v_hat, events, notes = one_off.private_preprocessing(
                X, one_off.one_off_multipliers(privacy), privacy.value_bound, rng, label or f"participant {pid + 1}"
            )
            for ev in events:
                self.ledger.record(self.pid, ev)
            self.notes = notes
            mult = privacy.multiplier(ReleaseKind.MOMENT_MATRIX)
            if mult is None:
                raise PrivacyBudgetError(f"participant {pid + 1}: the plan calibrated no moment-matrix release")
            self._X = None  # from here on only the releases are used (and, with split noise, _Xp)
            self._centre = np.asarray(centre, float)
            self._v_hat = np.asarray(v_hat, float)
            X = clamp_rows(X, self._centre, self._v_hat)  # bounded, finite rows whatever arrives (bounding)
            self._split = max([int(r.split) for r in privacy.releases if r.kind == ReleaseKind.MOMENT_MATRIX] or [1])
            self._private = (privacy.clip, mult, rng)
            self._M = None
            if self._split == 1:
                # rows scaled column-wise by the released spreads √v̂ (post-processing of a release), so
                # the clip and the noise do not depend on the columns' units; the matrix is scaled back
                self._release(X, np.sqrt(self._v_hat))
            else:
                # split noise: every site must scale by the same public spreads (the pooled σ the
                # coordinator broadcasts), so that the sites' noise shares add up in common units
                self._Xp = X
        self.compute_s = time.perf_counter() - t0

    def _release(self, X: np.ndarray, s: np.ndarray) -> None:
        """The moment-matrix release on ``(x − ĉ)/s`` (``s`` public or released), scaled back."""
        clip, mult, rng = self._private
        Z = (X - self._centre[None, :]) / s[None, :]
        M, ev = private_moment_matrix(Z, clip, mult, rng, self._split)
        self.ledger.record(self.pid, ev)
        self._M = M * np.outer(s, s)

    def handle(self, data: bytes) -> Optional[bytes]:
        t0 = time.perf_counter()
        kind = message_kind(data)
        if kind == MomentRequest.kind:
            req = MomentRequest.decode(data)
            self._once("mean")
            if self._X is not None:
                values = mean_share(self._X, self.n_total)
            else:  # post-processing of the released means
                values = self.n_rows * self._centre / float(self.n_total)
        elif kind == CentreBroadcast.kind and not CentreBroadcast.decode(data).full:
            # split noise only: the share of the pooled variances about μ, from the released ĉ, v̂
            req = CentreBroadcast.decode(data)
            if self._centre is None or self._split == 1 or "mean" not in self.answered:
                raise ValueError(f"participant {self.pid + 1}: a variance request out of order")
            if req.mean.size != self.d or not np.all(np.isfinite(req.mean)):
                raise ValueError(f"participant {self.pid + 1}: the centre broadcast is not usable")
            self._once("variance")
            off = self._centre - req.mean
            values = (self.n_rows * self._v_hat + self.n_rows * off * off) / float(self.n_total)
        elif kind == StandardizeBroadcast.kind:
            # split noise only: the pooled spreads every site scales its rows by (public)
            msg = StandardizeBroadcast.decode(data)
            if self._split == 1 or "variance" not in self.answered or self._M is not None or msg.sd is None:
                raise ValueError(f"participant {self.pid + 1}: a scale broadcast out of order")
            if msg.sd.size != self.d or not (np.all(np.isfinite(msg.sd)) and np.all(msg.sd > 0)):
                raise ValueError(f"participant {self.pid + 1}: the scale broadcast is not usable")
            # (x − ĉ)/σ̄ of the clamped rows must stay finite, whatever the rows (released ĉ, v̂ and the
            # broadcast alone, before the rows are used)
            b = standardised_bound(self._centre, self._v_hat, self._centre, np.asarray(msg.sd, float))
            if not b <= STANDARDISED_MAX:
                raise UnsafeMessageError(f"participant {self.pid + 1} refused a scale broadcast that would stretch its "
                                         f"clamped rows to {b:.3g} (at most 2^400 is accepted)")
            self._release(self._Xp, np.asarray(msg.sd, float))
            self._Xp = None
            self.compute_s += time.perf_counter() - t0
            return None
        elif kind == CentreBroadcast.kind:
            req = CentreBroadcast.decode(data)
            if "mean" not in self.answered or (self._X is None and self._M is None):
                raise ValueError(f"participant {self.pid + 1}: a centre broadcast before the moment request"
                                 + ("" if "mean" not in self.answered else " or before the scale broadcast"))
            if req.mean.size != self.d or not np.all(np.isfinite(req.mean)):
                raise ValueError(f"participant {self.pid + 1}: the centre broadcast is not usable")
            self._once("moment")
            if self._X is not None:
                values = scatter_share(self._X, req.mean, self.n_total)
                self._X = None
            else:  # post-processing of the released matrix and means, and the broadcast μ
                off = self._centre - req.mean
                values = upper_triangle(self._M + self.n_rows * np.outer(off, off)) / float(self.n_total)
        else:
            raise ValueError(f"participant {self.pid + 1}: fed-moments answers only a moment request and a centre broadcast")
        self.compute_s += time.perf_counter() - t0
        return ShareReply(req.round, self.pid, self.d, values).encode()


def make_moment_site(plan, pid: int, X: np.ndarray, rng) -> MomentSite:
    """The site side of ``fed-moments`` from the run plan."""
    return MomentSite(pid, X, privacy=plan.privacy, rng=rng, label=plan.participants[pid].label, n_total=plan.n_total)


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


#: What fed-moments' messages carry (the report's ``communication.note``).
MESSAGES = (
    "two sum-shaped exchanges: each participant's share of the column means, then (after the pooled mean is "
    "broadcast) its share of the upper-triangle centred moment matrix"
)


def drive_moments(spec, plan, fleet, progress=None) -> SolverOutcome:
    """Coordinator side: the two sum-shaped exchanges, the pooled moments, NOTEARS, the finished graph."""
    d = plan.d
    fleet.traffic.enter("means")
    mu = sum_shares(ShareReply.decode(r).values for r in fleet.exchange(MomentRequest(0, d).encode()))
    if split_of(plan) > 1:
        # split noise: the pooled spreads first (post-processing of released shares), broadcast as
        # the common public scale of every site's moment release
        fleet.traffic.enter("scales")
        raw1 = fleet.exchange(CentreBroadcast(1, d, mu, full=False).encode())
        sd_pub = np.sqrt(np.maximum(sum_shares(ShareReply.decode(r).values for r in raw1), 0.0))
        check_scales(mu, sd_pub, plan.names, where="fed-moments --split-noise")
        fleet.exchange(StandardizeBroadcast(2, d, mu, sd_pub).encode())
        centre = CentreBroadcast(3, d, mu, full=True).encode()
    else:
        centre = CentreBroadcast(1, d, mu, full=True).encode()
    fleet.traffic.enter("moments")
    S = from_upper_triangle(sum_shares(ShareReply.decode(r).values for r in fleet.exchange(centre)), d)
    if plan.private:
        S = project_psd(S)  # post-processing of the pooled noisy releases
    sd = np.sqrt(np.maximum(np.diag(S), 0.0))
    if not np.all(np.isfinite(S)):
        raise NoDagError("fed-moments: the pooled second moments are not finite (values too large); no DAG can be produced")
    std = {
        "applied": bool(plan.standardize),
        "source": "the pooled moment matrix (no extra message" + (", no extra release)" if plan.private else ")"),
        "mean": mu.tolist(),
        "sd": sd.tolist(),
    }
    if plan.standardize:
        check_scales(mu, sd, plan.names)
        S, sd = standardized(S)
    res = notears_linear(
        S, plan.lam, progress=progress, forbidden=plan.forbidden_mask(), required=plan.required_mask()
    )
    W, removed = finish_graph(res.W, plan.threshold, plan.method, plan.names, plan.knowledge)
    W = fit_required(W, S, plan.knowledge)
    summaries = fleet.finish()
    notes = []
    if not res.converged:
        notes.append(
            f"fed-moments: NOTEARS stopped with h(W) = {res.h:.2e} > 1e-8 after {res.outer_steps} outer steps; "
            "the thresholded graph was made acyclic by dropping the weakest edges"
        )
    if res.solver_issues:
        first = res.solver_issues[0]
        notes.append(
            f"fed-moments: {len(res.solver_issues)} L-BFGS-B solve(s) inside NOTEARS did not report success "
            f"(first: outer step {first['outer']}, {first['message']})"
        )
    warn_list = []
    warn(notes, ConvergenceWarning, warn_list)
    return SolverOutcome(
        res.W, W, summaries,
        rounds=res.outer_steps,
        converged=res.converged,
        timing={"compute_s": res.wall_s + sum(s["compute_s"] for s in summaries)},
        messages=MESSAGES,
        warnings=warn_list,
        final={"h": res.h},
        history=res.history,
        removed_for_acyclicity=removed,
        solver_issues=res.solver_issues,
        standardize=std,
    )
