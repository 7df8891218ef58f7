"""The second phase of mixed data: categorical nodes scored on their contingency tables. Arrays in, arrays
out.

The degenerate Gaussian score (:mod:`bnsl_cli.solvers.mixed_score`) sees a categorical variable only
through the second moments of its indicator columns; interactions of three or more variables and the
orientations they imply are beyond it. Given the contingency table of a categorical node with its
neighbours in the first phase's graph (all categorical), the multinomial BIC scores the node exactly:

    cost(j, P) = −Σ_{p, k} N_{pk} log(N_{pk} / N_p) + log(n)/2 · (K_j − 1) · Π_{v ∈ P} K_v,

``N_{pk}`` the count of rows with parents' configuration ``p`` and level ``k`` of ``j`` (the BIC of
discrete Bayesian networks: bnlearn's and pgmpy's ``bic-d``); a parent outside the table is not allowed.
:class:`TwoPhaseScore` scores the nodes that have a table so and every other node by the degenerate
Gaussian score, one decomposable score for the order search.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from bnsl_cli.solvers.local_score import LocalScore

__all__ = ["TwoPhaseScore", "multinomial_cost"]


def multinomial_cost(table: np.ndarray, child_axis: int, parent_axes: Sequence[int], n: float) -> float:
    """The multinomial BIC cost of the child (``child_axis`` of ``table``, counts over its group's
    variables) given the parents at ``parent_axes``."""
    keep = sorted([child_axis, *parent_axes])
    drop = tuple(a for a in range(table.ndim) if a not in keep)
    N = table.sum(axis=drop) if drop else table
    # the kept axes in ``keep`` order: move the child to the last axis
    c = keep.index(child_axis)
    N = np.moveaxis(N, c, -1).reshape(-1, table.shape[child_axis])
    Np = N.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ll = float(np.sum(np.where(N > 0, N * np.log(N / Np), 0.0)))
    params = (table.shape[child_axis] - 1) * int(np.prod([table.shape[a] for a in parent_axes]))
    return -ll + np.log(n) / 2.0 * params


class TwoPhaseScore(LocalScore):
    """``tables[j] = (group, table)`` for the categorical nodes of the second phase (``group``: the node
    and its allowed parents, in the table's axis order); every other node is scored by ``fallback``
    (the degenerate Gaussian score)."""

    def __init__(self, fallback: LocalScore, tables: dict, n: float):
        self.fallback = fallback
        self.d = fallback.d
        self.tables = tables
        self.n = float(n)
        self._cache: dict = {}

    def cost(self, j: int, parents: tuple) -> float:
        if j not in self.tables:
            return self.fallback.cost(j, parents)
        key = (j, tuple(sorted(parents)))
        hit = self._cache.get(key)
        if hit is None:
            group, table = self.tables[j]
            if any(p not in group for p in parents):
                hit = np.inf
            else:
                hit = multinomial_cost(table, group.index(j), [group.index(p) for p in key[1]], self.n)
            self._cache[key] = hit
        return hit

    def step(self, j: int, S: tuple):
        if j not in self.tables:
            return self.fallback.step(j, S)
        return LocalScore.step(self, j, S)
