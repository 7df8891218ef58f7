"""The score of mixed data (continuous and categorical variables) from pooled second moments, and the
search that uses it. Arrays in, arrays out.

A categorical variable with ``K`` levels is ``K − 1`` indicator columns (:mod:`bnsl_cli.io.kinds`); a
continuous one is its own column. The *degenerate Gaussian* score (Andrews, Ramsey & Cooper 2019) scores
each variable's block of columns by a Gaussian likelihood given its parents' columns: with ``G`` the
covariance of the expanded columns, ``B`` the child's block and ``C`` the union of the parents' blocks,

    cost(j, pa) = n/2 · log det(G_BB − G_BC G_CC⁻¹ G_CB) + penalty · |B| · |C|,

the penalty per regression coefficient (the extended BIC's ``log(n)/2 + log d``, ``d`` the number of
variables). Its only inputs are ``n`` and the second moments of the expanded columns — the 1- and 2-way
contingency tables and the per-level means and moments — which the sites' secure sums already carry.
The score does not depend on the columns' units (a change of units multiplies each determinant by a
constant of the child alone).

:func:`mixed_graph` searches it with the order search (:mod:`bnsl_cli.solvers.order_search`) from
several starts and keeps the lowest total cost; :func:`mixed_weights` gives the edges' weights: the
least-squares coefficient for an edge between continuous variables, 1 for an edge into or out of a
categorical one (it has one coefficient per level, not one weight).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from bnsl_cli.solvers.gaussian_score import ebic_penalty
from bnsl_cli.solvers.local_score import LocalScore
from bnsl_cli.solvers.order_search import OrderScores, order_search, topological_order

__all__ = ["MixedGaussianScore", "mixed_graph", "best_order_graph", "mixed_weights"]


class MixedGaussianScore(LocalScore):
    """The degenerate Gaussian score on the covariance ``G`` of the expanded columns of ``n`` rows;
    ``blocks[j]``: variable ``j``'s columns. A residual covariance's eigenvalues are floored at
    ``1e-9`` of its block's own variance (a level determined by the parents: near-deterministic
    relations are common in categorical data)."""

    def __init__(self, G: np.ndarray, n: float, blocks: Sequence[Sequence[int]], penalty: Optional[float] = None):
        self.G = np.asarray(G, dtype=float)
        self.blocks = [np.asarray(b, dtype=int) for b in blocks]
        self.d = len(self.blocks)
        self.half = float(n) / 2.0
        self.pen = ebic_penalty(n, self.d) if penalty is None else float(penalty)
        self._floor = [1e-9 * max(float(np.trace(self.G[np.ix_(b, b)])), 1e-300) / len(b) for b in self.blocks]
        self._cache: dict = {}

    def cost(self, j: int, parents: tuple) -> float:
        key = (j, tuple(sorted(parents)))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        B = self.blocks[j]
        G = self.G
        S = G[np.ix_(B, B)]
        ncoef = 0
        if key[1]:
            C = np.concatenate([self.blocks[p] for p in key[1]])
            ncoef = len(B) * len(C)
            GCC = G[np.ix_(C, C)]
            GCB = G[np.ix_(C, B)]
            try:
                K = np.linalg.solve(GCC, GCB)
            except np.linalg.LinAlgError:
                K = np.linalg.lstsq(GCC, GCB, rcond=None)[0]
            S = S - GCB.T @ K
        out = self.half * self._logdet(S, j) + self.pen * ncoef
        self._cache[key] = out
        return out

    def _logdet(self, M: np.ndarray, j: int) -> float:
        ev = np.linalg.eigvalsh(0.5 * (M + M.T))
        if not np.all(np.isfinite(ev)):
            return np.inf
        return float(np.sum(np.log(np.maximum(ev, self._floor[j]))))

    def step(self, j: int, S: tuple):
        """The closed forms of the changes: one residual covariance of every column given the parents'
        columns (``R = G − G_·C G_CC⁻¹ G_C·``), then per candidate ``i`` the child's block given ``C`` and
        ``i``'s block from small matrices only (``R_jj − R_ji R_ii⁺ R_ij``); a removal is a cost of its own."""
        base = self.cost(j, S)
        gains = np.full(self.d, -np.inf)
        if not np.isfinite(base):
            return base, gains, (None if not S else np.full(len(S), -np.inf))
        G = self.G
        B = self.blocks[j]
        ncol = 0
        if S:
            C = np.concatenate([self.blocks[p] for p in S])
            ncol = len(C)
            GCC = G[np.ix_(C, C)]
            try:
                K = np.linalg.solve(GCC, G[C])
            except np.linalg.LinAlgError:
                K = np.linalg.lstsq(GCC, G[C], rcond=None)[0]
            R = G - G[:, C] @ K
        else:
            R = G
        Rjj = R[np.ix_(B, B)]
        members = set(S)
        rest = [i for i in range(self.d) if i != j and i not in members]
        single = [i for i in rest if len(self.blocks[i]) == 1]
        if single:
            # one column each: a rank-one change of the child's block (no inverse of a block)
            cols = np.array([self.blocks[i][0] for i in single])
            r = np.diag(R)[cols]
            U = R[np.ix_(B, cols)]
            ok = r > 1e-12 * np.maximum(np.diag(G)[cols], 1e-300)  # else the column adds nothing new
            rs = np.where(ok, r, 1.0)
            pen = self.pen * len(B) * (ncol + 1)
            if len(B) == 1:
                m = Rjj[0, 0] - np.where(ok, U[0] ** 2 / rs, 0.0)
                gains[np.array(single)] = base - (self.half * np.log(np.maximum(m, self._floor[j])) + pen)
            else:
                for k, i in enumerate(single):
                    u = U[:, k]
                    M = Rjj - (np.outer(u, u) / rs[k] if ok[k] else 0.0)
                    gains[i] = base - (self.half * self._logdet(M, j) + pen)
        for i in rest:
            Bi = self.blocks[i]
            if len(Bi) == 1:
                continue
            Rji = R[np.ix_(B, Bi)]
            M = Rjj - Rji @ np.linalg.pinv(R[np.ix_(Bi, Bi)], rcond=1e-10, hermitian=True) @ Rji.T
            c = self.half * self._logdet(M, j) + self.pen * len(B) * (ncol + len(Bi))
            gains[i] = base - c
        gains[~np.isfinite(gains)] = -np.inf
        return base, gains, self.drops(j, S, base)


def mixed_graph(G: np.ndarray, n: float, blocks, forbidden=None, required=None,
                penalty: Optional[float] = None) -> np.ndarray:
    """The DAG over the variables (``E[i, j]``: edge ``i → j``) with the lowest degenerate Gaussian
    cost found by :func:`best_order_graph`. ``forbidden``/``required``: prior knowledge over the
    variables."""
    return best_order_graph(MixedGaussianScore(G, n, blocks, penalty), forbidden, required)


def best_order_graph(score: LocalScore, forbidden=None, required=None, starts=()) -> np.ndarray:
    """The lowest-cost DAG the order search finds on ``score`` from four starts — the variables in their
    order and reversed, then both topological orders of each result reversed (a second pass that leaves
    the first local optimum) — and from both topological orders of each graph in ``starts``."""
    scores = OrderScores(score, forbidden, required)
    d = score.d
    best = None
    with np.errstate(all="ignore"):
        firsts = [list(range(d)), list(range(d))[::-1]]
        for E0 in starts:
            firsts += [topological_order(np.asarray(E0, bool), last) for last in (False, True)]
        tried = []
        for start in firsts:
            res = order_search(score, start, scores=scores)
            if res is not None:
                tried.append(res)
        if not tried:
            return np.zeros((d, d), dtype=bool)
        for E, _ in list(tried):
            for last in (False, True):
                res = order_search(score, topological_order(E, last)[::-1], scores=scores)
                if res is not None:
                    tried.append(res)
        for E, order in tried:
            total = sum(f.cost for f in scores.families(order))
            if best is None or total < best[0] - 1e-9 * max(1.0, abs(best[0])):
                best = (total, E)
    return best[1]


def mixed_weights(G: np.ndarray, E: np.ndarray, blocks, categorical: Sequence[bool]) -> np.ndarray:
    """The weights of the DAG ``E`` over the variables: for an edge ``i → j`` between continuous
    variables the coefficient of ``i`` in the least-squares regression of ``j`` on all its parents'
    columns; ``1.0`` for an edge into or out of a categorical variable."""
    d = E.shape[0]
    W = np.zeros((d, d))
    for j in range(d):
        pa = np.flatnonzero(E[:, j])
        if not len(pa):
            continue
        W[pa, j] = 1.0
        if categorical[j]:
            continue
        C = np.concatenate([blocks[p] for p in pa])
        B = blocks[j]
        try:
            beta = np.linalg.lstsq(G[np.ix_(C, C)], G[np.ix_(C, B)], rcond=None)[0][:, 0]
        except np.linalg.LinAlgError:
            continue
        k = 0
        for p in pa:
            w = len(blocks[p])
            if not categorical[p]:
                W[p, j] = float(beta[k])
            k += w
    return W
