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


def test_geometry_bounds_hold_every_bend_label_and_node():
    """The drawing is sized from these bounds (issue 29: a bend of a long edge left of every node was
    drawn off the canvas); bends can lie outside the nodes' extent, and the bounds must hold them."""
    from bnsl_cli.io.draw import graph_geometry

    beyond = 0
    for seed in range(8):
        A = _random_dag(18, 0.25, seed) * np.random.default_rng(seed).normal(size=(18, 18))
        geo = graph_geometry(A, [f"node{k}" for k in range(18)])
        x0, x1, y0, y1 = geo.bounds
        node_x0 = float((geo.xy[:, 0] - geo.widths / 2).min())
        node_x1 = float((geo.xy[:, 0] + geo.widths / 2).max())
        for e in geo.edges:
            for x, y in e.points:
                assert x0 <= x <= x1 and y0 <= y <= y1
                beyond += x < node_x0 or x > node_x1
            if e.label is not None:
                lx, ly = e.label_xy
                assert x0 <= lx - e.label_w / 2 and lx + e.label_w / 2 <= x1 and y0 <= ly <= y1
        assert x0 <= node_x0 and node_x1 <= x1
        assert y0 <= float(geo.xy[:, 1].min()) - geo.box_h / 2 and float(geo.xy[:, 1].max()) + geo.box_h / 2 <= y1
    assert beyond > 0  # the case that broke: some bends do lie beyond the nodes


def test_geometry_needs_no_matplotlib(monkeypatch):
    import sys

    from bnsl_cli.io.draw import graph_geometry

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    A = _random_dag(6, 0.5, 1)
    geo = graph_geometry(A, list("abcdef"))
    assert len(geo.edges) == int(A.sum())
