"""Scores apart from the searches that use them: a decomposable score is a cost per node given its parent
set (lower is better), computed from the sufficient statistics the coordinator holds; a search takes one
and never looks inside it (as pgmpy's ``local_score(variable, parents)`` and causal-learn's local scores
on ``(cov, n)``).

:class:`LocalScore` is the protocol: ``cost(j, parents)`` and ``step(j, S)`` — the cost of ``S`` with, for
each node, how much the cost falls when it joins ``S`` and, for each member, when it leaves. A score with a
closed form for those changes overrides ``step`` (:class:`GaussianScore`: one inverse of ``G_SS`` for all
of them); any other gets them from ``cost`` by the default ``step``, one call per neighbouring set. The
searches (:mod:`bnsl_cli.solvers.order_search`) see only this interface, so a score for other column kinds
(categorical columns, mixed tables) plugs in without touching them.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from bnsl_cli.solvers.gaussian_score import residual_floor

__all__ = ["LocalScore", "GaussianScore"]


class LocalScore:
    """A decomposable score over ``d`` nodes. Subclasses give :meth:`cost`; :meth:`step` has a generic
    form from it. Costs may be ``inf`` (a parent set the statistics cannot fit); a gain is ``-inf``
    where a node cannot join (itself, a member) or the fit is not finite."""

    d: int

    def cost(self, j: int, parents: tuple) -> float:  # pragma: no cover - the protocol
        raise NotImplementedError

    def step(self, j: int, S: tuple) -> tuple[float, np.ndarray, Optional[np.ndarray]]:
        """``(cost(j, S), gains, drops)``: ``gains[i] = cost(S) − cost(S ∪ {i})`` (``-inf`` for ``j``,
        the members of ``S`` and non-finite values), ``drops[k] = cost(S) − cost(S ∖ {S[k]})`` (``None``
        for the empty set). ``S`` is sorted."""
        base = float(self.cost(j, S))
        gains = np.full(self.d, -np.inf)
        if not np.isfinite(base):
            return base, gains, (None if not S else np.full(len(S), -np.inf))
        members = set(S)
        for i in range(self.d):
            if i != j and i not in members:
                gains[i] = base - self.cost(j, tuple(sorted(S + (i,))))
        gains[~np.isfinite(gains)] = -np.inf
        return base, gains, self.drops(j, S, base)

    def drops(self, j: int, S: tuple, base: float) -> Optional[np.ndarray]:
        """``cost(S) − cost(S ∖ {S[k]})`` for each member (``-inf`` where not finite; ``None`` for the
        empty set), one cost each."""
        if not S:
            return None
        out = np.array([base - self.cost(j, S[:k] + S[k + 1:]) for k in range(len(S))])
        out[~np.isfinite(out)] = -np.inf
        return out


class GaussianScore(LocalScore):
    """The per-node Gaussian score on a second-moment matrix ``G`` (``d × d``, per row) of ``n`` rows:
    ``cost(j, S) = n/2·log RSS_j(S) + penalty·|S|``, ``RSS_j`` floored at :func:`residual_floor`. Its
    :meth:`step` has the closed forms: one inverse of ``G_SS`` gives every addition's and every
    removal's change. Called with numpy's floating-point warnings off (a singular family is ``inf``)."""

    def __init__(self, G: np.ndarray, n: float, penalty: float):
        self.G = G
        self.d = G.shape[0]
        self.half = n / 2.0
        self.pen = float(penalty)
        self.floors = np.array([residual_floor(G, j) for j in range(self.d)])
        self.diag = np.diag(G).copy()
        self.nowhere = np.full(self.d, -np.inf)

    def cost(self, j: int, parents: tuple) -> float:
        return self.step(j, tuple(sorted(parents)))[0]

    def step(self, j: int, S: tuple):
        G = self.G
        floor = self.floors[j]
        drops = None
        if not S:
            C, Cd = G[:, j], self.diag
        else:
            Sa = list(S)
            GS = G[Sa]
            try:
                Ainv = np.linalg.inv(GS[:, Sa])
            except np.linalg.LinAlgError:
                Ainv = None
            if Ainv is None or not np.isfinite(Ainv).all():
                return np.inf, self.nowhere, np.full(len(S), -np.inf)
            K = Ainv @ GS
            C = G[:, j] - GS.T @ K[:, j]
            Cd = self.diag - (GS * K).sum(axis=0)
        R = float(C[j])
        R = max(R, floor) if R == R and R != np.inf else np.inf
        logR = np.log(R)
        gain = self.half * (logR - np.log(np.maximum(R - C * C / Cd, floor))) - self.pen
        gain[~((Cd > self.floors) & (gain > -np.inf) & (gain < np.inf))] = -np.inf  # NaN too
        gain[j] = -np.inf
        if S:
            gain[Sa] = -np.inf
            b = K[:, j]
            drops = self.half * (logR - np.log(np.maximum(R + b * b / np.diag(Ainv), floor))) + self.pen
            drops[~((drops > -np.inf) & (drops < np.inf))] = -np.inf
        return self.half * np.log(R) + self.pen * len(S), gain, drops
