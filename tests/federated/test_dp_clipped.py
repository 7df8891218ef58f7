"""DP-PGCD's fast clipped gradients against a slow, obviously-correct reference.

The reference recomputes every per-sample gradient ``x_i (xᵀB_{:,j} − x_j)`` from scratch in float64,
clips it at ``±C_i`` and sums over the rows; the reference DP-PGCD redoes that, the full gradient and
the full score matrix at every step. The fast code keeps residuals and sums up to date one column at
a time, a block of parents at a time (``block_bytes`` is shrunk here so that several blocks — and
single-parent blocks — are exercised on small problems).
"""

import numpy as np
import pytest

from bnsl_cli.solvers.dp_pgcd import ClippedGradients, dp_pgcd
from bnsl_cli.solvers.pgcd import soft_threshold
from bnsl_cli.privacy.mechanisms import ColumnwiseSelector, gaussian_noise
from bnsl_cli.privacy.releases import ReleaseKind


def _reference_sums(X, B, C):
    """``Σ_rows clip(x_i (x B − x)_j, ±C_i)`` for every (i, j), straight from the definition."""
    per_sample = X[:, :, None] * (X @ B - X)[:, None, :]  # [row, parent i, child j]
    return np.clip(per_sample, -C[None, :, None], C[None, :, None]).sum(axis=0)


def _clip_mask(X, B, C):
    per_sample = X[:, :, None] * (X @ B - X)[:, None, :]
    return np.abs(per_sample) > C[None, :, None]


def _problem(n, d, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) @ (np.eye(d) + np.triu(rng.normal(scale=0.5, size=(d, d)), 1))
    X -= X.mean(axis=0)
    X[:, d - 1] = 0.0  # a variable that is 0 in every row: its products are all 0
    B = np.triu(rng.normal(scale=0.4, size=(d, d)) * (rng.random((d, d)) < 0.4), 1)
    B[:, 0] = 0.0  # a child without parents: residual −x_0
    B[:, 2] = 0.0
    return rng, X, B


LEVEL_CASES = {
    "mixed": lambda d, rng: rng.uniform(0.3, 1.5, d),
    "all clipped": lambda d, rng: np.full(d, 1e-6),
    "none clipped": lambda d, rng: np.full(d, 1e6),
    "one zero level": lambda d, rng: np.concatenate([[0.0], rng.uniform(0.3, 1.5, d - 1)]),
}


@pytest.mark.parametrize("block_bytes", [1 << 19, 4096, 1])
@pytest.mark.parametrize("case", sorted(LEVEL_CASES))
def test_fast_sums_equal_the_reference_through_moves(case, block_bytes):
    n, d = 257, 9  # n not a multiple of anything in particular; several blocks of parents
    rng, X, B = _problem(n, d, seed=3)
    C = LEVEL_CASES[case](d, rng)
    exact, fast = ClippedGradients(X, "double", block_bytes), ClippedGradients(X, "single", block_bytes)
    for g in (exact, fast):
        g.set_B(B)
        g.set_levels(C)
    if block_bytes < n * 8:
        assert exact.block < d and fast.block < d  # the blocks really split the parents
    np.testing.assert_allclose(exact.sums, _reference_sums(X, B, C), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(fast.sums, exact.sums, rtol=1e-5, atol=1e-5 * max(np.abs(exact.sums).max(), 1e-300))
    assert np.all(fast.sums[:, 2] == fast.sums[:, 2])  # no NaN in a parentless column
    assert not fast.sums[d - 1].any() and not exact.sums[d - 1].any()  # the all-zero variable contributes 0
    changed_clipping = 0
    for _ in range(25):
        m, j = (int(v) for v in rng.integers(0, d, size=2))
        if m == j:
            continue
        delta = float(rng.normal(scale=0.8))
        before = _clip_mask(X, B, C)[:, :, j]
        B[m, j] += delta
        changed_clipping += int((before != _clip_mask(X, B, C)[:, :, j]).any())
        exact.move(m, j, delta)
        fast.move(m, j, delta)
        np.testing.assert_allclose(exact.sums, _reference_sums(X, B, C), rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(fast.sums, exact.sums, rtol=1e-5, atol=1e-5 * max(np.abs(exact.sums).max(), 1e-300))
    if case == "mixed":
        assert changed_clipping > 5  # moves really change which samples are clipped
    # every term is within its level, so every sum is within n_p · C_i (the all-clipped case: equal to it)
    assert np.all(np.abs(fast.sums) <= n * C[:, None] * (1 + 1e-6) + 1e-12)


def _reference_dp_pgcd(X, C, B, beta, W, rho2, lam, m_hat, steps, n_total, gumbel, sigma, rng):
    """DP-PGCD with everything recomputed from the rows at every step (same mechanism, same draws)."""
    B = np.array(B, dtype=float, copy=True)
    n = float(n_total)
    M = m_hat + rho2
    delta_row = 2.0 * C / n
    b = gumbel * float(np.max(delta_row / np.sqrt(M)))
    rows = []
    for _ in range(steps):
        G = _reference_sums(X, B, C) / n + beta + rho2 * (B - W)
        score = np.abs(soft_threshold(B - G / M[:, None], lam / M[:, None]) - B) * np.sqrt(M)[:, None]
        np.fill_diagonal(score, -np.inf)
        selector = ColumnwiseSelector(b, rng)
        selector.set_scores(score)
        m, j = selector.select()
        rows.append(m)
        g = G[m, j] + gaussian_noise(None, sigma * delta_row[m], rng)
        B[m, j] = soft_threshold(B[m, j] - g / M[m], lam / M[m])
    return B, np.bincount(rows, minlength=B.shape[0])


@pytest.mark.parametrize("clip_scale", [0.05, 0.5, 1e6])  # nearly all clipped, mixed, none clipped
@pytest.mark.parametrize("block_bytes", [1 << 19, 2048])
def test_dp_pgcd_follows_the_reference_step_by_step(clip_scale, block_bytes):
    n, d = 200, 8
    rng, X, B0 = _problem(n, d, seed=11)
    v = (X * X).mean(axis=0) + 1e-3
    m_hat = v / 2.0
    C = clip_scale * np.sqrt(v)
    beta = rng.normal(scale=0.01, size=(d, d))
    W = rng.normal(scale=0.2, size=(d, d))
    np.fill_diagonal(beta, 0.0)
    np.fill_diagonal(W, 0.0)
    args = (C, B0, beta, W, 0.05, 0.01, m_hat, 60, 2 * n)
    grads = ClippedGradients(X, "double", block_bytes)
    grads.set_B(B0)
    B_fast, events = dp_pgcd(grads, *args, 2.0, 0.5, np.random.default_rng(5))
    B_ref, rows = _reference_dp_pgcd(X, *args, 2.0, 0.5, np.random.default_rng(5))
    np.testing.assert_allclose(B_fast, B_ref, rtol=0, atol=1e-10)
    assert np.abs(B_fast - B0).max() > 0.01  # the steps really moved B
    # the same releases: one selection event for all steps, one update event per row used
    assert events[0].release == ReleaseKind.SELECTION and events[0].count == 60
    updates = [(ev.sensitivity, ev.count) for ev in events[1:]]
    assert all(ev.release == ReleaseKind.UPDATE for ev in events[1:])
    assert updates == [(float(2.0 * C[m] / (2 * n)), int(rows[m])) for m in np.flatnonzero(rows)]
    # the grads object is left at the new B: its sums are those of B_fast
    np.testing.assert_allclose(grads.sums, _reference_sums(X, B_fast, C), rtol=1e-12, atol=1e-9)
