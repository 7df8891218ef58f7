"""Edge confidence: counts, the estimated threshold, the averaged network (bnsl_cli.confidence)."""

from __future__ import annotations

import numpy as np
import pytest

from bnsl_cli.confidence import EdgeCounts, averaged_network, estimated_threshold, pair_strengths
from bnsl_cli.dag import is_dag


def _W(d, edges):
    W = np.zeros((d, d))
    for i, j, w in edges:
        W[i, j] = w
    return W


def test_counts_strength_and_direction():
    graphs = [_W(3, [(0, 1, 1.0)]), _W(3, [(1, 0, 2.0)]), _W(3, [(0, 1, 3.0), (1, 2, 1.0)]), _W(3, [])]
    c = EdgeCounts.of(graphs)
    assert c.runs == 4
    assert c.directed[0, 1] == 0.5 and c.directed[1, 0] == 0.25
    assert c.strength[0, 1] == c.strength[1, 0] == 0.75
    assert c.direction[0, 1] == pytest.approx(2 / 3) and c.direction[1, 0] == pytest.approx(1 / 3)
    assert c.strength[0, 2] == 0 and c.direction[0, 2] == 0
    assert c.weight_sums[0, 1] == 4.0
    assert sorted(pair_strengths(c).tolist()) == [0.0, 0.25, 0.75]


def test_estimated_threshold_separates_two_clusters():
    # 40 pairs near 0, 10 pairs near 1: the threshold falls between them
    s = np.r_[np.full(30, 0.0), np.full(10, 0.1), np.full(8, 0.95), np.full(2, 1.0)]
    t = estimated_threshold(s)
    assert 0.1 <= t < 0.95
    assert int((s > t).sum()) == 10


def test_estimated_threshold_moves_with_the_strengths():
    low = estimated_threshold(np.r_[np.full(45, 0.0), np.full(5, 0.6)])
    assert low < 0.6  # the 0.6 pairs are significant when everything else is 0
    # the L1 rule: the step p minimises ∫|F̂ − p|; check against a brute-force evaluation
    rng = np.random.default_rng(3)
    s = rng.uniform(size=60) ** 3
    t = estimated_threshold(s)
    xs = np.linspace(0, 1, 20001)
    F = np.searchsorted(np.sort(s), xs, side="right") / s.size

    trapezoid = getattr(np, "trapezoid", None) or np.trapz

    def norm(p):
        return trapezoid(np.abs(F - p), xs)

    best = min(np.unique(s), key=lambda u: norm(np.mean(s <= u)))
    assert norm(np.mean(s <= t)) == pytest.approx(norm(np.mean(s <= best)), abs=1e-3)


def test_averaged_network_orients_by_majority_and_stays_acyclic():
    # a 3-cycle is the majority of the directions: one edge must go the other way or be dropped
    runs = [_W(3, [(0, 1, 1.0), (1, 2, 1.0)])] * 8 + [_W(3, [(2, 0, 0.25)])] * 3 + [_W(3, [(0, 2, 0.5)])]
    c = EdgeCounts.of(runs)  # strengths 2/3, 2/3 and 1/3 (3 of its 4 runs say 2 → 0)
    A = averaged_network(c, 0.3)
    assert is_dag(A)
    assert A[0, 1] == 1.0 and A[1, 2] == 1.0  # strongest first
    assert A[2, 0] == 0.0 and A[0, 2] == 0.5  # the majority direction closes a cycle: the other one is taken
    assert averaged_network(c, 0.34).sum() == 2.0  # the 1/3 pair left out
    assert averaged_network(c, 1 / 3, strict=True)[0, 2] == 0.0
    assert averaged_network(c, 1 / 3)[0, 2] == 0.5


def test_averaged_network_respects_knowledge():
    runs = [_W(3, [(0, 1, 1.0), (1, 2, 2.0)])] * 3
    c = EdgeCounts.of(runs)
    forbidden = np.zeros((3, 3), bool)
    forbidden[1, 2] = True
    A = averaged_network(c, 0.5, forbidden=forbidden)
    assert A[1, 2] == 0 and A[2, 1] == 0 and A[0, 1] == 1.0


def test_wishart_moments_have_the_sampling_mean_and_variance():
    from bnsl_cli.confidence import symmetric_normal, wishart_moments

    rng = np.random.default_rng(1)
    C = np.array([[2.0, 0.6, 0.0], [0.6, 1.0, -0.3], [0.0, -0.3, 0.5]])
    n, reps = 200, 4000
    draws = np.array([wishart_moments(C, n, rng) for _ in range(reps)])
    assert np.allclose(draws.mean(axis=0), C, atol=4 * np.sqrt((C**2 + np.outer(np.diag(C), np.diag(C))) / n / reps).max())
    var = (C**2 + np.outer(np.diag(C), np.diag(C))) / n  # the variance of a sample second moment
    assert np.allclose(draws.var(axis=0), var, rtol=0.12)
    N = np.array([symmetric_normal(4, rng) for _ in range(reps)])
    assert np.allclose(N, np.transpose(N, (0, 2, 1)))
    v = N.var(axis=0)
    assert np.allclose(v[~np.eye(4, dtype=bool)], 1.0, rtol=0.1) and np.allclose(np.diag(v), 2.0, rtol=0.1)
