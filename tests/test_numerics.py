import numpy as np
import pytest
import scipy.linalg

from bnsl_cli.dag import is_dag, threshold_to_dag
from bnsl_cli.numerics import acyclicity, acyclicity_blocks, cyclic_blocks


def _h_reference(W):
    E = scipy.linalg.expm(W * W)
    return np.trace(E) - W.shape[0], E.T * 2 * W


@pytest.mark.parametrize("seed", range(5))
def test_acyclicity_matches_its_definition_and_the_blockwise_form(seed):
    rng = np.random.default_rng(seed)
    d = 15
    W = rng.normal(size=(d, d)) * (rng.random((d, d)) < 0.12)
    np.fill_diagonal(W, 0)
    h, g = acyclicity(W)
    h_ref, g_ref = _h_reference(W)
    assert h == pytest.approx(h_ref, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(g, g_ref, atol=1e-10)
    blocks = cyclic_blocks(W != 0)
    hb, gb = acyclicity_blocks(W, blocks)
    assert hb == pytest.approx(h_ref, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(gb, g_ref, atol=1e-10)
    # a pattern larger than W's support still gives the exact values
    wider = (W != 0) | (rng.random((d, d)) < 0.1)
    hw, gw = acyclicity_blocks(W, cyclic_blocks(wider))
    assert hw == pytest.approx(h_ref, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(gw, g_ref, atol=1e-10)


def test_h_is_zero_exactly_on_dags_and_overflow_is_inf():
    W = np.triu(np.ones((6, 6)), 1)
    assert acyclicity(W)[0] == pytest.approx(0.0, abs=1e-12)
    assert cyclic_blocks(W) == []
    W[5, 0] = 1.0
    assert acyclicity(W)[0] > 0
    assert acyclicity(W * 1e3)[0] == float("inf")


def test_threshold_to_dag_drops_only_the_weakest_cycle_edges():
    W = np.zeros((3, 3))
    W[0, 1], W[1, 2], W[2, 0], W[0, 2] = 1.0, 0.8, 0.5, 0.2
    D, removed = threshold_to_dag(W, 0.3)
    assert is_dag(D) and D[0, 2] == 0  # thresholded
    assert removed == [(2, 0, 0.5)]
    assert D[0, 1] == 1.0 and D[1, 2] == 0.8


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra.numpy import arrays  # noqa: E402


@given(arrays(np.float64, (7, 7), elements=st.floats(-3, 3)), st.floats(0, 2))
@settings(max_examples=100, deadline=None)
def test_threshold_until_dag_always_yields_a_dag(W, threshold):
    D, removed = threshold_to_dag(W, threshold)
    assert is_dag(D)
    assert np.all((D == 0) | (np.abs(D) > threshold))
    assert np.all((D == 0) | (D == W))
    for i, j, w in removed:
        assert abs(w) > threshold and D[i, j] == 0


# -- the log-determinant acyclicity function (DAGMA) and the L-BFGS of the W-step ----------------

from bnsl_cli.numerics import acyclicity_of, lbfgs, logdet_acyclicity  # noqa: E402


def _logdet_reference(W, s):
    d = W.shape[0]
    M = s * np.eye(d) - W * W
    sign, logabs = np.linalg.slogdet(M)
    assert sign > 0
    return d * np.log(s) - logabs, 2 * np.linalg.inv(M).T * W


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("s", [1.0, 2.5])
def test_logdet_matches_its_definition_gradient_and_blockwise_form(seed, s):
    rng = np.random.default_rng(seed)
    d = 12
    W = 0.4 * rng.normal(size=(d, d)) * (rng.random((d, d)) < 0.15)
    np.fill_diagonal(W, 0)
    assert np.max(np.abs(np.linalg.eigvals(W * W))) < s  # inside the domain
    h, g = logdet_acyclicity(W, s)
    h_ref, g_ref = _logdet_reference(W, s)
    assert h == pytest.approx(h_ref, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(g, g_ref, atol=1e-10)
    # central finite differences on the non-zero entries
    eps = 1e-6
    for i, j in zip(*np.nonzero(W)):
        Wp, Wm = W.copy(), W.copy()
        Wp[i, j] += eps
        Wm[i, j] -= eps
        fd = (logdet_acyclicity(Wp, s)[0] - logdet_acyclicity(Wm, s)[0]) / (2 * eps)
        assert fd == pytest.approx(g[i, j], rel=1e-5, abs=1e-7)
    hb, gb = acyclicity_blocks(W, cyclic_blocks(W != 0), acyclicity_of("logdet", s))
    assert hb == pytest.approx(h_ref, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(gb, g_ref, atol=1e-10)


def test_logdet_is_zero_on_dags_positive_on_cycles_and_inf_outside_its_domain():
    W = 1.7 * np.triu(np.ones((6, 6)), 1)  # large weights, but acyclic: always inside
    h, g = logdet_acyclicity(W)
    assert h == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(g, 0.0, atol=1e-12)
    C = np.zeros((3, 3))
    C[0, 1] = C[1, 2] = C[2, 0] = 0.9  # a 3-cycle: spectral radius of C∘C is 0.81
    assert logdet_acyclicity(C)[0] == pytest.approx(-np.log(1 - 0.81**3), rel=1e-12)
    C[2, 0] = 1.3  # product of the squares 0.81² · 1.69 > 1: outside for s = 1 …
    assert logdet_acyclicity(C)[0] == float("inf")
    assert np.isfinite(logdet_acyclicity(C, s=2.0)[0])  # … inside for s = 2
    with pytest.raises(ValueError, match="unknown acyclicity"):
        acyclicity_of("trace")


def test_lbfgs_backs_off_from_infinite_values_and_reports_its_stop():
    # a barrier at |x| = 1 with the quadratic's minimum outside it: the optimum sits near 0.99
    def f(x):
        if np.max(np.abs(x)) >= 1:
            return np.inf, np.zeros_like(x)
        return float(-np.sum(np.log(1 - x * x)) + 50 * np.sum((x - 2) ** 2)), 2 * x / (1 - x * x) + 100 * (x - 2)

    res = lbfgs(f, np.zeros(3), ftol=1e-12)
    assert res.success
    np.testing.assert_allclose(res.jac, 0.0, atol=1e-4)
    assert np.all(np.abs(res.x) < 1) and np.all(res.x > 0.98)
    capped = lbfgs(f, np.zeros(3), ftol=1e-12, maxiter=2)
    assert not capped.success and "maxiter" in capped.message and capped.nit == 2
    outside = lbfgs(f, np.full(3, 1.5))
    assert not outside.success and "outside the domain" in outside.message


def test_lbfgs_solves_an_ill_conditioned_quadratic():
    rng = np.random.default_rng(0)
    Q = rng.normal(size=(30, 30))
    A = Q @ Q.T + 1e-2 * np.eye(30)
    b = rng.normal(size=30)
    res = lbfgs(lambda x: (0.5 * x @ A @ x - b @ x, A @ x - b), np.zeros(30), ftol=1e-15, gtol=1e-9, maxiter=5000)
    np.testing.assert_allclose(res.x, np.linalg.solve(A, b), rtol=1e-4, atol=1e-6)


# -- the W-step's block evaluator -----------------------------------------------------------------

from bnsl_cli.numerics import BlockAcyclicity, logdet_core, logdet_selected  # noqa: E402


def _sparse_cyclic(d, seed, density, scale):
    rng = np.random.default_rng(seed)
    W = scale * rng.normal(size=(d, d)) * (rng.random((d, d)) < density)
    np.fill_diagonal(W, 0)
    return W


@pytest.mark.parametrize("kind", ["expm", "logdet"])
@pytest.mark.parametrize("seed", range(3))
def test_block_evaluator_matches_the_dense_functions_on_a_wider_pattern(kind, seed):
    d = 40
    W = _sparse_cyclic(d, seed, 0.06, 0.5)
    rng = np.random.default_rng(100 + seed)
    pattern = (W != 0) | (rng.random((d, d)) < 0.03)
    np.fill_diagonal(pattern, False)
    idx = np.flatnonzero(pattern)
    ev = BlockAcyclicity(d, idx, kind)
    h, g = ev(W.ravel()[idx])
    h_ref, g_ref = acyclicity_of(kind)(W)
    assert np.isfinite(h_ref) and h_ref > 0
    assert h == pytest.approx(h_ref, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(g, g_ref.ravel()[idx], atol=1e-10)
    assert ev.blocks == sorted((len(b) for b in cyclic_blocks(pattern)), reverse=True)


def test_block_evaluator_on_an_acyclic_pattern_and_outside_the_domain():
    d = 6
    idx = np.flatnonzero(np.triu(np.ones((d, d)), 1))
    ev = BlockAcyclicity(d, idx, "logdet")
    assert ev.blocks == []
    h, g = ev(np.full(idx.size, 3.0))
    assert h == 0.0 and not g.any()
    C = np.zeros((3, 3))
    C[0, 1], C[1, 2], C[2, 0] = 0.9, 0.9, 1.3  # spectral radius of C∘C above 1
    idx = np.flatnonzero(C)
    assert BlockAcyclicity(3, idx, "logdet")(C.ravel()[idx])[0] == float("inf")
    assert np.isfinite(BlockAcyclicity(3, idx, "logdet", s=2.0)(C.ravel()[idx])[0])
    with pytest.raises(ValueError, match="unknown acyclicity"):
        BlockAcyclicity(3, idx, "trace")


@pytest.mark.parametrize("seed", range(3))
def test_selected_logdet_entries_equal_the_full_inverse(seed):
    n = 150
    W = _sparse_cyclic(n, seed, 0.03, 0.45)
    A = W * W
    A *= 0.8 / np.max(np.abs(np.linalg.eigvals(A)))  # inside the domain, spectral radius 0.8
    r, c = np.nonzero(W)
    h_full, Z = logdet_core(A.copy(), 1.0)
    h_sel, z = logdet_selected(A.copy(), 1.0, c, r)
    assert h_sel == pytest.approx(h_full, rel=1e-12, abs=1e-14)
    np.testing.assert_allclose(z, Z[c, r], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(Z, np.linalg.inv(np.eye(n) - A), atol=1e-12)


def test_selected_logdet_rejects_what_the_full_inverse_test_rejects():
    # a 4-cycle plus a chord, scaled through the boundary ρ(W∘W) = 1; also a matrix with det > 0
    # (two eigenvalues of W∘W above s) that is not an M-matrix
    rng = np.random.default_rng(7)
    n = 30
    W = _sparse_cyclic(n, 7, 0.15, 0.3)
    r, c = np.nonzero(W)
    rho = np.max(np.abs(np.linalg.eigvals(W * W)))
    for factor in (0.9, 0.999, 1.001, 1.5, 3.0):
        A = W * W * (factor / rho)
        full = logdet_core(A.copy(), 1.0)[1] is not None
        sel = logdet_selected(A.copy(), 1.0, c, r)[1] is not None
        assert full == sel == (factor < 1)
    two = np.zeros((4, 4))
    two[0, 1] = two[1, 0] = two[2, 3] = two[3, 2] = 1.5  # eigenvalues of A: ±2.25 twice: det(I − A) > 0
    A = two * two
    assert np.linalg.det(np.eye(4) - A) > 0
    rr, cc = np.nonzero(two)
    assert logdet_core(A.copy(), 1.0)[1] is None
    assert logdet_selected(A.copy(), 1.0, cc, rr)[1] is None
    del rng


def test_block_evaluator_uses_the_selected_entries_on_large_blocks():
    from bnsl_cli import numerics

    d = numerics.SELECTED_FROM + 20
    W = _sparse_cyclic(d, 3, 4.0 / d, 0.5)
    W *= np.sqrt(0.7 / np.max(np.abs(np.linalg.eigvals(W * W))))  # spectral radius of W∘W 0.7
    idx = np.flatnonzero(W)
    ev = BlockAcyclicity(d, idx, "logdet")
    assert ev.blocks and ev.blocks[0] >= numerics.SELECTED_FROM
    h, g = ev(W.ravel()[idx])
    h_ref, g_ref = logdet_acyclicity(W)
    assert np.isfinite(h_ref) and h_ref > 0
    assert h == pytest.approx(h_ref, rel=1e-9)
    np.testing.assert_allclose(g, g_ref.ravel()[idx], atol=1e-10)
