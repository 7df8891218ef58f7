"""Graph utilities: acyclicity tests and turning a weighted matrix into a DAG.

Orientation: entry ``W[i, j]`` is the weight of the edge from node ``i`` to node ``j``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from bnsl_cli.errors import NoDagError

__all__ = ["is_dag", "find_cycle_edges", "threshold_to_dag", "finish_graph", "fit_required", "unfitted_required"]


def is_dag(W: np.ndarray) -> bool:
    """True when the graph with an edge ``i → j`` for every ``W[i, j] != 0`` has no directed cycle."""
    A = np.asarray(W) != 0
    d = A.shape[0]
    if np.any(np.diag(A)):
        return False
    indeg = A.sum(axis=0).astype(int)
    stack = list(np.flatnonzero(indeg == 0))
    seen = 0
    while stack:
        i = stack.pop()
        seen += 1
        for j in np.flatnonzero(A[i]):
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(j)
    return seen == d



def reaches(children: list, src: int, dst: int) -> bool:
    """Is there a directed path ``src → … → dst`` in the graph given by its ``children`` lists?"""
    stack, seen = [src], {src}
    while stack:
        u = stack.pop()
        if u == dst:
            return True
        for v in children[u]:
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return False


def descendants(children: list, src: int) -> set:
    """Every node reachable from ``src`` by a directed path (``src`` included). A search that tests
    many candidate edges ``i → j`` for a cycle keeps one set per ``j`` (adding ``i → j`` closes a
    cycle exactly when ``i`` is among ``j``'s descendants)."""
    stack, seen = [src], {src}
    while stack:
        u = stack.pop()
        for v in children[u]:
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return seen


class DescendantCache:
    """:func:`descendants` of each node, kept across the moves of a search on the graph given by
    ``children`` (the search changes ``children`` and then reports the change here). An edge
    ``a → b`` added or removed changes the descendants of exactly the nodes that reach ``a``, i.e.
    the cached sets that hold ``a``: :meth:`edge_changed` drops those."""

    def __init__(self, children: list):
        self.children = children
        self._sets: dict = {}

    def __call__(self, node: int) -> set:
        s = self._sets.get(node)
        if s is None:
            s = self._sets[node] = descendants(self.children, node)
        return s

    def edge_changed(self, source: int) -> None:
        """An edge out of ``source`` was added or removed (call for each end of a reversal)."""
        self._sets = {k: s for k, s in self._sets.items() if source not in s}


def can_reverse(children: list, i: int, j: int) -> bool:
    """Does reversing the edge ``i → j`` keep the graph given by its ``children`` sets acyclic, i.e.
    is there no other path ``i → … → j``? (``children`` is left as it was.)"""
    children[i].discard(j)
    try:
        return not reaches(children, i, j)
    finally:
        children[i].add(j)


def find_cycle_edges(W: np.ndarray) -> np.ndarray:
    """Boolean mask of the edges that lie on some directed cycle (both ends in one strongly
    connected component of size > 1, or a self-loop)."""
    A = np.asarray(W) != 0
    n_comp, labels = scipy.sparse.csgraph.connected_components(
        scipy.sparse.csr_matrix(A), directed=True, connection="strong"
    )
    sizes = np.bincount(labels, minlength=n_comp)
    same = labels[:, None] == labels[None, :]
    big = sizes[labels] > 1
    return A & same & big[:, None] | (A & np.eye(A.shape[0], dtype=bool))


def threshold_to_dag(
    W: np.ndarray, threshold: float, keep: Optional[np.ndarray] = None
) -> tuple[np.ndarray, list[tuple[int, int, float]]]:
    """Zero every ``|W[i, j]| <= threshold``, then remove the weakest edges until the graph is acyclic.

    Only edges lying on a cycle are candidates for removal, weakest (smallest ``|w|``) first.
    ``keep`` (a d × d bool mask: required edges, acyclic among themselves) is never thresholded nor
    removed. Returns the DAG and the list of removed ``(i, j, w)`` (the thresholded ones are not listed).
    """
    W = np.array(W, dtype=float, copy=True)
    if keep is None:
        W[np.abs(W) <= threshold] = 0.0
    else:
        W[(np.abs(W) <= threshold) & ~keep] = 0.0
    np.fill_diagonal(W, 0.0)
    removed: list[tuple[int, int, float]] = []
    while True:
        on_cycle = find_cycle_edges(W)
        if keep is not None:
            on_cycle &= ~keep
        if not on_cycle.any():
            return W, removed
        mag = np.where(on_cycle, np.abs(W), np.inf)
        i, j = np.unravel_index(int(np.argmin(mag)), mag.shape)
        removed.append((int(i), int(j), float(W[i, j])))
        W[i, j] = 0.0


def finish_graph(
    W_raw: np.ndarray, threshold: float, where: str, names: Sequence[str], knowledge=None
) -> tuple[np.ndarray, list]:
    """Threshold and break cycles (weakest edges first); returns the DAG and the removed edges as
    ``{"source", "target", "weight"}`` entries. A non-finite estimate raises :class:`NoDagError`.

    With ``knowledge`` (:class:`bnsl_cli.knowledge.Knowledge`) the forbidden entries are zeroed first
    and the required edges are neither thresholded nor removed to break a cycle (a required edge with
    weight exactly 0 stays 0 here: :func:`fit_required` fits it where second moments are known)."""
    if not np.all(np.isfinite(W_raw)):
        raise NoDagError(
            f"{where}: the estimate diverged (non-finite weights); no DAG can be produced. "
            "Try fewer --rounds or a smaller --rho2-growth."
        )
    keep = None
    if knowledge is not None:
        W_raw = np.where(knowledge.forbidden_mask(), 0.0, W_raw)
        keep = knowledge.required_mask()
    W, removed = threshold_to_dag(W_raw, threshold, keep)
    return W, [{"source": names[i], "target": names[j], "weight": w} for i, j, w in removed]


def unfitted_required(W: np.ndarray, knowledge) -> list[tuple[int, int]]:
    """The required edges of ``knowledge`` whose weight in ``W`` is exactly 0."""
    if knowledge is None:
        return []
    return [(i, j) for i, j in knowledge.required if W[i, j] == 0.0]


def fit_required(W: np.ndarray, S: np.ndarray, knowledge) -> np.ndarray:
    """Give every required edge of weight 0 in the DAG ``W`` its least-squares weight from the
    second-moment matrix ``S``: the edge is added (a cycle it closes is broken among the other
    edges, weakest first), then every child whose parent set changed is refitted on its parents
    (``S_PP w = S_Pj``)."""
    missing = unfitted_required(W, knowledge)
    if not missing:
        return W
    R = knowledge.required_mask()
    start = np.array(W, dtype=float, copy=True)
    for i, j in missing:
        start[i, j] = np.inf  # strongest: never the one removed to break a cycle
    new, _ = threshold_to_dag(start, -1.0, keep=R)
    changed = np.flatnonzero(((new != 0) != (np.asarray(W) != 0)).any(axis=0))
    for j in changed:
        parents = np.flatnonzero(new[:, j] != 0)
        new[:, j] = 0.0
        if parents.size:
            w, *_ = np.linalg.lstsq(S[np.ix_(parents, parents)], S[parents, j], rcond=None)
            new[parents, j] = w
    return new
