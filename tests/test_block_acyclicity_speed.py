"""The coordinator's acyclicity on many small strongly connected blocks (issue 46, item 7).

Log-det blocks of at most :data:`~bnsl_cli.small_logdet.BATCHED_UPTO` nodes are evaluated without one
LAPACK call per block: block by block on Python floats while there are few of one size, as one
array batch (:func:`~bnsl_cli.small_logdet.logdet_small`) when there are many. Both must give the
function of the dense definition, and the same numbers as each other and as the per-block LAPACK
path (:func:`~bnsl_cli.numerics.logdet_core`)."""

import numpy as np
import pytest

from bnsl_cli.small_logdet import BATCH_FROM
from bnsl_cli.numerics import (
    BATCHED_UPTO,
    BlockAcyclicity,
    acyclicity,
    logdet_acyclicity,
    logdet_core,
    logdet_small,
)


def _many_blocks(d, n_small, rng, big=(7, 15)):
    """Flat indices of a d-node pattern: ``n_small`` disjoint cycles of 2–4 nodes with chords, the
    cycles ``big`` and acyclic edges between them (forward in one node order)."""
    perm = rng.permutation(d)
    pos, edges = 0, []
    for m in [int(rng.integers(2, BATCHED_UPTO + 1)) for _ in range(n_small)] + list(big):
        nodes = perm[pos : pos + m]
        pos += m
        edges += [(nodes[i], nodes[(i + 1) % m]) for i in range(m)]
        for _ in range(int(rng.integers(0, m))):
            a, b = rng.choice(nodes, 2, replace=False)
            edges.append((a, b))
    for _ in range(d):
        i, j = sorted(rng.choice(d, 2, replace=False))
        edges.append((perm[i], perm[j]))
    assert pos <= d
    return np.unique([a * d + b for a, b in edges if a != b])


def _inside(d, idx, rng, rho, s=1.0):
    """Entries at ``idx`` scaled so that the spectral radius of W∘W is ``rho · s``."""
    w = rng.normal(size=idx.size)
    W = np.zeros(d * d)
    W[idx] = w
    radius = np.max(np.abs(np.linalg.eigvals((W * W).reshape(d, d))))
    return w * np.sqrt(rho * s / radius)


def _dense(d, idx, w):
    W = np.zeros(d * d)
    W[idx] = w
    return W.reshape(d, d)


@pytest.mark.parametrize("n_small", [1, 5, 60])  # block by block, and one batch per size
@pytest.mark.parametrize("s", [1.0, 0.6, 2.5])
@pytest.mark.parametrize("seed", range(3))
def test_small_logdet_blocks_equal_the_dense_definition(n_small, s, seed):
    rng = np.random.default_rng(seed)
    d = 4 * n_small + 40
    idx = _many_blocks(d, n_small, rng)
    ev = BlockAcyclicity(d, idx, "logdet", s)
    assert sum(1 for n in ev.blocks if n <= BATCHED_UPTO) == n_small
    w = _inside(d, idx, rng, 0.9, s)
    w[rng.random(idx.size) < 0.1] = 0.0  # exact zeros, as in a warm start: triangular blocks
    h, g = ev(w)
    W = _dense(d, idx, w)
    h_ref, G_ref = logdet_acyclicity(W, s)
    # the definition itself, independent of the LU factors: −log det(sI − A) + d log s
    sign, logdet = np.linalg.slogdet(s * np.eye(d) - W * W)
    assert sign > 0
    assert h == pytest.approx(h_ref, rel=1e-12, abs=1e-13)
    assert h == pytest.approx(d * np.log(s) - logdet, rel=1e-9, abs=1e-11)
    np.testing.assert_allclose(g, G_ref.ravel()[idx], rtol=1e-12, atol=1e-14)
    Z = np.linalg.inv(s * np.eye(d) - W * W)
    np.testing.assert_allclose(g, (2.0 * Z.T * W).ravel()[idx], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("seed", range(4))
def test_expm_blocks_on_the_same_patterns_equal_the_dense_definition(seed):
    rng = np.random.default_rng(seed)
    d = 4 * 30 + 40
    idx = _many_blocks(d, 30, rng)
    w = _inside(d, idx, rng, 0.9)
    h, g = BlockAcyclicity(d, idx, "expm")(w)
    h_ref, G_ref = acyclicity(_dense(d, idx, w))
    assert h == pytest.approx(h_ref, rel=1e-12)
    np.testing.assert_allclose(g, G_ref.ravel()[idx], rtol=1e-10, atol=1e-14)
    # overflow of exp: +inf with a zero gradient
    h, g = BlockAcyclicity(d, idx, "expm")(w * 1e3)
    assert h == float("inf") and not g.any()


def _blocks_of(n, k, rng, density):
    """k random strongly connected n-node blocks A = W∘W (zero diagonal): a cycle plus chords."""
    A = np.zeros((k, n, n))
    for b in range(k):
        perm = rng.permutation(n)
        pat = rng.random((n, n)) < density
        pat[perm, np.roll(perm, 1)] = True
        np.fill_diagonal(pat, False)
        A[b] = (rng.uniform(0.05, 1.5, (n, n)) * pat) ** 2
    return A


def _routes(d, idx, s=1.0):
    """The same evaluator three ways: as built (by the batch sizes), every small block by itself
    on Python floats, every size as one array batch."""
    default = BlockAcyclicity(d, idx, "logdet", s)
    scalar = BlockAcyclicity(d, idx, "logdet", s, batch_from={n: 10**9 for n in BATCH_FROM})
    batch = BlockAcyclicity(d, idx, "logdet", s, batch_from={n: 1 for n in BATCH_FROM})
    return default, scalar, batch


@pytest.mark.parametrize("n", range(2, BATCHED_UPTO + 1))
@pytest.mark.parametrize("s", [1.0, 0.8, 1.7])
def test_batch_scalar_and_lapack_paths_agree(n, s):
    """The array batch and the Python-float route perform the same floating-point operations: the
    same bits. Both equal the LAPACK path (``dgetrf`` + ``dgetri``) to rounding — on OpenBLAS they
    are its very operations, so the bits agree too, but that is the BLAS's business, not a contract."""
    rng = np.random.default_rng(n)
    A = _blocks_of(n, 400, rng, 0.4)
    h_batch, Z_batch, redo = logdet_small(A.copy(), s)
    assert not redo.any()
    inside = []
    for b in range(A.shape[0]):
        h_ref, Z_ref = logdet_core(A[b].copy(), s)
        if Z_ref is None:
            assert h_batch[b] == float("inf")
            continue
        inside.append(b)
        assert h_batch[b] == pytest.approx(h_ref, rel=1e-12, abs=1e-14)
        np.testing.assert_allclose(Z_batch[b], Z_ref.ravel(), rtol=1e-12, atol=1e-15)
    assert 50 < len(inside) < A.shape[0]  # both sides of the domain boundary were tried
    # the blocks inside the domain as the disjoint blocks of one pattern, W = ±√A
    k = len(inside)
    d = k * n
    W = np.zeros((d, d))
    for i, b in enumerate(inside):
        W[i * n : (i + 1) * n, i * n : (i + 1) * n] = np.sqrt(A[b]) * rng.choice([-1.0, 1.0], (n, n))
    idx = np.flatnonzero(W)
    w = W.ravel()[idx]
    results = [ev(w) for ev in _routes(d, idx, s)]
    for h, g in results[1:]:
        assert h == results[0][0]
        np.testing.assert_array_equal(g, results[0][1])
    h_ref, G_ref = logdet_acyclicity(W, s)
    assert results[0][0] == pytest.approx(h_ref, rel=1e-12)
    np.testing.assert_allclose(results[0][1], G_ref.ravel()[idx], rtol=1e-12, atol=1e-15)


@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")  # W∘W at 1e200: inf
@pytest.mark.parametrize("n_small", [3, 60])
def test_one_small_block_outside_the_domain_makes_h_infinite(n_small):
    rng = np.random.default_rng(11)
    d = 4 * n_small + 40
    idx = _many_blocks(d, n_small, rng)
    ev = BlockAcyclicity(d, idx, "logdet")
    w = _inside(d, idx, rng, 0.5)
    assert np.isfinite(ev(w)[0])
    # one 2-cycle pushed through ρ(W∘W) = 1 (ab > 1): outside the domain, the rest untouched
    W = _dense(d, idx, w)
    a = next(i for i in range(d) for j in range(d) if W[i, j] and W[j, i] and ev.blocks)
    b = next(j for j in range(d) if W[a, j] and W[j, a])
    for bad in (1.2, 1e200):  # a plain domain failure, and an overflow of W∘W (inf)
        w2 = w.copy()
        w2[np.searchsorted(idx, a * d + b)] = bad
        w2[np.searchsorted(idx, b * d + a)] = bad
        h, g = ev(w2)
        assert h == float("inf") and not g.any()
        assert logdet_acyclicity(_dense(d, idx, w2))[0] == float("inf")


def test_paths_switch_at_the_batch_size():
    """Few blocks of one size go block by block, many as one batch (same results either way)."""
    rng = np.random.default_rng(5)
    n_small = 90
    d = 4 * n_small + 40
    idx = _many_blocks(d, n_small, rng)
    default, scalar, batch = _routes(d, idx)
    counts = {n: default.blocks.count(n) for n in range(2, BATCHED_UPTO + 1)}
    batched = {n for n, route in default.small_routes.items() if route == "batch"}
    assert batched == {n for n, k in counts.items() if k >= BATCH_FROM[n]}
    assert batched and len(batched) < len(counts)  # both routes in one evaluator
    assert scalar.small_routes == {n: "one by one" for n in counts if counts[n]}  # every small block
    assert batch.small_routes == {n: "batch" for n in counts if counts[n]}
    w = _inside(d, idx, rng, 0.8)
    w[rng.random(idx.size) < 0.1] = 0.0
    h, g = default(w)
    for ev in (scalar, batch):
        h2, g2 = ev(w)
        assert h2 == h
        np.testing.assert_array_equal(g2, g)
