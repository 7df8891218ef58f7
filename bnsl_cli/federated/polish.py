"""Polish: a score-based local search on the consensus DAG, after the ADMM rounds (fed-sparse).

The ADMM consensus of an acyclicity-constrained least-squares problem can settle in a local
optimum where a node and its child exchange roles (a collider's parents attach to its child,
with reversed and compensating extra edges). A few greedy moves of a score-based search fix that.

1. The coordinator picks the node pairs it needs from the consensus alone (post-processing):
   the edges of the thresholded DAG ``E0`` and the *candidate* pairs ``|W_raw| > candidate`` in
   either direction define each node's neighbourhood ``N_j``; it requests the second moments on
   ``F_j × F_j`` with ``F_j = {j} ∪ N_j`` for every ``j`` (a :class:`GramRequest`).
2. Each participant answers with its share ``Σ_rows x_a x_b / n`` of the pooled second moments on
   those pairs (non-private: exact; private: clipped products with Gaussian noise, an accounted
   release — see :mod:`bnsl_cli.federated.dp_participant`). Summed, they are the pooled ones.
3. The coordinator hill-climbs from ``E0`` over edge deletions, reversals and additions of candidate
   edges that keep the graph acyclic, on the equal-variance Gaussian score (the least-squares loss
   the ADMM minimises, with a BIC penalty):

       score(E) = n·d/2 · log Σ_j RSS_j(pa_j) + log(n)/2 · |E|,   RSS_j(S) = G_jj − G_jS G_SS⁻¹ G_Sj

   taking the best improving move until none improves; then it fits the least-squares weights of
   every family, drops edges with ``|w| ≤ threshold`` and refits.

Private runs (noisy moments, whose noise std per entry is public): an edge is added only when its
partial second moment exceeds 3 noise stds, and after the search edges whose partial second moment
is within 3 noise stds are dropped, weakest first — the BIC penalty alone is far below the noise.

Only the consensus, the pair list and the summed moments are used; the rows stay with the
participants. ``W[i, j]`` is the edge ``i → j``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from bnsl_cli.dag import threshold_to_dag
from bnsl_cli.federated.messages import GramReply, GramRequest

__all__ = [
    "POLISH_CANDIDATES",
    "polish_pairs",
    "candidate_edges",
    "family_rss",
    "hill_climb",
    "least_squares_weights",
    "polish_graph",
    "PolishResult",
    "PolishStage",
]

#: Consensus entries with ``|W_ij|`` above this are candidate edges for the local search.
POLISH_CANDIDATES = 0.1


def _neighbourhoods(W_raw: np.ndarray, E0: np.ndarray, candidate: float) -> np.ndarray:
    A = (np.abs(W_raw) > candidate) | E0.astype(bool)
    A = A | A.T
    np.fill_diagonal(A, False)
    return A


def polish_pairs(W_raw: np.ndarray, E0: np.ndarray, candidate: float = POLISH_CANDIDATES) -> np.ndarray:
    """Sorted flat indices ``a·d + b`` (``a ≤ b``) of the second moments the search needs."""
    d = W_raw.shape[0]
    A = _neighbourhoods(W_raw, E0, candidate)
    flat = []
    for j in range(d):
        F = np.concatenate(([j], np.flatnonzero(A[:, j])))
        a, b = np.meshgrid(F, F, indexing="ij")
        keep = a <= b
        flat.append(a[keep].astype(np.int64) * d + b[keep])
    return np.unique(np.concatenate(flat)) if flat else np.zeros(0, np.int64)


def candidate_edges(W_raw: np.ndarray, candidate: float = POLISH_CANDIDATES) -> list:
    """Directed candidate edges ``(i, j)`` with ``|W_raw[i, j]| > candidate``, strongest first."""
    A = np.abs(W_raw) > candidate
    np.fill_diagonal(A, False)
    i, j = np.nonzero(A)
    order = np.argsort(-np.abs(W_raw[i, j]), kind="stable")
    return [(int(i[k]), int(j[k])) for k in order]


def family_rss(G: np.ndarray, j: int, parents) -> float:
    """``G_jj − G_jS G_SS⁻¹ G_Sj`` (the per-row residual variance of ``j`` on ``S``); ``inf`` when
    ``G_SS`` is singular or an entry is missing, floored at a tiny positive value."""
    idx = sorted(parents)
    if not idx:
        r = float(G[j, j])
    else:
        A = G[np.ix_(idx, idx)]
        b = G[idx, j]
        try:
            r = float(G[j, j] - b @ np.linalg.solve(A, b))
        except np.linalg.LinAlgError:
            return np.inf
    if not np.isfinite(r):
        return np.inf
    return max(r, 1e-12 * max(abs(float(G[j, j])), 1e-300))


def _reaches(children: list, src: int, dst: int) -> bool:
    """Is there a directed path ``src → … → dst``?"""
    stack, seen = [src], {src}
    while stack:
        u = stack.pop()
        if u == dst:
            return True
        for v in children[u]:
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return False


@dataclass
class _Search:
    G: np.ndarray
    cache: dict = field(default_factory=dict)

    def rss(self, j: int, S: frozenset) -> float:
        key = (j, S)
        r = self.cache.get(key)
        if r is None:
            r = family_rss(self.G, j, S)
            self.cache[key] = r
        return r


def hill_climb(
    G: np.ndarray,
    n: int,
    E0: np.ndarray,
    candidates,
    penalty: Optional[float] = None,
    max_moves: Optional[int] = None,
    noise_std: Optional[np.ndarray] = None,
    z: float = 3.0,
) -> tuple[np.ndarray, list]:
    """Greedy best-improvement search from the DAG ``E0`` (bool, ``E0[i, j]`` = edge ``i → j``).

    Moves: delete an edge, reverse an edge, add a candidate edge ``(i, j)``; every move keeps the
    graph acyclic. Score: ``n·d/2·log Σ_j RSS_j + penalty·|E|`` (``penalty`` defaults to the BIC
    ``log(n)/2``). With ``noise_std`` (the std of the noise in each entry of ``G``, private runs), an
    edge ``i → j`` is added only when its partial second moment given ``pa_j`` exceeds ``z`` times the
    noise std of ``G_ij``: otherwise the noise alone could explain the gain. Returns the final DAG and
    the moves made as ``(kind, i, j)``."""
    d = G.shape[0]
    pen = float(np.log(n) / 2.0) if penalty is None else float(penalty)
    max_moves = 10 * d + 10 if max_moves is None else int(max_moves)
    search = _Search(G)
    pa = [frozenset(np.flatnonzero(E0[:, j]).tolist()) for j in range(d)]
    ch = [set(np.flatnonzero(E0[i]).tolist()) for i in range(d)]
    R = np.array([search.rss(j, pa[j]) for j in range(d)])
    ne = int(sum(len(p) for p in pa))
    scale = n * d / 2.0

    def objective(rss_sum: float, edges: int) -> float:
        return scale * np.log(rss_sum) + pen * edges if rss_sum > 0 and np.isfinite(rss_sum) else np.inf

    current = objective(R.sum(), ne)
    moves = []
    if not np.isfinite(current):
        return E0.astype(bool).copy(), moves
    while len(moves) < max_moves:
        best_gain, best = -1e-9 * max(1.0, abs(current)), None
        total = R.sum()
        for j in range(d):
            for i in pa[j]:
                rj = search.rss(j, pa[j] - {i})
                gain = objective(total - R[j] + rj, ne - 1) - current
                if gain < best_gain:
                    best_gain, best = gain, ("delete", i, j, rj, None)
                ri = search.rss(i, pa[i] | {j})
                gain = objective(total - R[j] + rj - R[i] + ri, ne) - current
                if gain < best_gain:
                    ch[i].discard(j)
                    ok = not _reaches(ch, i, j)  # reversing i → j closes a cycle iff another path i ⇝ j exists
                    ch[i].add(j)
                    if ok:
                        best_gain, best = gain, ("reverse", i, j, rj, ri)
        for i, j in candidates:
            if i in pa[j] or j in pa[i]:
                continue
            rj = search.rss(j, pa[j] | {i})
            gain = objective(total - R[j] + rj, ne + 1) - current
            if gain < best_gain and noise_std is not None:
                # partial second moment² = (RSS_j(S) − RSS_j(S ∪ i)) · RSS_i(S)
                partial2 = max(R[j] - rj, 0.0) * search.rss(i, pa[j])
                if not partial2 > (z * noise_std[i, j]) ** 2:
                    continue
            if gain < best_gain and not _reaches(ch, j, i):
                best_gain, best = gain, ("add", i, j, rj, None)
        if best is None:
            break
        kind, i, j, rj, ri = best
        if kind in ("delete", "reverse"):
            pa[j] = pa[j] - {i}
            ch[i].discard(j)
            R[j] = rj
            ne -= 1
        if kind == "reverse":
            pa[i] = pa[i] | {j}
            ch[j].add(i)
            R[i] = ri
            ne += 1
        if kind == "add":
            pa[j] = pa[j] | {i}
            ch[i].add(j)
            R[j] = rj
            ne += 1
        current = objective(R.sum(), ne)
        moves.append((kind, int(i), int(j)))
    E = np.zeros((d, d), dtype=bool)
    for j in range(d):
        E[list(pa[j]), j] = True
    return E, moves


def prune_within_noise(G: np.ndarray, E: np.ndarray, noise_std: np.ndarray, z: float = 3.0) -> tuple[np.ndarray, int]:
    """Drop, weakest first, the edges ``i → j`` whose partial second moment given the other parents
    of ``j`` is within ``z`` noise stds of ``G_ij`` (private runs: the noisy moments cannot tell them
    from no edge). Returns the pruned DAG and how many edges were dropped."""
    E = E.copy()
    search = _Search(G)  # families recur across the passes: cache their residual variances
    dropped = 0
    while True:
        worst, where = 1.0, None
        for i, j in zip(*np.nonzero(E)):
            S = frozenset(np.flatnonzero(E[:, j]).tolist())
            rest = S - {int(i)}
            partial2 = max(search.rss(j, rest) - search.rss(j, S), 0.0) * search.rss(i, rest)
            ratio = partial2 / max((z * noise_std[i, j]) ** 2, 1e-300)
            if ratio < worst:
                worst, where = ratio, (i, j)
        if where is None:
            return E, dropped
        E[where] = False
        dropped += 1


def least_squares_weights(G: np.ndarray, E: np.ndarray) -> np.ndarray:
    """Least-squares weights of every family of the DAG ``E`` from the second moments ``G``."""
    d = G.shape[0]
    W = np.zeros((d, d))
    for j in range(d):
        S = np.flatnonzero(E[:, j])
        if S.size:
            try:
                W[S, j] = np.linalg.solve(G[np.ix_(S, S)], G[S, j])
            except np.linalg.LinAlgError:
                W[S, j] = np.linalg.lstsq(G[np.ix_(S, S)], G[S, j], rcond=None)[0]
    return W


@dataclass
class PolishResult:
    W: np.ndarray  # final DAG weights (least squares on the polished support, thresholded)
    info: dict


def polish_graph(
    G: np.ndarray,
    n: int,
    W0: np.ndarray,
    W_raw: np.ndarray,
    threshold: float,
    candidate: float = POLISH_CANDIDATES,
    noise_std: Optional[np.ndarray] = None,
) -> PolishResult:
    """Hill-climb from the thresholded consensus DAG ``W0``, fit least squares, threshold, refit."""
    E0 = W0 != 0
    E, moves = hill_climb(G, n, E0, candidate_edges(W_raw, candidate), noise_std=noise_std)
    pruned = 0
    if noise_std is not None:
        E, pruned = prune_within_noise(G, E, noise_std)
    W = least_squares_weights(G, E)
    weak = E & (np.abs(W) <= threshold)
    if weak.any():
        E = E & ~weak
        W = least_squares_weights(G, E)
    if not np.all(np.isfinite(W)):  # only possible with degenerate (noisy) moments: keep the consensus
        return PolishResult(W0.copy(), {"applied": False, "reason": "non-finite least-squares weights"})
    kinds = [m[0] for m in moves]
    info = {
        "applied": True,
        "edges_before": int(E0.sum()),
        "edges_after": int(E.sum()),
        "moves": {k: kinds.count(k) for k in ("add", "delete", "reverse")},
        "dropped_below_threshold": int(weak.sum()),
        "dropped_within_noise": pruned,
        "candidate_level": candidate,
        "score": "equal-variance Gaussian log-likelihood of the pooled second moments + BIC penalty log(n)/2 per edge",
    }
    return PolishResult(W, info)


class PolishStage:
    """The coordinator's side of the polish: builds the request from the consensus, sums the
    participants' replies into pooled second moments and runs :func:`polish_graph`."""

    def __init__(
        self,
        threshold: float,
        n_total: int,
        candidate: float = POLISH_CANDIDATES,
        noise: Optional[tuple[float, float, int]] = None,
    ):
        """``noise = (multiplier, clip, participants)`` for a private run: the participants' noise
        multiplier σ_pol, the row clip ``κ`` and their number ``P`` (all public)."""
        self.threshold = float(threshold)
        self.n_total = int(n_total)
        self.candidate = float(candidate)
        self.noise = noise
        self.result: Optional[PolishResult] = None
        self.pairs = None
        self.seconds = 0.0

    def request(self, W_raw: np.ndarray, rnd: int) -> Optional[bytes]:
        """The encoded :class:`GramRequest` (``None`` when there is nothing to polish)."""
        self.W_raw = np.array(W_raw, dtype=float)
        self.W0 = threshold_to_dag(self.W_raw, self.threshold)[0]
        if not (self.W0 != 0).any() and not candidate_edges(self.W_raw, self.candidate):
            return None
        self.pairs = polish_pairs(self.W_raw, self.W0 != 0, self.candidate)
        return GramRequest(int(rnd), self.W_raw.shape[0], self.pairs).encode()

    def _noise_std(self, G: np.ndarray) -> Optional[np.ndarray]:
        """Approximate std of the noise in each summed entry: participant ``p`` adds
        ``σ_pol · 2κ√|Q| · √(v̂_a v̂_b) / n`` to ``G_ab``; with ``v̂ ≈ G_aa`` over ``P`` participants
        that is ``σ_pol · 2κ√|Q| · √P · √(G_aa G_bb) / n``."""
        if self.noise is None:
            return None
        mult, clip, P = self.noise
        diag = np.sqrt(np.maximum(np.diag(G), 0.0))
        scale = mult * 2.0 * np.sqrt(self.pairs.size) * clip * np.sqrt(P) / self.n_total
        return scale * np.outer(diag, diag)

    def receive(self, replies) -> None:
        t0 = time.perf_counter()
        d = self.W_raw.shape[0]
        total = np.zeros(self.pairs.size)
        for data in replies:
            reply = GramReply.decode(data)
            if reply.values.size != self.pairs.size:
                raise ValueError("a second-moment reply does not match the request")
            total += reply.values
        G = np.full((d, d), np.nan)
        a, b = self.pairs // d, self.pairs % d
        G[a, b] = total
        G[b, a] = total
        self.result = polish_graph(
            G, self.n_total, self.W0, self.W_raw, self.threshold, self.candidate, noise_std=self._noise_std(G)
        )
        self.result.info["pairs"] = int(self.pairs.size)
        self.seconds = time.perf_counter() - t0
        self.result.info["seconds"] = self.seconds
