"""Personalisation: refit the edge weights of a learned structure on each participant's own rows.

Orientation: ``W[i, j]`` is the weight of the edge ``i → j`` (rows are parents, columns are children).

The structure (which entries may be non-zero) is fixed by a learned graph, e.g. the shared DAG of a
``fed-sparse`` run. For participant ``p`` with rows ``X_p`` (``n_p × d``), centred with its *own*
column means ``x̄_p``, and the sample second moments ``S = (X_p − x̄_p)ᵀ(X_p − x̄_p) / n_p``, the
weights of node ``j`` with parent set ``pa(j)`` solve the (ridge) least-squares problem ::

    min_w  1/(2 n_p) ‖x_j − X_{pa(j)} w‖²  +  (R/2) ‖w‖²      ⇔      (S_{pa,pa} + R·I) w = S_{pa,j}

(``R = 0``: ordinary least squares). Because the loss is divided by ``n_p``, ``R`` means the same
amount of shrinkage whatever the number of rows. When ``R = 0`` and the system is singular (fewer
rows than parents, or collinear parents) the minimum-norm solution is used and the node is listed in
``rank_deficient`` (a :class:`RankDeficientWarning` says which).

Locality: every number here is computed from one participant's rows only; nothing is exchanged
between participants or with a server. Running :func:`refit_participants` on several tables in one
process is just a loop over independent local computations.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from bnsl_cli.errors import InputDataError, RankDeficientWarning

__all__ = [
    "RankDeficientWarning",
    "ParticipantRefit",
    "structure_support",
    "align_graph",
    "refit_weights",
    "refit_participants",
    "normalised_mse",
]


@dataclass(frozen=True)
class ParticipantRefit:
    """One participant's refitted weights.

    ``W[i, j]`` is the weight of the edge ``names[i] → names[j]``; it is non-zero only on the
    given structure. ``mse`` is ``‖W − W*‖²_F / ‖W*‖²_F`` against that participant's truth (``None``
    without one). ``rank_deficient`` lists the nodes (by name) whose problem was singular.
    """

    participant: int
    W: np.ndarray
    names: tuple[str, ...]
    rows: int
    edges: int
    residual_variance: np.ndarray
    mse: Optional[float] = None
    rank_deficient: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict, compare=False)


def structure_support(W) -> np.ndarray:
    """The boolean structure of a weighted graph: ``support[i, j]`` is True for the edge ``i → j``."""
    W = np.asarray(W, dtype=float)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise InputDataError(f"the structure must be a square matrix (got shape {W.shape})")
    if np.any(np.diag(W) != 0):
        raise InputDataError("the structure has a self-loop (non-zero diagonal); a node cannot be its own parent")
    return W != 0


def align_graph(graph, names: Sequence[str], source: str = "estimate") -> np.ndarray:
    """The adjacency of ``graph`` (a :class:`bnsl_cli.io.graphs.Graph`) with its nodes put in the
    order of ``names`` (the data columns), matched by name.

    A graph whose format cannot list isolated nodes (an edges CSV) may lack some names; they become
    isolated. A node of the graph that is not a data column, or (for formats that list every node) a
    data column missing from the graph, is an :class:`~bnsl_cli.errors.InputDataError`.
    """
    names = tuple(names)
    g_names = tuple(graph.names)
    unknown = [n for n in g_names if n not in set(names)]
    missing = [n for n in names if n not in set(g_names)]
    if unknown:
        raise InputDataError(
            f"{source}: node(s) {', '.join(map(repr, unknown[:5]))} are not columns of the data "
            f"(columns: {', '.join(names[:8])}{'…' if len(names) > 8 else ''})"
        )
    if missing and getattr(graph, "all_nodes_listed", True):
        raise InputDataError(
            f"{source}: lacks node(s) {', '.join(map(repr, missing[:5]))} that are columns of the data; "
            "the graph and the shards must have the same variables"
        )
    pos = {n: k for k, n in enumerate(g_names)}
    d = len(names)
    W = np.zeros((d, d))
    have = np.array([k for k, n in enumerate(names) if n in pos], dtype=int)
    src = np.array([pos[names[k]] for k in have], dtype=int)
    if have.size:
        W[np.ix_(have, have)] = np.asarray(graph.W, dtype=float)[np.ix_(src, src)]
    return W


def refit_weights(X, support, ridge: float = 0.0) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Least-squares weights of every node on its parents in ``support``, from the rows ``X``.

    Parameters
    ----------
    X : (n, d) array
        One participant's rows; centred here with their own column means.
    support : (d, d) bool array-like
        ``support[i, j]`` True means ``i`` is a parent of ``j`` (edge ``i → j``).
    ridge : float
        ``R ≥ 0`` in ``(S_pa,pa + R·I) w = S_pa,j`` (see the module docstring).

    Returns
    -------
    W : (d, d) array
        ``W[i, j]`` the weight of ``i → j``; zero off the support.
    residual_variance : (d,) array
        ``‖x_j − X_pa w‖² / n`` per node (on centred data).
    rank_deficient : list of int
        Nodes whose system was singular (only possible with ``ridge = 0``).
    """
    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise InputDataError(f"data must be a 2-D array (got {X.ndim} dimension(s))")
    n, d = X.shape
    A = structure_support(support)
    if A.shape != (d, d):
        raise InputDataError(f"the structure has {A.shape[0]} nodes but the data have {d} columns")
    if not np.isfinite(ridge) or ridge < 0:
        raise InputDataError(f"ridge must be a finite number >= 0 (got {ridge!r})")
    if n < 1:
        raise InputDataError("no rows to refit on")
    Xc = X - X.mean(axis=0, keepdims=True)
    S = (Xc.T @ Xc) / n
    W = np.zeros((d, d))
    deficient: list[int] = []
    for j in np.flatnonzero(A.any(axis=0)):
        pa = np.flatnonzero(A[:, j])
        G = S[np.ix_(pa, pa)]
        b = S[pa, j]
        if ridge > 0:
            w = np.linalg.solve(G + ridge * np.eye(pa.size), b)
        else:
            # rank of the centred design (at most n − 1 after centring)
            rank = np.linalg.matrix_rank(Xc[:, pa]) if pa.size else 0
            if rank < pa.size:
                deficient.append(int(j))
                w = np.linalg.lstsq(Xc[:, pa], Xc[:, j], rcond=None)[0]
            else:
                w = np.linalg.solve(G, b)
        W[pa, j] = w
    R = Xc - Xc @ W
    residual_variance = (R**2).sum(axis=0) / n
    return W, residual_variance, deficient


def normalised_mse(W_hat, W_true) -> Optional[float]:
    """``‖Ŵ − W*‖²_F / ‖W*‖²_F`` (``None`` when ``W*`` is all zero)."""
    W_hat = np.asarray(W_hat, dtype=float)
    W_true = np.asarray(W_true, dtype=float)
    if W_hat.shape != W_true.shape:
        raise InputDataError(f"estimate has shape {W_hat.shape} but the truth has shape {W_true.shape}")
    den = float((W_true**2).sum())
    if den == 0.0:
        return None
    return float(((W_hat - W_true) ** 2).sum() / den)


def refit_participants(
    datasets: Sequence[np.ndarray],
    structure,
    names: Sequence[str],
    *,
    ridge: float = 0.0,
    truths: Optional[Sequence[Optional[np.ndarray]]] = None,
) -> list[ParticipantRefit]:
    """Refit ``structure`` (a ``d × d`` matrix whose non-zeros are the edges) on every participant.

    ``datasets[p]`` is participant ``p``'s ``n_p × d`` data with columns ``names``; ``truths[p]`` (optional)
    its true weights in the same node order, for the normalised MSE. Each participant is fitted from
    its own rows only. Emits one :class:`RankDeficientWarning` per participant with singular nodes.
    """
    names = tuple(names)
    A = structure_support(structure)
    if A.shape[0] != len(names):
        raise InputDataError(f"the structure has {A.shape[0]} nodes but {len(names)} names were given")
    if truths is not None and len(truths) != len(datasets):
        raise InputDataError(f"{len(truths)} truth(s) for {len(datasets)} participant(s)")
    out = []
    for p, X in enumerate(datasets):
        W, rv, bad = refit_weights(X, A, ridge)
        mse = None
        if truths is not None and truths[p] is not None:
            mse = normalised_mse(W, truths[p])
        if bad:
            warnings.warn(
                f"participant {p + 1}: least squares is singular for node(s) "
                f"{', '.join(names[j] for j in bad[:5])} ({np.asarray(X).shape[0]} rows); the minimum-norm "
                "solution was used. Pass a ridge > 0 (e.g. --ridge 0.01) for a unique, shrunk fit.",
                RankDeficientWarning,
                stacklevel=2,
            )
        out.append(
            ParticipantRefit(
                participant=p + 1,
                W=W,
                names=names,
                rows=int(np.asarray(X).shape[0]),
                edges=int(np.count_nonzero(A)),
                residual_variance=rv,
                mse=mse,
                rank_deficient=tuple(names[j] for j in bad),
            )
        )
    return out
