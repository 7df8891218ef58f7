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
