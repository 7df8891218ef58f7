"""A layered drawing layout for a directed graph (Sugiyama style), computed with numpy only.

Steps:

1. **Cycles.** Layers need an acyclic graph: edges on a directed cycle are set aside for the
   layout, weakest first (:func:`bnsl_cli.dag.threshold_to_dag`); they are still drawn.
2. **Layers** by the longest path from a source: a node without parents is in layer 0, every other
   node one layer below its lowest parent, so every edge points down.
3. **Long edges.** An edge that spans more than one layer gets a *dummy* point in each layer it
   crosses, so that crossing reduction sees it and it is drawn as a polyline around the nodes.
4. **Order within layers** by barycentre sweeps: down the layers, each node (or dummy) moves to the
   mean position of its neighbours in the layer above; then up, by the layer below; repeated while
   the number of crossings falls (the best order seen is kept).
5. **Coordinates**: layer k at ``y = -k``; within a layer nodes sit side by side, spaced by their
   widths, the layer centred on ``x = 0``.

Orientation: ``A[i, j]`` non-zero is the edge ``i → j``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from bnsl_cli.dag import threshold_to_dag

__all__ = ["Layout", "layered_layout", "longest_path_layers", "count_crossings"]


@dataclass(frozen=True)
class Layout:
    """Where everything goes.

    ``layer[k]``: the layer of node ``k`` (0 at the top); ``order``: per layer, the items left to right
    (an int is a node, a tuple ``(i, j, m)`` the ``m``-th dummy point of the edge ``i → j``);
    ``xy``: node centres (``d × 2``); ``bends[(i, j)]``: the dummy points of a long edge, top down;
    ``layout_edges``: the edges the layers were built from; ``crossings``: crossings between adjacent
    layers in the final order (counting dummies, so edge crossings as drawn).
    """

    layer: np.ndarray
    order: list
    xy: np.ndarray
    bends: dict
    layout_edges: list
    crossings: int


def longest_path_layers(A) -> np.ndarray:
    """The layer of every node of the DAG ``A``: 0 for a source, else 1 + the largest parent layer."""
    A = np.asarray(A) != 0
    d = A.shape[0]
    indeg = A.sum(axis=0).astype(int)
    layer = np.zeros(d, dtype=int)
    stack = [int(k) for k in np.flatnonzero(indeg == 0)][::-1]
    seen = 0
    while stack:
        i = stack.pop()
        seen += 1
        for j in np.flatnonzero(A[i]):
            layer[j] = max(layer[j], layer[i] + 1)
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(int(j))
    if seen != d:
        raise ValueError("longest_path_layers needs an acyclic graph")
    return layer


def _pairs_crossing(upper_pos: dict, lower_pos: dict, links: list) -> int:
    """Crossings among straight segments between two adjacent layers (positions by item)."""
    segs = sorted((upper_pos[u], lower_pos[v]) for u, v in links)
    n = 0
    for a in range(len(segs)):
        ua, la = segs[a]
        for b in range(a + 1, len(segs)):
            ub, lb = segs[b]
            if ub > ua and lb < la:
                n += 1
    return n


def count_crossings(order: list, links: list) -> int:
    """Crossings of ``links`` (pairs of items in adjacent layers, upper first) for the layer order ``order``."""
    pos = [{item: k for k, item in enumerate(items)} for items in order]
    where = {item: lk for lk, items in enumerate(order) for item in items}
    by_layer: dict[int, list] = {}
    for u, v in links:
        by_layer.setdefault(where[u], []).append((u, v))
    return sum(_pairs_crossing(pos[lk], pos[lk + 1], ls) for lk, ls in by_layer.items())


def _sweep(order: list, up_nb: dict, down_nb: dict, downward: bool) -> list:
    new = [list(items) for items in order]
    rng = range(1, len(new)) if downward else range(len(new) - 2, -1, -1)
    for lk in rng:
        ref = new[lk - 1] if downward else new[lk + 1]
        rpos = {item: k for k, item in enumerate(ref)}
        nb = up_nb if downward else down_nb

        def key(item, k):
            ns = [rpos[n] for n in nb.get(item, ()) if n in rpos]
            return (float(np.mean(ns)) if ns else float(k), k)  # no neighbour: keep its place

        new[lk] = [item for _, item in sorted(((key(it, k), it) for k, it in enumerate(new[lk])), key=lambda t: t[0])]
    return new


def layered_layout(
    A,
    widths: Optional[Sequence[float]] = None,
    *,
    layer_gap: float = 1.0,
    node_gap: float = 0.3,
    sweeps: int = 12,
    strength=None,
) -> Layout:
    """A layered layout of the directed graph ``A`` (see the module docstring).

    ``widths``: each node's drawn width (default 1) in the units of the result; ``strength``: a
    matrix that says which edges to keep when cycles must be broken (larger is kept; default |A|).
    """
    A = np.asarray(A, dtype=float)
    d = A.shape[0]
    widths = np.ones(d) if widths is None else np.asarray(widths, dtype=float)
    S = np.abs(A) if strength is None else np.where(A != 0, np.abs(np.asarray(strength, dtype=float)), 0.0)
    S = np.where(A != 0, np.maximum(S, 1e-300), 0.0)
    np.fill_diagonal(S, 0.0)
    dag, _removed = threshold_to_dag(S, 0.0)
    layer = longest_path_layers(dag)
    edges = [(int(i), int(j)) for i, j in zip(*np.nonzero(dag))]
    n_layers = int(layer.max()) + 1 if d else 0

    # initial order: by node index within a layer; dummies after, in edge order
    order: list[list] = [[k for k in range(d) if layer[k] == lk] for lk in range(n_layers)]
    links = []  # (upper item, lower item) between adjacent layers
    for i, j in edges:
        prev = i
        for m, lk in enumerate(range(layer[i] + 1, layer[j])):
            dummy = (i, j, m)
            order[lk].append(dummy)
            links.append((prev, dummy))
            prev = dummy
        links.append((prev, j))
    up_nb: dict = {}
    down_nb: dict = {}
    for u, v in links:
        down_nb.setdefault(u, []).append(v)
        up_nb.setdefault(v, []).append(u)

    best, best_c = order, count_crossings(order, links)
    cur = order
    for s in range(sweeps):
        cur = _sweep(cur, up_nb, down_nb, downward=(s % 2 == 0))
        c = count_crossings(cur, links)
        if c < best_c:
            best, best_c = cur, c
        if best_c == 0:
            break

    # coordinates: items side by side, dummies narrow, each layer centred
    xy = np.zeros((d, 2))
    dummy_xy: dict = {}
    for lk, items in enumerate(best):
        ws = [widths[it] if isinstance(it, int) else node_gap for it in items]
        total = sum(ws) + node_gap * max(len(items) - 1, 0)
        x = -total / 2.0
        for it, w in zip(items, ws):
            cx = x + w / 2.0
            if isinstance(it, int):
                xy[it] = (cx, -lk * layer_gap)
            else:
                dummy_xy[it] = (cx, -lk * layer_gap)
            x += w + node_gap
    bends = {
        (i, j): [dummy_xy[(i, j, m)] for m in range(layer[j] - layer[i] - 1)]
        for i, j in edges
        if layer[j] - layer[i] > 1
    }
    return Layout(layer, best, xy, bends, edges, best_c)
