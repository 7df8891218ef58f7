"""Edge confidence from repeated runs: counts, strengths, the estimated strength threshold and the
averaged network (arrays in, arrays out; the runs themselves are :mod:`bnsl_cli.bootstrap`'s).

- ``strength`` of the pair {i, j}: the share of the runs whose graph has an edge between i and j,
  either way (a DAG has at most one of i → j and j → i).
- ``direction`` of i → j: the share of those runs with i → j.
- ``strength.csv`` holds the directed shares ``F[i, j]`` (runs with i → j / runs), so that
  strength = ``F[i, j] + F[j, i]`` and direction = ``F[i, j] / strength``.

The threshold estimated from the data (Scutari & Nagarajan, 2013, "Identifying significant edges in
graphical models of molecular networks"): an ideal set of strengths is 0 or 1, so its distribution
function is a step ``p`` on ``[0, 1)``; the threshold is the strength ``t`` whose share ``p = F̂(t)``
of pairs at most ``t`` minimises the L1 distance ``∫₀¹ |F̂(x) − p| dx`` between the empirical
distribution function ``F̂`` of the pairs' strengths and that step. Edges of strength above ``t``
are "significant".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from bnsl_cli.dag import find_cycle_edges

__all__ = ["RESAMPLE_KEY", "EdgeCounts", "Replicates", "resampling_rng", "resample_rows",
           "wishart_moments", "symmetric_normal", "estimated_threshold", "averaged_network", "pair_strengths"]


#: the first spawn key of every resampling stream (no other stream of a run uses it): the rows of
#: replicate b at participant k (``(RESAMPLE_KEY, b, k)``), the coordinator's resampling of released
#: statistics (``(RESAMPLE_KEY,)``)
RESAMPLE_KEY = 0xB007


def resampling_rng(seed: Optional[int], *key: int) -> np.random.Generator:
    """The stream ``SeedSequence(seed, spawn_key=(RESAMPLE_KEY, *key))`` (OS entropy without a seed)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(RESAMPLE_KEY, *key)))


def resample_rows(X: np.ndarray, entropy: Optional[int], replicate: int, participant: int) -> np.ndarray:
    """Participant ``participant``'s rows of bootstrap replicate ``replicate``: as many rows as it
    has, drawn with replacement from the stream :func:`resampling_rng` ``(entropy, replicate,
    participant)`` (``bnsl learn --bootstrap`` and a site of ``bnsl serve --bootstrap`` alike)."""
    rng = resampling_rng(entropy, replicate, participant)
    return X[rng.integers(0, X.shape[0], size=X.shape[0])]


def wishart_moments(C: np.ndarray, n: float, rng: np.random.Generator) -> np.ndarray:
    """The second moments ``Σ x xᵀ / n`` of ``n`` rows of ``N(0, C)`` (``C`` positive definite), by
    Bartlett's decomposition: a parametric bootstrap draw of released moments (post-processing)."""
    d = C.shape[0]
    L = np.linalg.cholesky(C)
    A = np.tril(rng.standard_normal((d, d)), -1)
    A[np.diag_indices(d)] = np.sqrt(rng.chisquare(n - np.arange(d)))
    LA = L @ A
    return (LA @ LA.T) / n


def symmetric_normal(d: int, rng: np.random.Generator) -> np.ndarray:
    """A symmetric d × d matrix with off-diagonal entries ``N(0, 1)`` and diagonal ``N(0, 2)`` (the
    shape of an isometric release's noise, redrawn to resample a release: post-processing)."""
    Z = rng.standard_normal((d, d))
    return (Z + Z.T) / np.sqrt(2.0)


@dataclass(frozen=True)
class EdgeCounts:
    """Directed edge counts over ``runs`` graphs: ``counts[i, j]`` runs had i → j, with weights
    summing to ``weight_sums[i, j]`` (for the averaged network's weights)."""

    runs: int
    counts: np.ndarray
    weight_sums: np.ndarray

    @classmethod
    def of(cls, graphs) -> "EdgeCounts":
        """The counts of a non-empty sequence of weighted DAGs (d × d arrays)."""
        graphs = [np.asarray(W, dtype=float) for W in graphs]
        if not graphs:
            raise ValueError("no graphs to count")
        counts = sum((W != 0).astype(np.int64) for W in graphs)
        sums = sum(np.where(W != 0, W, 0.0) for W in graphs)
        return cls(len(graphs), counts, sums)

    @property
    def directed(self) -> np.ndarray:
        """``F[i, j]``: the share of runs with i → j (``strength.csv``)."""
        return self.counts / float(self.runs)

    @property
    def strength(self) -> np.ndarray:
        """The symmetric pair strength ``F + Fᵀ`` (share of runs with an edge either way)."""
        F = self.directed
        return F + F.T

    @property
    def direction(self) -> np.ndarray:
        """``F[i, j] / (F[i, j] + F[j, i])`` (0 where no run had the pair)."""
        F, S = self.directed, self.strength
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(S > 0, F / np.where(S > 0, S, 1.0), 0.0)


@dataclass(frozen=True)
class Replicates:
    """What a run's replicates gave: their counts (``None``: none finished), how many were asked
    for, the ``(replicate, reason)`` of those that failed, and how they were made (the report's
    ``confidence.source``)."""

    counts: Optional[EdgeCounts]
    asked: int
    failures: tuple
    source: str


def pair_strengths(counts: EdgeCounts) -> np.ndarray:
    """The strengths of all ``d(d − 1)/2`` unordered pairs (upper triangle)."""
    S = counts.strength
    return S[np.triu_indices(S.shape[0], 1)]


def estimated_threshold(strengths: np.ndarray) -> float:
    """The significance threshold of the module docstring from the pairs' strengths (in [0, 1]).
    Returns 1.0 (no edge is significant) when there are no pairs."""
    s = np.sort(np.clip(np.asarray(strengths, dtype=float), 0.0, 1.0))
    if s.size == 0:
        return 1.0
    knots = np.unique(s)
    # ∫₀¹ |F̂(x) − p| dx for the step p = F̂(t) at each knot t: F̂ is constant between knots
    edges = np.append(knots, 1.0)
    widths = np.diff(edges)  # F̂ on [knots[k], knots[k+1]) is F̂(knots[k])
    F = np.searchsorted(s, knots, side="right") / s.size
    below = knots[0]  # F̂ = 0 on [0, first knot)
    best, best_t = np.inf, 1.0
    for t, p in zip(knots, F):
        norm = below * p + float(np.sum(widths * np.abs(F - p)))
        if norm < best - 1e-15:
            best, best_t = norm, float(t)
    return best_t


def averaged_network(counts: EdgeCounts, min_strength: float, *, strict: bool = False,
                     required: Optional[np.ndarray] = None, forbidden: Optional[np.ndarray] = None) -> np.ndarray:
    """The averaged network: every pair of strength ≥ ``min_strength`` (> with ``strict``: the
    estimated threshold's edges are those above it), oriented by the majority of the runs that had
    it (ties: the direction whose runs' mean weight is larger in magnitude, then i → j for i < j),
    added strongest first and skipped when it would close a cycle (then the other direction is
    tried, if some run had it). Required edges (``required``, acyclic; every run has them) come
    first; forbidden ones never. Weights: the mean weight of the runs with the edge in the chosen direction."""
    F = counts.directed
    S = F + F.T
    d = F.shape[0]
    W = np.zeros((d, d))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_w = np.where(counts.counts > 0, counts.weight_sums / np.maximum(counts.counts, 1), 0.0)
    if required is not None:  # every run has them (the learner keeps required edges)
        for i, j in zip(*np.nonzero(required)):
            W[i, j] = mean_w[i, j]
    iu, ju = np.triu_indices(d, 1)
    s = S[iu, ju]
    keep = s > min_strength if strict else s >= min_strength - 1e-12
    order = np.argsort(-s[keep], kind="stable")
    for k in order:
        i, j = int(iu[keep][k]), int(ju[keep][k])
        if W[i, j] != 0 or W[j, i] != 0:
            continue
        first, second = ((i, j), (j, i))
        if F[j, i] > F[i, j] or (F[j, i] == F[i, j] and abs(mean_w[j, i]) > abs(mean_w[i, j])):
            first, second = second, first
        for a, b in (first, second):
            if counts.counts[a, b] == 0 or (forbidden is not None and forbidden[a, b]):
                continue
            W[a, b] = mean_w[a, b]
            if find_cycle_edges(W).any():
                W[a, b] = 0.0
                continue
            break
    return W
