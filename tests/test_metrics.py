"""Tests of bnsl_cli.metrics: hand-computed cases, a literal count_accuracy reference, properties."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from bnsl_cli.errors import InputDataError
from bnsl_cli.metrics import METRIC_KEYS, find_cycle, is_dag, structure_metrics, v_structures

# FPR is left out: count_accuracy's FPR divides directed false edges by undirected negative pairs and
# can exceed 1 (see test_fpr_can_exceed_one_as_in_count_accuracy).
RATE_KEYS = ("tpr", "fdr", "precision", "recall", "f1", "skeleton_precision", "skeleton_recall", "skeleton_f1")


# ---------------------------------------------------------------------------------------------
# helpers


def random_dag(d: int, p: float, rng: np.random.Generator, weighted: bool = False) -> np.ndarray:
    """Random DAG: strictly upper triangular in a random node order; W[i, j] is the edge i -> j."""
    B = np.triu(rng.random((d, d)) < p, 1).astype(float)
    perm = rng.permutation(d)
    B = B[np.ix_(perm, perm)]
    if weighted:
        B = B * rng.uniform(0.5, 2.0, (d, d)) * rng.choice([-1.0, 1.0], (d, d))
    return B


def reference_count_accuracy(B_true: np.ndarray, B_est: np.ndarray) -> dict:
    """The published NOTEARS count_accuracy formulas for a DAG estimate, written out literally with
    linear indices (as in Zheng et al.'s utils), including its max(denominator, 1) convention."""
    d = B_true.shape[0]
    pred = np.flatnonzero(B_est)
    cond = np.flatnonzero(B_true)
    cond_reversed = np.flatnonzero(B_true.T)
    cond_skeleton = np.concatenate([cond, cond_reversed])
    true_pos = np.intersect1d(pred, cond, assume_unique=True)
    false_pos = np.setdiff1d(pred, cond_skeleton, assume_unique=True)
    extra = np.setdiff1d(pred, cond, assume_unique=True)
    reverse = np.intersect1d(extra, cond_reversed, assume_unique=True)
    pred_size = len(pred)
    cond_neg_size = 0.5 * d * (d - 1) - len(cond)
    fdr = float(len(reverse) + len(false_pos)) / max(pred_size, 1)
    tpr = float(len(true_pos)) / max(len(cond), 1)
    fpr = float(len(reverse) + len(false_pos)) / max(cond_neg_size, 1)
    pred_lower = np.flatnonzero(np.tril(B_est + B_est.T))
    cond_lower = np.flatnonzero(np.tril(B_true + B_true.T))
    extra_lower = np.setdiff1d(pred_lower, cond_lower, assume_unique=True)
    missing_lower = np.setdiff1d(cond_lower, pred_lower, assume_unique=True)
    shd = len(extra_lower) + len(missing_lower) + len(reverse)
    return {"fdr": fdr, "tpr": tpr, "fpr": fpr, "shd": shd, "nnz": pred_size}


def brute_v_structures(B: np.ndarray) -> set[tuple[int, int, int]]:
    d = B.shape[0]
    out = set()
    for k in range(d):
        for i, j in itertools.combinations(range(d), 2):
            if k in (i, j):
                continue
            if B[i, k] and B[j, k] and not B[i, j] and not B[j, i]:
                out.add((i, k, j))
    return out


# ---------------------------------------------------------------------------------------------
# hand-computed case


def test_hand_computed_one_reversed_one_missing_one_extra():
    # nodes 0..4 (d = 5). Truth T: 0->1, 1->2, 3->2, 2->4         |T| = 4
    # Estimate E: 1->0 (reversed), 1->2 (correct), 3->2 (correct), 0->4 (extra); 2->4 missing.
    T = np.zeros((5, 5))
    T[0, 1] = T[1, 2] = T[3, 2] = T[2, 4] = 1
    E = np.zeros((5, 5))
    E[1, 0] = E[1, 2] = E[3, 2] = E[0, 4] = 1
    m = structure_metrics(E, T)
    assert list(m) == list(METRIC_KEYS)
    # nnz = |E| = 4; tp = {1->2, 3->2} = 2; reversed = {1->0} = 1; false = {0->4} = 1
    assert (m["nnz"], m["tp"], m["reversed"]) == (4, 2, 1)
    # fp = reversed + false = 2; fn = |T| - tp = 4 - 2 = 2 (0->1 reversed, 2->4 missing)
    assert (m["fp"], m["fn"]) == (2, 2)
    # skeleton pairs: S_true = {01, 12, 23, 24}, S_est = {01, 12, 23, 04}
    # extra = {04} = 1, missing = {24} = 1, shd = 1 + 1 + 1 = 3
    assert (m["extra"], m["missing"], m["shd"]) == (1, 1, 3)
    assert m["fdr"] == pytest.approx(2 / 4)  # (reversed + false) / |E|
    assert m["tpr"] == pytest.approx(2 / 4)  # tp / |T|
    assert m["fpr"] == pytest.approx(2 / (5 * 4 / 2 - 4))  # fp / (d(d-1)/2 - |T|) = 2 / 6
    assert m["precision"] == pytest.approx(2 / 4)  # tp / nnz
    assert m["recall"] == pytest.approx(2 / 4)
    assert m["f1"] == pytest.approx(0.5)  # 2 * .5 * .5 / (.5 + .5)
    # skeleton: common pairs {01, 12, 23} = 3 of 4 each way
    assert m["skeleton_precision"] == pytest.approx(3 / 4)
    assert m["skeleton_recall"] == pytest.approx(3 / 4)
    assert m["skeleton_f1"] == pytest.approx(3 / 4)
    # v-structures: truth has 1 -> 2 <- 3 (1, 3 non-adjacent); estimate has 1 -> 2 <- 3 as well;
    # estimate also 1 -> 0? no: 0's parents are {1} only; 4's parents are {0} only.
    assert (m["v_structures_true"], m["v_structures_found"], m["v_structures_correct"]) == (1, 1, 1)
    assert m["weight_mse"] is None  # both binary
    assert m["is_dag"] is True


def test_hand_computed_weights_and_threshold():
    # truth 0 -> 1 (w = 2), 1 -> 2 (w = -1); ||W*||^2 = 4 + 1 = 5
    T = np.array([[0, 2.0, 0], [0, 0, -1.0], [0, 0, 0]])
    # estimate 0 -> 1 (1.5), 1 -> 2 (-1.0), 0 -> 2 (0.05: an edge unless thresholded)
    E = np.array([[0, 1.5, 0.05], [0, 0, -1.0], [0, 0, 0]])
    m = structure_metrics(E, T)
    assert m["nnz"] == 3 and m["extra"] == 1 and m["shd"] == 1
    # ||E - T||^2 = 0.5^2 + 0.05^2 = 0.2525; / 5
    assert m["weight_mse"] == pytest.approx(0.2525 / 5)
    m = structure_metrics(E, T, threshold=0.1)
    assert m["nnz"] == 2 and m["shd"] == 0 and m["tpr"] == 1.0
    assert m["weight_mse"] == pytest.approx(0.25 / 5)
    # |w| <= T is dropped: threshold exactly 1.0 also removes the -1.0 edge
    m = structure_metrics(E, T, threshold=1.0)
    assert m["nnz"] == 1 and m["missing"] == 1
    # binary estimate against weighted truth: no weight_mse
    assert structure_metrics((E != 0).astype(float), T)["weight_mse"] is None


def test_two_cycle_estimate_counts_one_true_and_one_reversed():
    T = np.zeros((3, 3))
    T[0, 1] = 1
    E = np.zeros((3, 3))
    E[0, 1] = E[1, 0] = 1
    m = structure_metrics(E, T)
    # 0->1 is a true positive, 1->0 reversed; the skeleton matches, so shd = reversed = 1
    assert (m["tp"], m["reversed"], m["fp"], m["shd"], m["extra"], m["missing"]) == (1, 1, 1, 1, 0, 0)
    assert m["is_dag"] is False


# ---------------------------------------------------------------------------------------------
# zero denominators


def test_empty_estimate_rates_are_none_not_errors():
    T = np.zeros((4, 4))
    T[0, 1] = 1
    m = structure_metrics(np.zeros((4, 4)), T)
    assert m["nnz"] == 0
    assert m["fdr"] is None and m["precision"] is None and m["f1"] is None
    assert m["skeleton_precision"] is None and m["skeleton_f1"] is None
    assert m["tpr"] == 0.0 and m["fpr"] == 0.0 and m["fn"] == 1 and m["shd"] == 1


def test_empty_truth_rates_are_none():
    E = np.zeros((3, 3))
    E[0, 2] = 1
    m = structure_metrics(E, np.zeros((3, 3)))
    assert m["tpr"] is None and m["recall"] is None and m["f1"] is None and m["skeleton_recall"] is None
    assert m["fdr"] == 1.0 and m["precision"] == 0.0
    assert m["fpr"] == pytest.approx(1 / 3)


def test_both_empty_and_single_node():
    m = structure_metrics(np.zeros((3, 3)), np.zeros((3, 3)))
    assert m["shd"] == 0 and m["tpr"] is None and m["fdr"] is None and m["fpr"] == 0.0
    m = structure_metrics(np.zeros((1, 1)), np.zeros((1, 1)))
    assert m["fpr"] is None  # d(d-1)/2 - |T| = 0
    m = structure_metrics(np.zeros((0, 0)), np.zeros((0, 0)))
    assert m["shd"] == 0 and m["fpr"] is None


def test_complete_truth_has_no_negatives():
    # full tournament DAG on 3 nodes: |T| = 3 = d(d-1)/2, so FPR's denominator is 0
    T = np.triu(np.ones((3, 3)), 1)
    m = structure_metrics(T.T.copy(), T)
    assert m["fpr"] is None and m["reversed"] == 3 and m["tp"] == 0 and m["precision"] == 0.0
    assert m["f1"] == 0.0  # precision = recall = 0: defined, not None


def test_cyclic_truth_with_more_edges_than_pairs_gives_none_fpr():
    T = np.array([[0, 1.0], [1.0, 0]])  # |T| = 2 > d(d-1)/2 = 1
    m = structure_metrics(np.zeros((2, 2)), T, allow_cyclic_truth=True)
    assert m["fpr"] is None


# ---------------------------------------------------------------------------------------------
# cycles


def test_cyclic_truth_is_rejected_unless_allowed():
    T = np.zeros((3, 3))
    T[0, 1] = T[1, 2] = T[2, 0] = 1
    with pytest.raises(InputDataError, match="--allow-cyclic-truth") as info:
        structure_metrics(T, T, names=["a", "b", "c"])
    assert "cycle" in str(info.value) and "a -> b -> c -> a" in str(info.value)
    m = structure_metrics(T, T, allow_cyclic_truth=True)
    assert m["shd"] == 0 and m["tpr"] == 1.0 and m["is_dag"] is False


def test_is_dag_and_find_cycle():
    B = np.zeros((3, 3))
    B[0, 1] = B[1, 2] = 1
    assert is_dag(B) and find_cycle(B) is None
    B[2, 0] = 1
    assert not is_dag(B)
    cyc = find_cycle(B)
    assert cyc[0] == cyc[-1] and sorted(cyc[:-1]) == [0, 1, 2]
    S = np.zeros((2, 2))
    S[1, 1] = 1  # a self-loop is a cycle
    assert not is_dag(S)


def test_bad_shapes_and_values():
    with pytest.raises(InputDataError):
        structure_metrics(np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(InputDataError):
        structure_metrics(np.zeros((2, 2)), np.zeros((3, 3)))
    with pytest.raises(InputDataError):
        structure_metrics(np.array([[0, np.nan], [0, 0]]), np.zeros((2, 2)))
    with pytest.raises(InputDataError):
        structure_metrics(np.zeros((2, 2)), np.zeros((2, 2)), threshold=-1)


# ---------------------------------------------------------------------------------------------
# against the count_accuracy reference


@pytest.mark.parametrize("seed", range(40))
def test_matches_count_accuracy_on_random_dags(seed):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(2, 15))
    W_true = random_dag(d, rng.uniform(0.05, 0.6), rng, weighted=bool(seed % 2))
    # estimates: an unrelated DAG, or the truth with some edges flipped / dropped / added
    if seed % 3 == 0:
        W_est = random_dag(d, rng.uniform(0.0, 0.6), rng, weighted=True)
    else:
        W_est = W_true.copy()
        nz = np.argwhere(W_est != 0)
        for i, j in nz[rng.random(len(nz)) < 0.3]:
            W_est[j, i], W_est[i, j] = W_est[i, j], 0.0
        W_est[tuple(nz[rng.random(len(nz)) < 0.2].T)] = 0.0
        if not is_dag(W_est):
            W_est = np.triu(W_est, 1)
    ref = reference_count_accuracy(W_true != 0, W_est != 0)
    m = structure_metrics(W_est, W_true)
    assert m["shd"] == ref["shd"]
    assert m["nnz"] == ref["nnz"]
    n_T = int((W_true != 0).sum())
    for key, den in (("fdr", m["nnz"]), ("tpr", n_T), ("fpr", d * (d - 1) / 2 - n_T)):
        if den > 0:
            assert m[key] == pytest.approx(ref[key], abs=1e-12), key
        else:
            assert m[key] is None, key


# ---------------------------------------------------------------------------------------------
# v-structures


@pytest.mark.parametrize("seed", range(15))
def test_v_structures_against_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    d = int(rng.integers(1, 9))
    B1 = random_dag(d, 0.4, rng)
    B2 = (rng.random((d, d)) < 0.3).astype(float)  # any graph, may be cyclic
    np.fill_diagonal(B2, 0)
    v1, v2 = brute_v_structures(B1), brute_v_structures(B2)
    assert {tuple(r) for r in v_structures(B1).tolist()} == v1
    assert len(v_structures(B1)) == len(v1)
    m = structure_metrics(B2, B1)
    assert m["v_structures_true"] == len(v1)
    assert m["v_structures_found"] == len(v2)
    assert m["v_structures_correct"] == len(v1 & v2)


def test_v_structures_shape_when_none():
    assert v_structures(np.zeros((3, 3))).shape == (0, 3)
    B = np.zeros((3, 3))
    B[0, 2] = B[1, 2] = 1
    assert v_structures(B).tolist() == [[0, 2, 1]]
    B[0, 1] = 1  # parents now adjacent: shielded collider, not a v-structure
    assert v_structures(B).tolist() == []


# ---------------------------------------------------------------------------------------------
# properties


@st.composite
def graph_pairs(draw):
    d = draw(st.integers(0, 7))
    est = draw(hnp.arrays(np.float64, (d, d), elements=st.sampled_from([0.0, 0.0, 1.0, -0.5, 2.5])))
    seed = draw(st.integers(0, 2**32 - 1))
    truth = random_dag(d, draw(st.floats(0, 1)), np.random.default_rng(seed), weighted=draw(st.booleans()))
    return est, truth


@settings(max_examples=150, deadline=None)
@given(graph_pairs())
def test_rates_in_unit_interval_on_any_estimate(pair):
    est, truth = pair
    m = structure_metrics(est, truth)
    for k in RATE_KEYS:
        assert m[k] is None or (0.0 <= m[k] <= 1.0 and not math.isnan(m[k])), (k, m[k])
    E, T = est != 0, truth != 0
    assert m["nnz"] == int(E.sum())
    assert m["tp"] + m["fp"] == m["nnz"]
    assert m["tp"] + m["fn"] == int(T.sum())
    assert m["shd"] == m["extra"] + m["missing"] + m["reversed"]
    assert m["v_structures_correct"] <= min(m["v_structures_found"], m["v_structures_true"])
    if m["fdr"] is not None:
        assert m["precision"] == pytest.approx(1 - m["fdr"])
    assert m["is_dag"] == is_dag(E)
    assert m["weight_mse"] is None or m["weight_mse"] >= 0
    assert m["fpr"] is None or m["fpr"] >= 0
    if m["is_dag"] and m["reversed"] == 0 and m["fpr"] is not None:
        assert m["fpr"] <= 1.0  # false edges of a DAG fit in the negative pairs


def test_fpr_can_exceed_one_as_in_count_accuracy():
    # truth 0->1 (d = 3, |T| = 1, negatives = 3 - 1 = 2). DAG estimate 1->0 (reversed), 0->2, 1->2 (false)
    T = np.zeros((3, 3))
    T[0, 1] = 1
    E = np.zeros((3, 3))
    E[1, 0] = E[0, 2] = E[1, 2] = 1
    m = structure_metrics(E, T)
    assert m["fp"] == 3 and m["fpr"] == pytest.approx(3 / 2)  # (reversed + false) / 2
    assert reference_count_accuracy(T, E)["fpr"] == pytest.approx(3 / 2)


@settings(max_examples=50, deadline=None)
@given(graph_pairs(), st.randoms(use_true_random=False))
def test_metrics_invariant_under_node_permutation(pair, rnd):
    est, truth = pair
    perm = list(range(est.shape[0]))
    rnd.shuffle(perm)
    a = structure_metrics(est, truth)
    b = structure_metrics(est[np.ix_(perm, perm)], truth[np.ix_(perm, perm)])
    wa, wb = a.pop("weight_mse"), b.pop("weight_mse")
    assert a == b
    assert (wa is None and wb is None) or wa == pytest.approx(wb, rel=1e-12)


def test_identical_graphs_are_perfect():
    rng = np.random.default_rng(7)
    W = random_dag(10, 0.3, rng, weighted=True)
    m = structure_metrics(W, W)
    assert m["shd"] == 0 and m["tpr"] == 1.0 and m["fdr"] == 0.0 and m["f1"] == 1.0
    assert m["weight_mse"] == 0.0
    assert m["v_structures_correct"] == m["v_structures_true"]


def test_truth_with_two_cycle_counts_prediction_as_true_not_reversed():
    # truth a <-> b (allowed cyclic); estimate a -> b: a true positive, not reversed
    T = np.array([[0, 1.0], [1.0, 0]])
    E = np.array([[0, 1.0], [0, 0]])
    m = structure_metrics(E, T, allow_cyclic_truth=True)
    assert (m["tp"], m["reversed"], m["fp"], m["fn"], m["shd"]) == (1, 0, 0, 1, 0)


def test_self_loop_in_estimate_counts_like_count_accuracy():
    # count_accuracy's skeleton is tril(B + B^T) including the diagonal: a self-loop is an extra adjacency
    T = np.zeros((3, 3))
    T[0, 1] = 1
    E = T.copy()
    E[2, 2] = 1
    m = structure_metrics(E, T)
    ref = reference_count_accuracy(T, E)
    assert m["shd"] == ref["shd"] == 1 and m["extra"] == 1
    assert m["fdr"] == pytest.approx(ref["fdr"]) and m["nnz"] == ref["nnz"] == 2
    assert m["is_dag"] is False


# ---------------------------------------------------------------------------------------------
# CPDAG and skeleton SHD

from itertools import product  # noqa: E402

from bnsl_cli.metrics import cpdag  # noqa: E402


def _mat(d, edges):
    B = np.zeros((d, d), dtype=int)
    for i, j in edges:
        B[i, j] = 1
    return B


def _status(C, i, j):
    return "-" if C[i, j] and C[j, i] else (">" if C[i, j] else ("<" if C[j, i] else " "))


def test_cpdag_of_a_chain_is_undirected():
    C = cpdag(_mat(3, [(0, 1), (1, 2)]))
    assert _status(C, 0, 1) == "-" and _status(C, 1, 2) == "-" and _status(C, 0, 2) == " "


def test_cpdag_keeps_a_v_structure():
    C = cpdag(_mat(3, [(0, 2), (1, 2)]))
    assert _status(C, 0, 2) == ">" and _status(C, 1, 2) == ">" and _status(C, 0, 1) == " "


def test_meek_rule_1_propagates_below_a_collider():
    # 0 -> 2 <- 1, 2 -> 3: 2 - 3 is compelled by R1
    C = cpdag(_mat(4, [(0, 2), (1, 2), (2, 3)]))
    assert _status(C, 2, 3) == ">"


def test_meek_rule_2_orients_against_a_cycle():
    # 0 -> 2 <- 1, 2 -> 3 (R1), 0 -> 3: 0 - 3 must be 0 -> 3 (R2 via 0 -> 2 -> 3)
    C = cpdag(_mat(4, [(0, 2), (1, 2), (2, 3), (0, 3)]))
    assert _status(C, 0, 3) == ">" and _status(C, 2, 3) == ">"


def test_meek_rule_3():
    # a1 -> c <- a2 (a1, a2 non-adjacent), b adjacent to a1, a2, c; b -> c compelled by R3
    b, a1, a2, c = 0, 1, 2, 3
    C = cpdag(_mat(4, [(b, a1), (b, a2), (a1, c), (a2, c), (b, c)]))
    assert _status(C, b, c) == ">"
    assert _status(C, b, a1) == "-" and _status(C, b, a2) == "-"


def test_markov_equivalent_dags_have_cpdag_shd_zero_but_dag_shd_positive():
    chain = _mat(3, [(0, 1), (1, 2)])
    reverse = _mat(3, [(2, 1), (1, 0)])
    fork = _mat(3, [(1, 0), (1, 2)])
    for other in (reverse, fork):
        m = structure_metrics(other, chain)
        assert m["shd_cpdag"] == 0 and m["shd_skeleton"] == 0 and m["shd"] == 2 - (other is fork)
    collider = _mat(3, [(0, 1), (2, 1)])
    m = structure_metrics(collider, chain)
    assert m["shd_cpdag"] == 2 and m["shd_skeleton"] == 0 and m["shd"] == 1


def test_cpdag_shd_counts_missing_extra_and_orientation_once_per_pair():
    truth = _mat(4, [(0, 2), (1, 2), (2, 3)])  # compelled everywhere
    est = _mat(4, [(0, 2), (1, 2), (0, 1)])  # 0-1 extra, 2-3 missing; 0,1 now adjacent: no v-structure
    m = structure_metrics(est, truth)
    assert m["shd_skeleton"] == 2
    # est CPDAG: triangle 0,1,2 all undirected; truth: 0->2, 1->2 compelled: two status changes + 2
    assert m["shd_cpdag"] == 4


def test_cyclic_estimate_has_no_cpdag_shd():
    m = structure_metrics(_mat(3, [(0, 1), (1, 2), (2, 0)]), _mat(3, [(0, 1)]))
    assert m["shd_cpdag"] is None and m["shd_skeleton"] == 2


def _brute_force_cpdag(B):
    """Equivalence class by enumeration: every acyclic orientation of the skeleton with the same
    v-structures (Verma & Pearl); an edge is directed in the CPDAG iff all members agree."""
    d = B.shape[0]
    pairs = [(i, j) for i in range(d) for j in range(i + 1, d) if B[i, j] or B[j, i]]
    vs = {tuple(r) for r in v_structures(B).tolist()}
    members = []
    for bits in product((0, 1), repeat=len(pairs)):
        M = np.zeros((d, d), dtype=int)
        for (i, j), b in zip(pairs, bits):
            M[(i, j) if b == 0 else (j, i)] = 1
        if is_dag(M) and {tuple(r) for r in v_structures(M).tolist()} == vs:
            members.append(M)
    stack = np.array(members)
    return stack.any(axis=0)  # i -> j in some member; compelled iff never j -> i


@pytest.mark.parametrize("seed", range(40))
def test_cpdag_matches_enumeration_of_the_equivalence_class(seed):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(3, 7))
    p = rng.uniform(0.2, 0.7)
    order = rng.permutation(d)
    A = np.triu(rng.random((d, d)) < p, 1).astype(int)
    B = np.zeros((d, d), dtype=int)
    B[np.ix_(order, order)] = A
    if (B != 0).sum() > 10:
        B[np.ix_(order, order)] = np.triu(A, 1) * (rng.random((d, d)) < 0.6)
    assert np.array_equal(cpdag(B), _brute_force_cpdag(B))
