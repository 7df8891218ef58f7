"""The layered layout of bnsl show: layers by longest path, fewer crossings after the sweeps."""

from __future__ import annotations

import numpy as np

from bnsl_cli.io.layout import count_crossings, layered_layout, longest_path_layers


def _random_dag(d, p, seed):
    rng = np.random.default_rng(seed)
    A = np.triu(rng.random((d, d)) < p, 1).astype(float)
    perm = rng.permutation(d)
    return A[np.ix_(perm, perm)]


def test_every_edge_points_down_and_layers_are_longest_paths():
    for seed in range(5):
        A = _random_dag(15, 0.2, seed)
        layer = longest_path_layers(A)
        for i, j in zip(*np.nonzero(A)):
            assert layer[j] >= layer[i] + 1
        for j in range(15):  # tight: a non-source sits right below its lowest parent
            parents = np.flatnonzero(A[:, j])
            assert layer[j] == (0 if parents.size == 0 else layer[parents].max() + 1)
        L = layered_layout(A)
        assert all(L.xy[i, 1] > L.xy[j, 1] for i, j in zip(*np.nonzero(A)))


def test_long_edges_get_one_bend_per_crossed_layer():
    A = np.zeros((3, 3))
    A[0, 1] = A[1, 2] = A[0, 2] = 1
    L = layered_layout(A)
    assert list(L.layer) == [0, 1, 2]
    assert len(L.bends[(0, 2)]) == 1 and L.bends[(0, 2)][0][1] == L.xy[1, 1]


def test_barycentre_sweeps_remove_avoidable_crossings():
    # two layers whose index order crosses every edge: a0->b2, a1->b1, a2->b0
    A = np.zeros((6, 6))
    A[0, 5] = A[1, 4] = A[2, 3] = 1
    L = layered_layout(A)
    assert count_crossings([[0, 1, 2], [3, 4, 5]], [(0, 5), (1, 4), (2, 3)]) == 3
    assert L.crossings == 0
    xs = L.xy[:, 0]
    assert (xs[0] < xs[1] < xs[2]) == (xs[5] < xs[4] < xs[3])


def test_sweeps_never_make_it_worse_on_random_graphs():
    total_before = total_after = 0
    for seed in range(6):
        A = _random_dag(25, 0.12, seed)
        L = layered_layout(A, sweeps=0)
        total_before += L.crossings
        L2 = layered_layout(A)
        assert L2.crossings <= L.crossings
        total_after += L2.crossings
    assert total_after < total_before


def test_cycles_are_set_aside_for_the_layout():
    A = np.zeros((3, 3))
    A[0, 1] = 2.0
    A[1, 2] = 2.0
    A[2, 0] = 0.5  # the weakest edge of the cycle is not used for the layers
    L = layered_layout(A)
    assert list(L.layer) == [0, 1, 2]
    assert (2, 0) not in L.layout_edges
