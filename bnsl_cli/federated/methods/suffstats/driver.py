"""The fed-suffstats coordinator: the exchanges, the fits, the noise-aware search per stage, the next
stage's basis, the finished graph. It never sees rows."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import NamedTuple, Optional

import numpy as np

from bnsl_cli.errors import ClippedRowsWarning, NoisyReleaseWarning, warn
from bnsl_cli.federated.messages import ShareReply
from bnsl_cli.federated.methods.admm.on_moments import effective_rows
from bnsl_cli.federated.methods.suffstats.messages import (
    CENTRE_ROUND,
    TABLE_ROUND,
    BasisBroadcast,
    CentreRequest,
    FirstRequest,
    TableRequest,
)
from bnsl_cli.federated.methods.suffstats.bins import CENTRE_BINS, pair_bins, value_bins
from bnsl_cli.federated.methods.suffstats.confidence import resample_release
from bnsl_cli.federated.methods.suffstats.budget import (
    clipped_rows_warning,
    clipped_weight_fraction,
    gaussian_spread,
    empty_graph_message,
    noisy_moments_warning,
)
from bnsl_cli.federated.methods.suffstats.fits import coarse_bins, refine_centre
from bnsl_cli.federated.methods.suffstats.releases import (
    OFFDIAGONAL,
    pooled_noise_std,
    stage_releases,
)
from bnsl_cli.federated.methods.suffstats.sequence import (
    MAX_TABLE_CELLS,
    MAX_TABLE_VALUES,
    MAX_TABLE_VARIABLES,
    basis_problem,
)
from bnsl_cli.federated.outcome import (
    PooledStats,
    SolverFinal,
    SolverOutcome,
    SolverTiming,
)
from bnsl_cli.federated.methods.suffstats.candidates import final_graph
from bnsl_cli.federated.methods.suffstats.outcome import SuffstatsBasis, SuffstatsStage
from bnsl_cli.privacy.releases import ReleaseKind
from bnsl_cli.column_kinds import CATEGORICAL
from bnsl_cli.solvers.discrete_score import TwoPhaseScore
from bnsl_cli.solvers.mixed_score import MixedGaussianScore, best_order_graph, mixed_graph, mixed_weights
from bnsl_cli.solvers.moment_search import MomentSearchResult, learn_from_moments
from bnsl_cli.stats import check_scales, from_upper_triangle, standardized, sum_shares, to_original_units


# the coordinator side
# ----------------------------------------------------------------------------------------------


class _Pool(NamedTuple):
    """The releases made on one broadcast: its centre and basis, their inverse-variance average ``M``
    (summed, in the whitened basis), the summed inverse noise variance ``info`` and the stages."""

    centre: np.ndarray
    L: np.ndarray
    M: np.ndarray
    info: float
    stages: tuple


def model_whitening(G: np.ndarray, W: np.ndarray, tau: float, L: Optional[np.ndarray] = None) -> np.ndarray:
    """The lower Cholesky factor of the model covariance ``(I − B)⁻ᵀ diag(R) (I − B)⁻¹`` of the DAG
    weights ``W`` (``B = W``, in the units of ``G``) with residual variances ``R`` read from ``G``, each
    floored at its own release noise std (a direction the release could not resolve is not amplified):
    ``G`` carries the stage's noise ``τ·L N Lᵀ`` (``L`` the stage's basis, ``N`` isometric), so
    ``R_j = m_jᵀ G m_j`` (``m_j`` column ``j`` of ``I − B``) has noise std ``√2·τ·‖Lᵀm_j‖²``. ``L``
    ``None``: the identity."""
    d = G.shape[0]
    M = np.eye(d) - W
    U = M if L is None else L.T @ M
    floor = np.sqrt(2.0) * tau * np.sum(U * U, axis=0)
    R = np.maximum(np.diag(M.T @ G @ M), floor)
    Minv = np.linalg.inv(M)
    S = Minv.T @ (R[:, None] * Minv)
    S = 0.5 * (S + S.T)
    try:
        return np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        return np.linalg.cholesky(S + float(floor.min()) * np.eye(d))


def next_clip_scale(d, kept, kappa, k, n, n_eff, noise_ratio) -> float:
    """The next stage's basis scale ``κ`` (the basis is ``κ`` times the model whitening, so the clip,
    relative to the rows' whitened part, is ``κ`` times wider): the clip cuts the released rows at the
    share whitened Gaussian rows lose (:func:`~.budget.clipped_weight_fraction`), as long as the next
    stage's noise stays within the rows' sampling error.

    ``kept = (weight, std)``: this stage's released clipped weight over the rows and its noise std;
    ``kappa`` this stage's scale; ``k`` its number (stage 1's basis is not a whitening: its loss says
    nothing of the rows' tails, and the scale stays). The spread ``s`` at which Gaussian rows lose what these
    rows lost (:func:`~.budget.gaussian_spread`) gives ``κ' = κ·√s``, when the loss differs from the
    Gaussian share by more than 3 noise stds; never below 1 (the designed clip). The noise std grows as
    ``κ'²``: with ``τ_s`` this stage's standardised noise (from its effective row count ``n_eff``,
    :func:`effective_rows`: ``τ_s² = 1/n_eff − 1/n``) and ``noise_ratio`` the next stage's noise std over
    this one's at the same scale, ``κ'² ≤ κ²/(√n·τ_s·noise_ratio)``."""
    weight, std = kept
    if k < 2:
        return kappa
    g = clipped_weight_fraction(d)
    if abs(weight - g) <= 3.0 * std:
        return kappa
    target = kappa * np.sqrt(gaussian_spread(d, weight))
    tau_s = np.sqrt(max(1.0 / n_eff - 1.0 / n, 0.0))
    room = kappa * np.sqrt(1.0 / (np.sqrt(n) * tau_s * noise_ratio)) if tau_s > 0 else target
    return float(max(1.0, min(target, room)))


def noise_amplification(L: np.ndarray, L_next: np.ndarray) -> float:
    """How much larger a stage's noise is, against the covariance, when it is released in the basis ``L``
    instead of the whitening ``L_next`` (1: the same whitening up to scale and rotation). In the
    coordinates of ``L`` the covariance is ``T = L⁻¹ L_next L_nextᵀ L⁻ᵀ``, taken to trace ``d`` (the clip
    and the rows' weight set the scale, not the basis), and the noise ``τ·N`` (``N`` isometric); whitened,
    the noise is ``τ·T^(-1/2) N T^(-1/2)``, whose entries' variances sum to ``(tr T⁻¹)² + tr T⁻²``, against
    ``d² + d`` for ``T = I``. Directions in which ``L`` leaves the covariance small carry its noise
    amplified: they are the ones a conditional-independence test divides by."""
    d = L.shape[0]
    A = np.linalg.solve(L, L_next)
    T = A @ A.T
    Ti = np.linalg.inv(T / (np.trace(T) / d))
    return float((np.trace(Ti) ** 2 + np.sum(Ti * Ti)) / (d * (d + 1)))


def repeat_basis(L, L_next, info_pooled: float, info_rest: float) -> tuple[bool, float, float]:
    """Whether the next stages repeat the basis ``L`` (their releases then pool with the ones already
    made in it) instead of moving to ``L_next``. ``info_pooled``: the inverse noise variance of the
    releases made in ``L`` (summed); ``info_rest``: that of the stages still to come. Pooled in ``L``,
    the moments' noise variance is :func:`noise_amplification` over ``info_pooled + info_rest``; in
    ``L_next`` (at best a perfect whitening) it is at least ``1/info_rest``. The basis repeats when
    the first is the smaller: when the amplification is below the pooling gain
    ``(info_pooled + info_rest)/info_rest``. Returns the decision, the amplification and the gain."""
    amp = noise_amplification(L, L_next)
    gain = (info_pooled + info_rest) / info_rest
    return amp < gain, amp, gain


def entry_noise_std(tau: float, H: Optional[np.ndarray], sd: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """The release noise std of each entry of the learner's moments: a stage's noise is ``τ`` per
    entry in the whitened basis; mapped by ``A = diag(s̃)L`` (``H = AAᵀ``) entry ``(a, b)`` has variance
    ``τ²(H_aa H_bb + H_ab²)``; divided by ``sd_a sd_b`` for standardised moments. ``None``: no noise."""
    if H is None or not tau:
        return None
    h = np.diag(H)
    out = tau * np.sqrt(np.outer(h, h) + H * H)
    return out if sd is None else out / np.outer(sd, sd)


def _sum(raw) -> np.ndarray:
    return sum_shares(ShareReply.decode(r).values for r in raw)

def drive_suffstats(spec, plan, fleet, progress=None) -> SolverOutcome:
    """Coordinator side of fed-suffstats (see the module docstring)."""
    t_solve = 0.0
    d, n = plan.d, float(plan.n_total)
    fleet.traffic.enter("first")
    first = _sum(fleet.exchange(FirstRequest(0, d, d * (value_bins() + pair_bins()) if plan.private else d).encode()))
    scale_defaulted = centre_unresolved = None  # (private) the columns named in the basis entry
    if plan.private:
        pv = plan.privacy
        rel = next(r for r in pv.releases if r.kind == ReleaseKind.SCALE_HISTOGRAM)
        # the noise of the sum: P shares of std/√split each (split = P − t: more than std when t > 0)
        std_sum = pooled_noise_std(rel, d, plan.P)
        nv = d * value_bins()
        hv, hp = first[:nv].reshape(d, value_bins()) * n, first[nv:].reshape(d, pair_bins()) * n
        n_pairs = float(sum(p.rows // 2 for p in plan.participants))
        lo, width, coarse_scale, defaulted = coarse_bins(hv, hp, std_sum, n, n_pairs)
        # the centre histograms on linear bins placed by the scale histograms (post-processing)
        crel = next(r for r in pv.releases if r.kind == ReleaseKind.CENTRE_HISTOGRAM)
        fleet.traffic.enter("centre")
        raw = fleet.exchange(CentreRequest(CENTRE_ROUND, d, d * CENTRE_BINS, lo, width).encode())
        hc = _sum(raw).reshape(d, CENTRE_BINS) * n
        c_std = pooled_noise_std(crel, d, plan.P)
        centre, scale, unresolved = refine_centre(hc, lo, width, coarse_scale, c_std, n)
        if defaulted:
            scale_defaulted = [plan.names[j] for j in defaulted]
        if unresolved:
            centre_unresolved = [plan.names[j] for j in unresolved]
        stages = stage_releases(pv)
    else:
        centre, scale = first, np.ones(d)
        stages = [None]
    L = np.eye(d)
    L_ok, kappa_ok = None, 1.0
    kappa = 1.0  # the scale of the stage's basis over the model whitening (1: the clip as designed)
    history = []
    pool = None  # the releases made on the current broadcast, averaged
    W = np.zeros((d, d))
    for k, rel in enumerate(stages, start=1):
        fleet.traffic.enter(f"stage {k}")
        raw = fleet.exchange(BasisBroadcast(k, d, centre, scale, L).encode())
        t0 = time.perf_counter()
        M = from_upper_triangle(_sum(raw), d + 1) * n
        std_sum = 0.0 if rel is None else pooled_noise_std(rel, d, plan.P)
        if rel is not None:
            # releases made on the same broadcast (centre, scale, basis) sum the same clipped rows: their
            # inverse-variance average is the same statistic with the noise of all of them (post-processing)
            info = 1.0 / std_sum**2
            if pool is not None and np.array_equal(pool.centre, centre) and np.array_equal(pool.L, L):
                M = (pool.M * pool.info + M * info) / (pool.info + info)
                pool = _Pool(centre, L, M, pool.info + info, pool.stages + (k,))
                std_sum = float(1.0 / np.sqrt(pool.info))
            else:
                pool = _Pool(centre, L, M, info, (k,))
        w0 = M[0, 0]
        if not (np.all(np.isfinite(M)) and w0 > 3.0 * std_sum and w0 > 0):
            # the rows' weight after the clip is lost in the noise: this basis whitened too hard, or
            # the noise of this stage is too large for the rows (post-processing of released values
            # decides it); back to the last basis that worked, or (none yet) the same basis again
            # with the next stage's larger share
            last = k == len(stages)
            history.append(SuffstatsStage(
                round=k, tau=None, edges=None, score=None, weight=float(w0 / n),
                note="the clipped rows' weight is within the noise; "
                     + ("no stage was usable: the graph is empty" if L_ok is None and last else
                        "the previous basis is used next" if L_ok is not None else "the next stage tries again"),
            ))
            if L_ok is not None:
                L, kappa = L_ok, kappa_ok
            continue
        L_ok, kappa_ok = L, kappa
        kept = (float(w0 / n), std_sum / n)  # the clip's kept weight and its noise std (last usable stage)
        ybar = M[0, 1:] / w0
        Cy = M[1:, 1:] / w0 - np.outer(ybar, ybar)
        SL = scale[:, None] * L
        G = SL @ Cy @ SL.T  # raw units
        if rel is None:
            tau, H = 0.0, None
        else:
            tau = std_sum * OFFDIAGONAL / w0  # (the pooled noise's off-diagonal std, over the rows' weight)
            H = SL @ SL.T
        sd = np.sqrt(np.maximum(np.diag(G), 0.0))
        mean = centre + scale * (L @ ybar)  # the released weighted mean, raw units
        if plan.standardize:
            # the search on the correlation matrix (quantised: a change of units moves only last bits)
            check_scales(mean, sd, plan.names)
            Gs, sd = standardized(G)
            Hs = None if H is None else H / np.outer(sd, sd)
            res = learn_from_moments(Gs, n, tau, H=Hs, knowledge=plan.knowledge)
            W = res.W * sd[None, :] / sd[:, None]  # raw units, for the next basis
        elif plan.columns is not None:
            # categorical columns (a non-private run): the variables' graph by the degenerate Gaussian score
            # on the exact moments of the expanded columns
            Gs, Hs = G, H
            res = mixed_search(G, n, plan)
            W = res.W
        else:
            Gs, Hs = G, H
            res = learn_from_moments(G, n, tau, H=H, knowledge=plan.knowledge)
            W = res.W
        # the release noise of each entry of the searched moments (the last stage's feed the finished graph)
        noise = entry_noise_std(tau, H, sd if plan.standardize else None)
        n_eff_k = effective_rows(n, noise, Gs)
        history.append(SuffstatsStage(round=k, tau=tau, edges=int(res.E.sum()), score=res.info.get("score"),
                                      n_eff=round(n_eff_k),
                                      weight=float(w0 / n), clip_scale=None if kappa == 1.0 else round(kappa, 4),
                                      pooled=list(pool.stages) if pool is not None and len(pool.stages) > 1 else None))
        if k < len(stages):
            # the next stage's basis: the centre moved to the released weighted mean, the whitening
            # of the model covariance (both post-processing of the releases)
            Gz = L @ Cy @ L.T  # the moments in units of s̃
            Wz = W * scale[:, None] / scale[None, :]
            L_next = model_whitening(0.5 * (Gz + Gz.T), Wz, tau, L)
            k_next = kappa if rel is None else next_clip_scale(
                d, kept, kappa, k, n, n_eff_k, pooled_noise_std(stages[k], d, plan.P) / std_sum)
            L_next = k_next * L_next
            # a basis the sites would refuse (basis_problem: public bounds, far outside honest bases) is
            # not sent: the next stage uses this one again
            why = basis_problem(BasisBroadcast(k + 1, d, mean, scale, L_next), d, plan.private)
            if why is not None:
                history[-1] = replace(history[-1], note=f"the next basis would be refused by the sites ({why}); this one is used again")
            elif k_next == kappa and rel is not None:
                # a basis that whitens little better than this one is worth less than pooling the next
                # stages' releases with this one's (:func:`repeat_basis`; a widened clip always moves)
                info_rest = sum(pooled_noise_std(r, d, plan.P) ** -2 for r in stages[k:])
                again, amp, gain = repeat_basis(L, L_next, pool.info, info_rest)
                if again:
                    history[-1] = replace(history[-1], note=(
                        f"the next stage repeats this basis and pools its release with this one's: the model "
                        f"whitening would divide the noise's variance by {amp:.3g}, pooling by {gain:.3g}"))
                else:
                    centre, L, kappa = mean, L_next, k_next
            else:
                centre, L, kappa = mean, L_next, k_next
        t_solve += time.perf_counter() - t0
        if progress is not None:
            progress({"round": k, "h": 0.0, "edges": int(res.E.sum())})
    warns = []
    taus = [h.tau for h in history if h.tau]
    if plan.private and taus:
        w = noisy_moments_warning(plan, d, taus[-1])
        if w:
            warn([w], NoisyReleaseWarning, warns)
        w = clipped_rows_warning(d, *kept)
        if w:
            warn([w], ClippedRowsWarning, warns)
    confidence = None
    if L_ok is None:
        # no stage kept the rows' weight above the noise (decided on released values, after the plan was
        # accepted as expected to work): the run still ends with a graph, the empty one, and says why
        warn([empty_graph_message(plan, d)], NoisyReleaseWarning, warns)
        W = Wf = np.zeros((d, d))
        removed, choice = [], "no stage was usable: the empty graph"
        mean, sd = centre, scale
    else:
        t0 = time.perf_counter()
        # the last stage that kept its rows' weight: its search (res), moments (Gs) and their noise
        if plan.columns is not None:
            if plan.tables:
                res = second_phase(plan, fleet, Gs, n, res)
            W, Wf, removed, choice = res.W, res.W, [], res.info["note"]
            if not plan.tables:
                choice += "; no second phase: a site did not allow contingency tables (bnsl join --allow-tables)"
        else:
            W, Wf, removed, choice = final_graph(plan, spec, res, Gs, noise, n, (tau, Hs))
        t_solve += time.perf_counter() - t0
    if plan.private and plan.bootstrap and L_ok is not None:
        # edge confidence from the last stage's release resampled (post-processing)
        def finish(res_b, G_b):
            W_b = final_graph(plan, spec, res_b, G_b, noise, n, (tau, Hs))[1]
            return to_original_units(W_b, sd) if plan.standardize else W_b

        confidence = resample_release(plan, Gs, n, tau, None if H is None else SL,
                                      sd if plan.standardize else None, finish)
    history[-1] = replace(history[-1], note=choice if history[-1].note is None else history[-1].note + "; " + choice)
    summaries = fleet.finish()
    return SolverOutcome(
        W, Wf, summaries,
        # without --threshold the searches' scores decide the edges (the default learner's polish too)
        threshold_applied=plan.threshold if plan.threshold_given else None,
        rounds=len(stages),
        converged=True,
        timing=SolverTiming(compute_s=t_solve + sum(s["compute_s"] for s in summaries)),
        messages="sum-shaped exchanges only: " + ("the scale histograms, the centre histograms, then the whitened moments "
                                                 "per stage"
                                                 if plan.private else "the column-mean shares, then the moments"),
        warnings=warns,
        final=SolverFinal(h=0.0),
        history=history,
        removed_for_acyclicity=removed,
        solver_issues=[],
        confidence=confidence,
        method_entry=SuffstatsBasis(centre=centre.tolist(), scale=scale.tolist(), stages=len(stages),
                                 scale_defaulted=scale_defaulted, centre_unresolved=centre_unresolved),
        # (categorical columns: the score is unit-free, the spreads of indicator columns are no units)
        standardize=None if plan.columns is not None else PooledStats(
            applied=bool(plan.standardize),
            source="the released moments (no extra message" + (", no extra release)" if plan.private else ")"),
            mean=mean.tolist(),
            sd=sd.tolist(),
        ),
    )


def mixed_search(G: np.ndarray, n: float, plan) -> MomentSearchResult:
    """The variables' DAG and weights from the exact covariance ``G`` of the expanded columns
    (:func:`~bnsl_cli.solvers.mixed_score.mixed_graph`, with the plan's knowledge over the variables)."""
    cols = plan.columns
    blocks = cols.blocks()
    categorical = [cols.kind(v) == CATEGORICAL for v in cols.names]
    E = mixed_graph(G, n, blocks, plan.forbidden_mask(), plan.required_mask())
    W = mixed_weights(G, E, blocks, categorical)
    note = (f"the degenerate Gaussian score on the moments of {G.shape[0]} expanded columns "
            f"({sum(categorical)} categorical of {len(blocks)} variables): order search, {int(E.sum())} edges")
    return MomentSearchResult(W, E, {"score": "degenerate-gaussian", "note": note})


def table_groups(E: np.ndarray, cols) -> list:
    """The second phase's tables: for every categorical variable whose neighbours in the first phase's
    DAG ``E`` are all categorical (and at least one), the variable and its neighbours, when their table
    has at most :data:`~bnsl_cli.federated.methods.suffstats.sequence.MAX_TABLE_CELLS` cells and at most
    :data:`~bnsl_cli.federated.methods.suffstats.sequence.MAX_TABLE_VARIABLES` variables."""
    K = cols.level_counts()
    cat = [cols.kind(v) == CATEGORICAL for v in cols.names]
    skel = E | E.T
    groups, total = [], 0
    for j in range(len(cols.names)):
        nb = [int(i) for i in np.flatnonzero(skel[:, j])]
        if not cat[j] or not nb or not all(cat[i] for i in nb) or len(nb) + 1 > MAX_TABLE_VARIABLES:
            continue
        cells = int(np.prod([K[v] for v in [j, *nb]]))
        if cells > MAX_TABLE_CELLS or total + cells > MAX_TABLE_VALUES:
            continue
        groups.append((j, *nb))
        total += cells
    return groups


def second_phase(plan, fleet, G: np.ndarray, n: float, res: MomentSearchResult) -> MomentSearchResult:
    """The second phase of mixed data (non-private): the sites' sums of the contingency tables of every
    categorical variable with its first-phase neighbours (:func:`table_groups`; one more sum-shaped
    exchange), then the order search on one score — the multinomial BIC for those variables (parents among
    their neighbours), the degenerate Gaussian score for the rest — from the first phase's graph and the
    usual starts (:func:`~bnsl_cli.solvers.mixed_score.best_order_graph`)."""
    cols = plan.columns
    groups = table_groups(res.E, cols)
    if not groups:
        return res
    K = cols.level_counts()
    count = int(sum(np.prod([K[v] for v in g]) for g in groups))
    fleet.traffic.enter("tables")
    raw = fleet.exchange(TableRequest(TABLE_ROUND, plan.d, count, tuple(groups)).encode())
    flat = np.rint(_sum(raw) * n)
    tables, off = {}, 0
    for g in groups:
        cells = int(np.prod([K[v] for v in g]))
        tables[g[0]] = (list(g), flat[off : off + cells].reshape([K[v] for v in g]))
        off += cells
    blocks = cols.blocks()
    score = TwoPhaseScore(MixedGaussianScore(G, n, blocks), tables, n)
    E = best_order_graph(score, plan.forbidden_mask(), plan.required_mask(), starts=(res.E,))
    categorical = [cols.kind(v) == CATEGORICAL for v in cols.names]
    W = mixed_weights(G, E, blocks, categorical)
    note = (res.info["note"] + f"; second phase: the multinomial BIC of {len(groups)} categorical variables on their "
            f"contingency tables with their neighbours ({count} cells), {int(E.sum())} edges")
    return MomentSearchResult(W, E, {"score": "degenerate-gaussian+multinomial", "note": note})
