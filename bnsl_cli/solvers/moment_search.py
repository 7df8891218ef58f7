"""A structure search that knows the noise of its second moments (the private pooled-statistics methods' learner).

Arrays in, arrays out: no messages, no ledger. The input is a released second-moment matrix ``S``
of standardised columns (``d × d``, the pooled ``Σ z zᵀ / n`` plus symmetric Gaussian noise of a
known, public standard deviation ``tau`` per entry) and the row count ``n``.

Why a plain score fails on such moments: the sampling error of ``S`` is proportional to the
covariance and leaves its small eigen-directions nearly intact, while isotropic release noise of
std ``τ`` does not; a partial covariance ``C_ij·S`` of ``i`` and ``j`` given a parent set ``S`` whose
partial variance ``C_ii·S`` is small is then mostly noise, and a score that takes the moments as
exact turns it into an edge.

The test used here (errors in variables, to first order in the noise ``E``): for ``j`` with parents
``S``, let ``β_j = S_SS⁻¹ S_Sj`` and ``β_i = S_SS⁻¹ S_Si`` (``i ∉ S``). The partial covariance
``C_ij = S_ij − S_iS β_j`` changes by ``E_ij − β_iᵀ E_Sj − E_iS β_j + β_iᵀ E_SS β_j``, whose variance
is at most about ``τ² (1 + ‖β_i‖²)(1 + ‖β_j‖²)``; its sampling variance is ``C_ii R_j / n``
(``R_j`` the residual variance of ``j`` on ``S``). An edge ``i → j`` is admitted only when

    t²_ij = C_ij² / (C_ii R_j / n + τ² (1 + ‖β_i‖²)(1 + ‖β_j‖²))  >  κ,   κ = log n + 2 log d

(the extended-BIC threshold of a noise-free search, where the noise term vanishes; Chen & Chen
2008), and an edge whose statistic given the other parents of its child falls to ``κ`` or below is
removed (the same formula with ``S`` the other parents). Among the admitted moves the search takes
the one with the largest gain of a Gaussian log-likelihood (``equal``: one noise variance for all
nodes, ``n·d/2·log Σ_j R_j``; ``node``: ``Σ_j n/2·log R_j``). With ``tau = 0`` it is a plain
extended-BIC greedy search. The Gaussian score (the fits on the moments, the residual variances, the
BIC and ``κ``) lives in :mod:`bnsl_cli.solvers.gaussian_score`, shared with the polish's search; this
search uses its ``"inverse"`` / ``"lstsq"`` forms and ``κ`` in ``units="statistic"``.

``W[i, j]`` is the edge ``i → j``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from bnsl_cli.dag import DescendantCache, can_reverse, threshold_to_dag
from bnsl_cli.solvers.gaussian_score import (
    added_residuals,
    bic_of,
    check_score,
    dropped_residuals,
    ebic_penalty,
    fit_on_parents,
    least_squares_weights,
    residual_floor,
)
from bnsl_cli.stats import project_psd

__all__ = [
    "MomentSearchResult", "noise_aware_search", "topdown_order", "ordered_parents", "learn_from_moments",
    "family_statistics", "backward_parents",
]


def _metric(d: int, u: Optional[np.ndarray], H: Optional[np.ndarray]) -> np.ndarray:
    """The noise metric ``H = L Lᵀ`` of a release whose noise is ``τ·L N Lᵀ`` (``N`` symmetric with
    i.i.d. unit entries): ``diag(u²)`` for noise ``τ·u_a·u_b`` per entry, the identity by default."""
    if H is not None:
        return np.asarray(H, float)
    return np.diag(np.ones(d) if u is None else np.asarray(u, float) ** 2)


def family_statistics(G: np.ndarray, j: int, S: np.ndarray, n: float, tau2, H: Optional[np.ndarray] = None):
    """Node ``j`` with parents ``S``: ``(R, add, t2_add, t2_par)``: the residual variance ``R``;
    for every ``i`` the residual variance with ``i`` added and the test statistic of that addition
    (0 where not applicable); for every parent ``S_k`` the statistic of keeping it.

    The release noise of ``G`` is ``τ·L N Lᵀ`` with ``H = L Lᵀ`` (identity when ``None``). A
    partial covariance ``aᵀ G b`` then has noise variance ``τ²((aᵀHa)(bᵀHb) + (aᵀHb)²)``
    (``a = e_i − β_i``, ``b = e_j − β_j`` on ``S``; first order in the noise). A sum of independent
    noises ``Σ_m τ_m·L_m N_m L_mᵀ``: ``tau2`` a sequence of ``τ_m²`` and ``H`` the stack of ``H_m``."""
    d = G.shape[0]
    if H is None:
        H = np.eye(d)
    Hs = H[None] if H.ndim == 2 else H
    t2s = np.atleast_1d(np.asarray(tau2, dtype=float))
    if t2s.size != Hs.shape[0]:
        raise ValueError("one noise variance per noise metric")
    Ainv, K, C, Cd = fit_on_parents(G, j, S, singular="pinv")  # K's column i: the coefficients β_i of i on S
    if S.size:
        bj = K[:, j]
    floor = residual_floor(G, j)
    R = max(float(C[j]), floor)
    noise_add = np.zeros(d)
    noise_keep = np.zeros(S.size)
    for t2m, Hm in zip(t2s, Hs):
        if t2m == 0.0:
            continue
        hd = np.diag(Hm)
        if S.size:
            HS = Hm[S, :]
            HSS = Hm[np.ix_(S, S)]
            aHa = hd - 2.0 * np.einsum("ki,ki->i", HS, K) + np.einsum("ki,ki->i", K, HSS @ K)
            bHb = float(aHa[j])
            aHb = Hm[:, j] - HS.T @ bj - K.T @ Hm[S, j] + K.T @ (HSS @ bj)
            # keeping parent S_k: b_k = rowₖ(A⁻¹)·(G_Sj − G_SS β_j) to first order, x = rowₖ(A⁻¹) on S
            xHx = np.einsum("kl,lm,km->k", Ainv, HSS, Ainv)
            xHb = Ainv @ (Hm[S, j] - HSS @ bj)
            noise_keep += t2m * (xHx * max(bHb, 0.0) + xHb**2)
        else:
            aHa, bHb, aHb = hd.copy(), float(hd[j]), Hm[:, j].copy()
        noise_add += t2m * (np.maximum(aHa, 0.0) * max(bHb, 0.0) + aHb**2)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        add = added_residuals(R, C, Cd, floor)
        t2 = C**2 / (Cd * add / n + noise_add)
    bad = ~(Cd > floor)
    add[bad] = np.nan
    t2[bad] = 0.0
    add[j] = np.nan
    t2[j] = 0.0
    if S.size:
        add[S] = np.nan
        t2[S] = 0.0
        vk = R * np.diag(Ainv) / n + noise_keep
        with np.errstate(divide="ignore", invalid="ignore"):
            t2_par = np.where(vk > 0, bj**2 / vk, 0.0)
    else:
        t2_par = np.zeros(0)
    return R, add, np.nan_to_num(t2, nan=0.0, posinf=0.0), t2_par


def noise_aware_search(
    G: np.ndarray,
    n: float,
    tau: float = 0.0,
    score: str = "equal",
    E0: Optional[np.ndarray] = None,
    kappa: Optional[float] = None,
    max_moves: Optional[int] = None,
    u: Optional[np.ndarray] = None,
    H: Optional[np.ndarray] = None,
    forbidden: Optional[np.ndarray] = None,
    required: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, list]:
    """Greedy search over deletions, additions and reversals (every move keeps the graph acyclic),
    admitting only edges whose noise-aware test statistic exceeds ``kappa`` (see the module
    docstring). ``G``: the (PSD) second moments; ``tau``: the std of the release noise per entry
    of ``G`` (times ``u_a u_b`` when the columns' scales ``u`` are given). Returns the DAG (bool, ``E[i, j]`` = edge ``i → j``) and the moves ``(kind, i, j)``.

    Prior knowledge (d × d bool masks): no addition or reversal creates a ``forbidden`` edge; a
    ``required`` edge is never deleted nor reversed (``E0`` must hold the required edges)."""
    check_score(score, auto=False)
    G = np.asarray(G, dtype=float)
    d = G.shape[0]
    n = float(n)
    tau2 = np.asarray(tau, dtype=float) ** 2
    H = _metric(d, u, H)
    kap = ebic_penalty(n, d, units="statistic") if kappa is None else float(kappa)
    max_moves = 10 * d + 10 if max_moves is None else int(max_moves)
    E = np.zeros((d, d), bool) if E0 is None else np.asarray(E0, bool).copy()
    np.fill_diagonal(E, False)
    ch = [set(np.flatnonzero(E[i]).tolist()) for i in range(d)]
    R = np.empty(d)
    ADD = np.full((d, d), np.nan)
    T2 = np.zeros((d, d))  # T2[i, j]: statistic of adding i → j
    KEEP = np.full((d, d), np.inf)  # KEEP[i, j]: statistic of the edge i → j given j's other parents
    DEL = np.full((d, d), np.nan)  # DEL[i, j]: residual of j without parent i

    def refresh(j: int) -> None:
        S = np.flatnonzero(E[:, j])
        R[j], ADD[:, j], T2[:, j], tp = family_statistics(G, j, S, n, tau2, H)
        KEEP[:, j] = np.inf
        KEEP[S, j] = tp
        DEL[:, j] = np.nan
        DEL[S, j] = dropped_residuals(G, j, S, R[j])

    for j in range(d):
        refresh(j)
    moves: list = []
    node = score == "node"
    reach = DescendantCache(ch)  # adding i → j closes a cycle iff i is among j's descendants
    seen = {E.tobytes()}  # graphs visited: a deterministic search that returns to one would circle forever

    def gain(j_new: np.ndarray, r_new: np.ndarray, i_new=None, r2_new=None) -> np.ndarray:
        """Log-likelihood change (negative = better) of replacing R_j by r (and R_i by r2)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            if node:
                g = n / 2.0 * (np.log(r_new) - np.log(R[j_new]))
                if i_new is not None:
                    g = g + n / 2.0 * (np.log(r2_new) - np.log(R[i_new]))
                return g
            T = R.sum()
            Tn = T - R[j_new] + r_new
            if i_new is not None:
                Tn = Tn - R[i_new] + r2_new
            return n * d / 2.0 * (np.log(Tn) - np.log(T))

    while len(moves) < max_moves:
        # 1. an edge the noise could explain goes first (the weakest)
        weak = E & (KEEP <= kap)
        if required is not None:
            weak &= ~required
        if weak.any():
            wi, wj = np.nonzero(weak)
            k = int(np.argmin(KEEP[wi, wj]))
            i, j = int(wi[k]), int(wj[k])
            E[i, j] = False
            ch[i].discard(j)
            reach.edge_changed(i)
            refresh(j)
            moves.append(("delete", i, j))
            continue
        best = None
        # a move must gain more than rounding: a reversal between Markov-equivalent graphs gains
        # nothing, and without this margin its rounding error would flip the edge back and forth
        with np.errstate(divide="ignore", invalid="ignore"):
            level = n / 2.0 * np.log(R).sum() if node else n * d / 2.0 * np.log(R.sum())
        tol = -1e-9 * max(1.0, abs(float(level)) if np.isfinite(level) else 1.0)
        # 2. additions that pass the test, by likelihood gain
        ok = (T2 > kap) & ~E & ~E.T & np.isfinite(ADD)
        np.fill_diagonal(ok, False)
        if forbidden is not None:
            ok &= ~forbidden
        if ok.any():
            ai, aj = np.nonzero(ok)
            g = gain(aj, ADD[ai, aj])
            for k in np.argsort(g, kind="stable"):
                if not g[k] < tol:
                    break
                i, j = int(ai[k]), int(aj[k])
                if i in reach(j):
                    continue
                # the edge must also pass the test it will be kept by (exact, given the new family);
                # otherwise the addition and the removal below would undo each other
                S1 = np.flatnonzero(E[:, j] | (np.arange(d) == i))
                if family_statistics(G, j, S1, n, tau2, H)[3][int(np.searchsorted(S1, i))] > kap:
                    best = (float(g[k]), "add", i, j)
                    break
        # 3. reversals i → j to j → i that improve the likelihood, the reversed edge passing the test
        ei, ej = np.nonzero(E)
        if ei.size:
            ok_rev = T2[ej, ei] > kap
            if forbidden is not None:
                ok_rev &= ~forbidden[ej, ei]
            if required is not None:
                ok_rev &= ~required[ei, ej]
            g = gain(ej, DEL[ei, ej], ei, ADD[ej, ei])
            g[~ok_rev | ~np.isfinite(g)] = np.inf
            limit = tol if best is None else min(tol, best[0])
            for k in np.flatnonzero(g < limit)[np.argsort(g[g < limit], kind="stable")]:
                i, j = int(ei[k]), int(ej[k])
                if not can_reverse(ch, i, j):
                    continue
                # as for an addition: the reversed edge j → i must pass the test it will be kept by
                S1 = np.flatnonzero(E[:, i] | (np.arange(d) == j))
                if family_statistics(G, i, S1, n, tau2, H)[3][int(np.searchsorted(S1, j))] > kap:
                    best = (float(g[k]), "reverse", i, j)
                    break
        if best is None:
            break
        _, kind, i, j = best
        if kind == "add":
            E[i, j] = True
            ch[i].add(j)
            reach.edge_changed(i)
            refresh(j)
        else:
            E[i, j] = False
            ch[i].discard(j)
            E[j, i] = True
            ch[j].add(i)
            reach.edge_changed(i)
            reach.edge_changed(j)
            refresh(j)
            refresh(i)
        moves.append((kind, i, j))
        state = E.tobytes()
        if state in seen:
            break  # the moves went round in a circle (tests that disagree at their margins): stop here
        seen.add(state)
    return E, moves


def topdown_order(G: np.ndarray) -> list:
    """A causal order from second moments: repeatedly the node with the smallest residual variance
    given the nodes already ordered (exact for a linear SEM with equal noise variances, Chen, Drton
    & Wang 2019; a starting point otherwise — the search afterwards may reverse edges).

    The residual covariances given the ordered nodes are kept and updated by one sweep per step
    (``Σ ← Σ − Σ_·k Σ_k· / Σ_kk``), O(d²) a step; a node whose residual variance is (numerically)
    nothing adds no direction and leaves them as they are, as a least-squares fit would."""
    d = G.shape[0]
    Sig = np.array(G, dtype=float, copy=True)
    tiny = 1e-12 * max(float(np.max(np.abs(np.diag(Sig)))) if d else 0.0, 1e-300)
    order: list = []
    rest = list(range(d))
    while rest:
        r = np.diag(Sig)[rest]
        k = int(np.argmin(r))
        node = rest.pop(k)
        order.append(node)
        piv = Sig[node, node]
        if rest and piv > tiny:
            col = Sig[:, node].copy()
            Sig -= np.outer(col, col) / piv
    return order


def ordered_parents(G: np.ndarray, order, n: float, tau: float = 0.0, u: Optional[np.ndarray] = None,
                    kappa: Optional[float] = None, H: Optional[np.ndarray] = None) -> np.ndarray:
    """The DAG of ``order``: each node's parents among its predecessors by forward selection (the
    predecessor with the largest noise-aware statistic above ``κ``), then backward elimination
    (a parent whose statistic given the others is ``κ`` or below leaves, the weakest first)."""
    d = G.shape[0]
    kap = ebic_penalty(n, d, units="statistic") if kappa is None else float(kappa)
    tau2 = np.asarray(tau, dtype=float) ** 2
    H = _metric(d, u, H)
    E = np.zeros((d, d), bool)
    for pos, j in enumerate(order):
        pre = np.zeros(d, bool)
        pre[list(order[:pos])] = True
        S: list = []
        for _ in range(pos):
            _, _, t2, _ = family_statistics(G, j, np.asarray(sorted(S), dtype=int), n, tau2, H)
            t2 = np.where(pre, t2, 0.0)
            k = int(np.argmax(t2))
            if not t2[k] > kap:
                break
            S.append(k)
            pre[k] = False
        E[backward_parents(G, j, S, n, tau2, H, kap), j] = True
    return E


def backward_parents(G: np.ndarray, j: int, parents, n: float, tau2, H: np.ndarray, kappa: float,
                     keep: Optional[np.ndarray] = None) -> list:
    """Backward elimination of node ``j``'s parents: while a parent's statistic of being kept given
    the others (:func:`family_statistics`) is ``kappa`` or below, the weakest such parent leaves;
    parents in ``keep`` (a bool vector over the nodes: required edges) never do. Returns the parents
    that stay."""
    S = list(parents)
    while S:
        Sa = np.asarray(sorted(S), dtype=int)
        tp = family_statistics(G, j, Sa, n, tau2, H)[3]
        if keep is not None:
            tp = np.where(keep[Sa], np.inf, tp)
        k = int(np.argmin(tp))
        if tp[k] > kappa:
            break
        S.remove(int(Sa[k]))
    return S


@dataclass
class MomentSearchResult:
    W: np.ndarray  # weights in the units of G (standardised), W[i, j] the edge i → j
    E: np.ndarray  # the DAG
    info: dict = field(default_factory=dict)


def learn_from_moments(G: np.ndarray, n: float, tau: float = 0.0, score: str = "auto",
                    u: Optional[np.ndarray] = None, start: str = "order", H: Optional[np.ndarray] = None,
                    knowledge=None) -> MomentSearchResult:
    """The DAG from released second moments ``G`` (any symmetric matrix; projected to PSD here)
    with release noise std ``tau·u_a·u_b`` on entry ``(a, b)``. ``start="order"``: the search
    starts from :func:`ordered_parents` of :func:`topdown_order`; ``"empty"``: from no edges.
    ``score="auto"``: the equal-variance search, then the per-node search from its result, keeping
    the model with the lower BIC (the per-node model pays for ``d − 1`` more variances)."""
    check_score(score)
    if start not in ("order", "empty"):
        raise ValueError(f"start must be 'order' or 'empty', got {start!r}")
    A = np.asarray(G, dtype=float)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"the second moments must be a square matrix, got shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError("the second moments are not finite")
    d = A.shape[0]
    A = project_psd(A)
    info: dict = {"tau": np.asarray(tau, dtype=float).tolist(), "kappa": ebic_penalty(n, d, units="statistic"),
                  "start": start}
    E0 = None
    if start == "order":
        order = topdown_order(A)
        E0 = ordered_parents(A, order, n, tau, u, H=H)
        info["start_edges"] = int(E0.sum())
    kw = {}
    if knowledge is not None:
        # prior knowledge: the start loses its forbidden edges and gains the required ones (a cycle
        # they close is broken among the other edges), and the search keeps to both masks
        F, Rq = knowledge.forbidden_mask(), knowledge.required_mask()
        base = np.zeros((d, d), bool) if E0 is None else (E0 & ~F)
        E0 = threshold_to_dag(np.where(Rq, 2.0, base.astype(float)), 0.0, keep=Rq)[0] != 0
        kw = {"forbidden": F, "required": Rq}
    if score == "auto":
        E1, m1 = noise_aware_search(A, n, tau, "equal", E0=E0, u=u, H=H, **kw)
        E2, m2 = noise_aware_search(A, n, tau, "node", E0=E1, u=u, H=H, **kw)
        pen = ebic_penalty(n, d, units="statistic") / 2.0  # the edge test's level, per edge
        b1 = bic_of(A, n, E1, "equal", pen, form="inverse")
        b2 = bic_of(A, n, E2, "node", pen, form="inverse")
        chosen = "equal" if b1 <= b2 else "node"
        E, moves = (E1, m1) if chosen == "equal" else (E2, m1 + m2)
        info["bic"] = {"equal": float(b1), "node": float(b2)}
    else:
        E, moves = noise_aware_search(A, n, tau, score, E0=E0, u=u, H=H, **kw)
        chosen = score
    info["score"] = chosen
    info["moves"] = {k: sum(1 for m in moves if m[0] == k) for k in ("add", "delete", "reverse")}
    return MomentSearchResult(least_squares_weights(A, E, form="lstsq"), E, info)
