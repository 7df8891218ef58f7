"""Structure-learning accuracy: an estimated graph against a true graph.

Orientation: entry ``W[i, j]`` is the weight of the edge from node ``i`` to node ``j`` (rows are
parents, columns are children). Only the pattern of non-zero entries matters for the structure
metrics: the predicted edge set is ``E = {(i, j) : W_est[i, j] != 0}`` and the true edge set is
``T = {(i, j) : W_true[i, j] != 0}``; ``d`` is the number of nodes.

The directed metrics follow NOTEARS' ``count_accuracy`` (Zheng et al., 2018) exactly. Every
predicted edge falls in one of three disjoint classes:

- true positive ``tp``: ``(i, j) ∈ E`` and ``(i, j) ∈ T``;
- ``reversed``: ``(i, j) ∈ E``, ``(i, j) ∉ T`` and ``(j, i) ∈ T``;
- false: ``(i, j) ∈ E`` with neither ``(i, j)`` nor ``(j, i)`` in ``T``.

So ``nnz = |E| = tp + reversed + false`` and

- ``fp = reversed + false`` (the numerator of FDR and FPR in ``count_accuracy``);
- ``fn = |T| − tp``: true edges not predicted in the correct direction (missing or reversed);
- ``fdr = fp / |E|``;  ``tpr = recall = tp / |T|``;  ``fpr = fp / (d(d − 1)/2 − |T|)`` (directed false
  edges over undirected negative pairs, as in ``count_accuracy``: with reversed edges it can exceed 1);
- ``precision = tp / |E|`` (= 1 − fdr);  ``f1 = 2·precision·recall / (precision + recall)``.

SHD is computed on skeletons as ``count_accuracy`` does: with ``S_est`` and ``S_true`` the sets of
unordered adjacent pairs (the non-zero pattern of the lower triangle of ``B + Bᵀ``), ``extra = |S_est \\ S_true|``,
``missing = |S_true \\ S_est|`` and ``shd = extra + missing + reversed``.

Skeleton metrics use the same pair sets: ``skeleton_precision = |S_est ∩ S_true| / |S_est|``,
``skeleton_recall = |S_est ∩ S_true| / |S_true|``, ``skeleton_f1`` their harmonic mean.
A v-structure is ``i → k ← j`` with ``i`` and ``j`` not adjacent (counted once per unordered pair
``{i, j}``); ``v_structures_correct`` counts those present in both graphs.

Markov-equivalence metrics (a linear Gaussian model with unequal noise variances identifies the DAG
only up to its Markov equivalence class):

- ``shd_skeleton = extra + missing``: the SHD of the undirected skeletons;
- ``shd_cpdag``: the SHD between the CPDAGs (completed partially directed acyclic graphs, the
  equivalence classes) of the estimate and the truth, as R bnlearn's ``shd`` reports it: each
  unordered pair ``{i, j}`` counts 1 when its status differs between the two CPDAGs, the status
  being one of absent, ``i → j``, ``j → i`` or undirected ``i — j``. Markov-equivalent DAGs have
  ``shd_cpdag = 0``. ``None`` when either graph has a directed cycle (no CPDAG exists).

:func:`cpdag` builds the CPDAG of a DAG by Chickering's (1995) compelled-edge labelling, in time
linear in the edges times the in-degrees. The result is the same as orienting the v-structures of the
skeleton and then applying Meek's rules R1–R3 until nothing changes (Meek 1995; for a DAG's pattern
R4 is never needed).

**CPDAG (PDAG) estimates.** Tools such as PC or GES return an equivalence class: some edges are
undirected. Passed as ``undirected`` (a symmetric mask, see :func:`pdag_undirected`), each undirected
pair ``i — j`` is one predicted edge, counted as NOTEARS' ``count_accuracy`` counts its ``-1``
entries: a true positive when the truth has ``i`` and ``j`` adjacent (either direction), a false
edge otherwise, never reversed. The skeleton metrics are unchanged; ``shd_cpdag`` compares the
estimate's pattern as given (compelled edges and undirected pairs, not completed again) with the
truth's CPDAG; v-structures count only directed edges; ``weight_mse`` is ``None``; ``is_dag`` is
False when there is an undirected edge; ``undirected`` counts them (0 for a directed estimate).

``weight_mse = ‖Ŵ − W*‖²_F / ‖W*‖²_F`` is reported only when both matrices are weighted (some entry
outside ``{0, 1}``), otherwise ``None``.

Unlike ``count_accuracy``, which divides by ``max(denominator, 1)``, a rate whose denominator is
zero (or negative: ``d(d − 1)/2 − |T|`` for a truth with many 2-cycles) is ``None``. A cyclic
estimate is evaluated (``count_accuracy`` rejects it) and flagged with ``is_dag = False``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from bnsl_cli.dag import is_dag
from bnsl_cli.errors import InputDataError

__all__ = ["METRIC_KEYS", "structure_metrics", "v_structures", "is_dag", "find_cycle", "cpdag", "cpdag_shd",
           "pdag_undirected"]

#: The keys of :func:`structure_metrics`' result, in order.
METRIC_KEYS = (
    "shd",
    "shd_cpdag",
    "shd_skeleton",
    "tpr",
    "fdr",
    "fpr",
    "nnz",
    "precision",
    "recall",
    "f1",
    "tp",
    "fp",
    "fn",
    "reversed",
    "extra",
    "missing",
    "skeleton_precision",
    "skeleton_recall",
    "skeleton_f1",
    "v_structures_found",
    "v_structures_true",
    "v_structures_correct",
    "weight_mse",
    "is_dag",
    "undirected",
)


def _ratio(num: float, den: float) -> Optional[float]:
    """``num / den`` as a float, or ``None`` when the denominator is not positive."""
    return float(num) / float(den) if den > 0 else None


def _f1(p: Optional[float], r: Optional[float]) -> Optional[float]:
    if p is None or r is None:
        return None
    return 0.0 if p + r == 0 else 2.0 * p * r / (p + r)


def _as_square(W, what: str) -> np.ndarray:
    A = np.asarray(W, dtype=float)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise InputDataError(f"{what}: expected a square matrix, got shape {A.shape}")
    if not np.isfinite(A).all():
        raise InputDataError(f"{what}: matrix holds NaN or infinite entries")
    return A


def find_cycle(B) -> Optional[list[int]]:
    """Node indices ``[i0, i1, …, i0]`` of one directed cycle of ``B`` (edge ``i → j`` iff
    ``B[i, j] != 0``; a self-loop is a cycle), or ``None`` for a DAG."""
    import networkx as nx

    G = nx.from_numpy_array(np.asarray(B) != 0, create_using=nx.DiGraph)
    try:
        cyc = nx.find_cycle(G, orientation="original")
    except nx.NetworkXNoCycle:
        return None
    return [int(u) for u, _, _ in cyc] + [int(cyc[0][0])]


def _adjacency(B: np.ndarray) -> np.ndarray:
    """Symmetric boolean skeleton with an empty diagonal."""
    A = B | B.T
    np.fill_diagonal(A, False)
    return A


def _count_v(P: np.ndarray, A: np.ndarray) -> int:
    """Number of triples ``i → k ← j`` (``P[i, k]`` and ``P[j, k]``, ``i < j``) with ``A[i, j]`` false.

    Per child ``k`` with ``m_k ≥ 2`` parents: ``C(m_k, 2)`` parent pairs, of which half the ordered
    pairs of parents ``(i, j)`` with ``A[i, j]`` are adjacent (``A`` symmetric with an empty diagonal);
    time ``O(d² + Σ m_k²)``.
    """
    P = P.copy()
    np.fill_diagonal(P, False)
    twice = 0  # twice the count: m(m − 1) ordered parent pairs minus the adjacent ones, per child
    for k in np.flatnonzero(P.sum(axis=0) >= 2):
        pa = np.flatnonzero(P[:, k])
        twice += pa.size * (pa.size - 1) - int(A[np.ix_(pa, pa)].sum())
    return int(round(twice / 2.0))


def v_structures(B) -> np.ndarray:
    """All v-structures ``i → k ← j`` with ``i`` and ``j`` non-adjacent, as rows ``(i, k, j)``, ``i < j``.

    ``B[i, j] != 0`` is the edge ``i → j``. Returns an ``int`` array of shape ``(m, 3)``, sorted by
    ``k`` then ``i`` then ``j``.
    """
    Bb = _as_square(B, "graph") != 0
    np.fill_diagonal(Bb, False)
    A = _adjacency(Bb)
    rows = []
    for k in np.flatnonzero(Bb.sum(axis=0) >= 2):  # one step per child with >= 2 parents
        pa = np.flatnonzero(Bb[:, k])
        free = np.triu(~A[np.ix_(pa, pa)], 1)
        a, b = np.nonzero(free)
        if a.size:
            rows.append(np.column_stack([pa[a], np.full(a.size, k), pa[b]]))
    if not rows:
        return np.zeros((0, 3), dtype=int)
    return np.concatenate(rows).astype(int)


def cpdag(B) -> np.ndarray:
    """The CPDAG of the DAG ``B`` (``B[i, j] != 0`` is the edge ``i → j``) as a boolean matrix ``C``:
    ``C[i, j] and not C[j, i]`` is the compelled edge ``i → j``; ``C[i, j] and C[j, i]`` is the
    reversible (undirected) edge ``i — j``.

    Chickering's (1995) labelling: the nodes ``y`` in a topological order, the edges into each ``y``
    labelled at once from those into its latest parent ``x`` (in that order), whose labels are known:

    - a compelled ``w → x`` with ``w`` not a parent of ``y``: every edge into ``y`` is compelled;
    - otherwise every compelled ``w → x`` makes ``w → y`` compelled, and the edges into ``y`` still
      unlabelled are compelled when ``y`` has a parent ``z ≠ x`` not adjacent to ``x``, else reversible.

    The same CPDAG as the v-structures oriented and Meek's rules R1–R3 applied until nothing changes
    (R1: ``a → b — c``, ``a``, ``c`` non-adjacent gives ``b → c``; R2: ``b → a → c`` and ``b — c`` gives
    ``b → c``; R3: ``b — a1 → c``, ``b — a2 → c``, ``a1``, ``a2`` non-adjacent and ``b — c`` gives
    ``b → c``). Time ``O(d² + Σ_y |pa(y)|·(1 + |pa(x_y)|))``: the dense matrix in and out, then
    linear in the edges times the in-degrees.

    Raises :class:`~bnsl_cli.errors.InputDataError` if ``B`` has a directed cycle.
    """
    C = _as_square(B, "graph") != 0
    d = C.shape[0]
    src, dst = np.nonzero(C)
    parents: list[list[int]] = [[] for _ in range(d)]
    children: list[list[int]] = [[] for _ in range(d)]
    for i, j in zip(src.tolist(), dst.tolist()):
        parents[j].append(i)
        children[i].append(j)
    # a topological order (Kahn); one that leaves nodes out: the graph has a directed cycle (a self-loop, too)
    indeg = [len(p) for p in parents]
    order = [v for v in range(d) if indeg[v] == 0]
    for u in order:  # grows while it is walked
        for v in children[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                order.append(v)
    if len(order) != d:
        raise InputDataError("a CPDAG needs an acyclic graph; this one has a directed cycle")
    pos = [0] * d
    for k, v in enumerate(order):
        pos[v] = k
    compelled: list[set[int]] = [set() for _ in range(d)]  # compelled[y]: the parents w of y with w → y compelled
    rev_src: list[int] = []
    rev_dst: list[int] = []
    for y in order:
        pa_y = parents[y]
        if not pa_y:
            continue
        x = max(pa_y, key=pos.__getitem__)
        in_y = set(pa_y)
        known = compelled[y]
        if any(w not in in_y for w in compelled[x]):
            known.update(pa_y)  # every edge into y is compelled
            continue
        known.update(compelled[x])
        pa_x = set(parents[x])
        if any(z != x and z not in pa_x for z in pa_y):
            known.update(pa_y)
        else:
            for z in pa_y:
                if z not in known:
                    rev_src.append(z)
                    rev_dst.append(y)
    if rev_src:
        C[rev_dst, rev_src] = True  # a reversible edge z → y is also y → z
    return C


def _pair_status(C: np.ndarray) -> np.ndarray:
    """Per ordered pair: 0 absent, 1 ``i → j``, 2 ``j → i``, 3 undirected (upper triangle is used)."""
    return C.astype(np.int8) + 2 * C.T.astype(np.int8)


def cpdag_shd(B_est, B_true) -> int:
    """SHD between the CPDAGs of two DAGs: the number of unordered pairs whose status (absent,
    ``i → j``, ``j → i``, undirected) differs; 0 for Markov-equivalent DAGs."""
    Se, St = _pair_status(cpdag(B_est)), _pair_status(cpdag(B_true))
    return int(np.triu(Se != St, 1).sum())


def pdag_undirected(W) -> Optional[np.ndarray]:
    """The undirected pairs of an estimate that reads as a PDAG (partially directed graph), or ``None``.

    A pair is undirected when ``W[i, j] == W[j, i] != 0`` (symmetric entries: a CPDAG written as a
    0/1 matrix, bnlearn arcs listed both ways, Tetrad's ``---``). The estimate reads as a PDAG when it
    has such a pair, every 2-cycle is such a pair, and the directed edges left are acyclic; otherwise
    (no symmetric pair, or a directed cycle) ``None``: the graph is taken as a directed graph.
    """
    A = _as_square(W, "estimate")
    E = A != 0
    both = E & E.T
    np.fill_diagonal(both, False)
    if not both.any():
        return None
    sym = both & (A == A.T)
    if (both & ~sym).any():
        return None
    if not is_dag(E & ~sym):
        return None
    return sym


def _is_weighted(W: np.ndarray) -> bool:
    return bool(np.any((W != 0) & (W != 1)))


def structure_metrics(
    W_est,
    W_true,
    *,
    allow_cyclic_truth: bool = False,
    threshold: float = 0.0,
    names: Optional[Sequence[str]] = None,
    undirected: Optional[np.ndarray] = None,
) -> dict:
    """Compare an estimated graph with the true one (NOTEARS ``count_accuracy`` definitions).

    Parameters
    ----------
    W_est, W_true : (d, d) array-like
        ``W[i, j]`` is the weight of the edge ``i → j``; an edge is any non-zero entry.
    allow_cyclic_truth : bool
        A cyclic truth raises :class:`~bnsl_cli.errors.InputDataError` unless this is True.
    threshold : float
        Entries of ``W_est`` with ``|w| <= threshold`` are set to zero first (0: any non-zero is an edge).
        ``weight_mse`` uses the thresholded estimate.
    names : sequence of str, optional
        Node names, used only to name the nodes of a cycle in the error message.
    undirected : (d, d) bool array, optional
        Symmetric mask of the estimate's undirected pairs (a CPDAG estimate; see
        :func:`pdag_undirected`). Default: every non-zero entry is a directed edge.

    Returns
    -------
    dict
        Keys :data:`METRIC_KEYS` (see the module docstring for the formulas): counts as ``int``,
        rates as ``float`` or ``None`` when their denominator is zero, ``is_dag`` (of the estimate)
        as ``bool``.
    """
    We = _as_square(W_est, "estimate")
    Wt = _as_square(W_true, "truth")
    if We.shape != Wt.shape:
        raise InputDataError(f"estimate has shape {We.shape} but the truth has shape {Wt.shape}")
    if threshold < 0 or not np.isfinite(threshold):
        raise InputDataError(f"threshold must be a finite number >= 0, got {threshold!r}")
    if threshold > 0:
        We = np.where(np.abs(We) <= threshold, 0.0, We)
    d = We.shape[0]

    if not allow_cyclic_truth:
        cyc = find_cycle(Wt)
        if cyc is not None:
            label = [str(names[k]) if names is not None else str(k) for k in cyc]
            raise InputDataError(
                "the truth graph has a cycle (" + " -> ".join(label) + "); "
                "pass --allow-cyclic-truth to evaluate against it anyway"
            )

    E = We != 0  # predicted edges
    T = Wt != 0  # true edges
    U = np.zeros_like(E)  # undirected pairs of a CPDAG estimate (symmetric)
    if undirected is not None:
        U = np.asarray(undirected, dtype=bool) & E & E.T
        if U.shape != E.shape or (U != U.T).any():
            raise InputDataError("undirected: expected a symmetric mask of the estimate's shape")
        np.fill_diagonal(U, False)
    D = E & ~U  # directed edges
    U_up = np.triu(U, 1)  # each undirected pair once
    T_adj = T | T.T
    n_E = int(D.sum()) + int(U_up.sum())
    n_T = int(T.sum())

    tp = int((D & T).sum()) + int((U_up & T_adj).sum())
    rev = int((D & ~T & T.T).sum())
    false = int((D & ~T & ~T.T).sum()) + int((U_up & ~T_adj).sum())
    fp = rev + false
    fn = n_T - tp

    # skeletons: unordered adjacent pairs, the lower triangle of B + B^T as in count_accuracy
    # (its diagonal holds self-loops, which the graph readers reject)
    lower = np.tril(np.ones((d, d), dtype=bool))
    S_est = (E | E.T) & lower
    S_true = (T | T.T) & lower
    n_Se, n_St = int(S_est.sum()), int(S_true.sum())
    s_common = int((S_est & S_true).sum())
    extra = n_Se - s_common
    missing = n_St - s_common

    precision = _ratio(tp, n_E)
    recall = _ratio(tp, n_T)
    sk_p = _ratio(s_common, n_Se)
    sk_r = _ratio(s_common, n_St)

    A_est, A_true = _adjacency(E), _adjacency(T)
    v_found = _count_v(D, A_est)
    v_true = _count_v(T, A_true)
    v_correct = _count_v(D & T, A_est | A_true)

    estimate_is_dag = is_dag(E)
    shd_cpdag = None
    if U.any():
        if is_dag(D) and is_dag(T):
            Se, St = _pair_status(D | U), _pair_status(cpdag(T))
            shd_cpdag = int(np.triu(Se != St, 1).sum())
    elif estimate_is_dag and is_dag(T):
        shd_cpdag = cpdag_shd(E, T)

    weight_mse = None
    if _is_weighted(We) and _is_weighted(Wt) and not U.any():
        weight_mse = float(((We - Wt) ** 2).sum() / (Wt**2).sum())

    return {
        "shd": extra + missing + rev,
        "shd_cpdag": shd_cpdag,
        "shd_skeleton": extra + missing,
        "tpr": recall,
        "fdr": _ratio(fp, n_E),
        "fpr": _ratio(fp, d * (d - 1) / 2 - n_T),
        "nnz": n_E,
        "precision": precision,
        "recall": recall,
        "f1": _f1(precision, recall),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "reversed": rev,
        "extra": extra,
        "missing": missing,
        "skeleton_precision": sk_p,
        "skeleton_recall": sk_r,
        "skeleton_f1": _f1(sk_p, sk_r),
        "v_structures_found": v_found,
        "v_structures_true": v_true,
        "v_structures_correct": v_correct,
        "weight_mse": weight_mse,
        "is_dag": estimate_is_dag,
        "undirected": int(U_up.sum()),
    }
