"""The graph type and the graph files bnsl writes: weighted adjacency CSV, edges CSV, CPDAG CSV and
the graph inside a report JSON (DOT: :mod:`bnsl_cli.io.dot`; reading every format:
:mod:`bnsl_cli.io.graph_formats`).

Orientation everywhere: entry ``W[i, j]`` is the weight of the edge from node ``i`` to node ``j``
(rows are parents, columns are children).

- adjacency CSV: header ``,a,b,c`` then one row per node ``a,0.0,1.25,0.0`` (first column = parent);
- edges CSV: ``source,target,weight`` with one row per non-zero entry;
- CPDAG CSV (``cpdag.csv``): the learned DAG's Markov equivalence class as a 0/1 adjacency CSV,
  ``1`` at ``[i, j]`` alone for a compelled ``i → j``, ``1`` at both ``[i, j]`` and ``[j, i]`` for an
  undirected ``i — j``;
- report JSON: ``{"graph": {"nodes": [...], "edges": [{"source", "target", "weight"}, ...]}, ...}``.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.atomic import atomic_write_text
from bnsl_cli.metrics import cpdag

__all__ = [
    "ORIENTATION",
    "Graph",
    "format_float",
    "adjacency_csv_text",
    "edges_csv_text",
    "column_kinds_of",
    "cpdag_csv_text",
    "write_adjacency_csv",
    "write_edges_csv",
    "graph_to_json",
]

ORIENTATION = "W[i, j] is the weight of the edge i -> j (rows are parents, columns are children)"


@dataclass(frozen=True)
class Graph:
    """A weighted directed graph: ``W[i, j]`` is the weight of the edge ``names[i] -> names[j]``.

    ``all_nodes_listed`` is False when the file format cannot name isolated nodes (an edges CSV,
    or a DOT file without node statements): nodes missing from such a file are isolated.
    """

    W: np.ndarray
    names: tuple[str, ...]
    all_nodes_listed: bool = field(default=True, compare=False)
    #: True for a headerless matrix: its names ``X1…Xd`` are made up and nodes are matched by position
    positional: bool = field(default=False, compare=False)

    def named(self, names: Sequence[str], source: str = "estimate", other: str = "the other graph") -> "Graph":
        """A positional graph (headerless matrix) with the names ``names`` in its row order; any other
        graph unchanged."""
        if not self.positional:
            return self
        names = tuple(names)
        d = len(self.names)
        if len(names) != d:
            raise InputDataError(
                f"{source}: a headerless {d} x {d} matrix is matched to {other} by position, "
                f"but that has {len(names)} nodes; add a header row of node names"
            )
        return Graph(self.W, names, True, False)

    def reorder(self, names: Sequence[str], source: str = "estimate", *, allow_missing: bool = False) -> "Graph":
        """The same graph with its nodes in the order of ``names`` (matched by name).

        With ``allow_missing``, names this graph lacks become isolated nodes (zero rows and columns);
        names this graph has that are not in ``names`` are always an error naming ``source``.
        """
        names = tuple(names)
        missing = sorted(set(names) - set(self.names))
        extra = sorted(set(self.names) - set(names))
        if extra or (missing and not allow_missing):
            parts = []
            if missing and not allow_missing:
                parts.append("missing nodes " + ", ".join(map(repr, missing[:5])))
            if extra:
                parts.append("unknown nodes " + ", ".join(map(repr, extra[:5])))
            raise InputDataError(f"{source}: node names do not match the truth ({'; '.join(parts)})")
        pos = {n: k for k, n in enumerate(self.names)}
        d = len(names)
        W = np.zeros((d, d), dtype=float)
        have = np.array([k for k, n in enumerate(names) if n in pos], dtype=int)
        src = np.array([pos[names[k]] for k in have], dtype=int)
        if have.size:
            W[np.ix_(have, have)] = np.asarray(self.W, dtype=float)[np.ix_(src, src)]
        return Graph(W, names, self.all_nodes_listed)


def format_float(x: float) -> str:
    """Shortest text that reads back as the same float (``repr``), with ``-0.0`` written as ``0.0``."""
    x = float(x)
    if x == 0.0:
        return "0.0"
    return repr(x)


def _csv_text(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerows(rows)
    return buf.getvalue()


def adjacency_csv_text(W: np.ndarray, names: Sequence[str]) -> str:
    """The weighted adjacency matrix as CSV text (header and first column hold the names)."""
    W = np.asarray(W, dtype=float)
    rows = [[""] + list(names)]
    for i, name in enumerate(names):
        rows.append([name] + [format_float(v) for v in W[i]])
    return _csv_text(rows)


def cpdag_csv_text(W: np.ndarray, names: Sequence[str]) -> str:
    """The CPDAG (Markov equivalence class) of the DAG ``W`` as a 0/1 adjacency CSV: ``1`` at
    ``[i, j]`` alone is the compelled edge ``i → j``; ``1`` at both ``[i, j]`` and ``[j, i]`` is the
    undirected (reversible) edge ``i — j``. Raises :class:`InputDataError` for a cyclic ``W``."""
    C = cpdag(np.asarray(W) != 0)
    rows = [[""] + list(names)]
    for i, name in enumerate(names):
        rows.append([name] + ["1" if c else "0" for c in C[i]])
    return _csv_text(rows)


def edges_csv_text(W: np.ndarray, names: Sequence[str], confidence=None, kinds: Optional[dict] = None) -> str:
    """The non-zero entries as ``source,target,weight`` rows, sorted by (source, target) index.
    With ``confidence`` (:class:`bnsl_cli.confidence.EdgeCounts`) two more columns: ``strength``
    (the share of replicates with the edge either way) and ``direction`` (the share of those with
    it this way), rounded to 4 decimals. With ``kinds`` (name -> ``continuous``/``categorical``: a run
    with categorical columns) a ``kind`` column: ``continuous->continuous`` (the weight is the regression
    coefficient) or an edge into or out of a categorical variable (weight 1: it has one coefficient per
    level)."""
    W = np.asarray(W, dtype=float)
    rows = [["source", "target", "weight"] + ([] if confidence is None else ["strength", "direction"])
            + ([] if kinds is None else ["kind"])]
    S = D = None
    if confidence is not None:
        S, D = confidence.strength, confidence.direction
    for i, j in zip(*np.nonzero(W)):
        row = [names[i], names[j], format_float(W[i, j])]
        if S is not None:
            row += [format_float(round(float(S[i, j]), 4)), format_float(round(float(D[i, j]), 4))]
        if kinds is not None:
            row.append(f"{kinds.get(names[i], 'continuous')}->{kinds.get(names[j], 'continuous')}")
        rows.append(row)
    return _csv_text(rows)


def column_kinds_of(report: dict) -> Optional[dict]:
    """``{name: kind}`` of a run with categorical columns (its report's ``columns``), else ``None``."""
    cols = (report or {}).get("columns")
    if not cols:
        return None
    return dict(zip(cols["names"], cols["kinds"]))


def strength_csv_text(confidence, names: Sequence[str]) -> str:
    """``strength.csv``: the directed shares ``F[i, j]`` (replicates with i → j / replicates) in the
    adjacency CSV's layout (:mod:`bnsl_cli.confidence`)."""
    return adjacency_csv_text(confidence.directed, names)


def write_adjacency_csv(path, W, names) -> None:
    atomic_write_text(path, adjacency_csv_text(W, names))


def write_edges_csv(path, W, names) -> None:
    atomic_write_text(path, edges_csv_text(W, names))


def graph_to_json(W: np.ndarray, names: Sequence[str]) -> dict:
    """The graph as a JSON-ready dict (the ``graph`` object of a report)."""
    W = np.asarray(W, dtype=float)
    return {
        "orientation": ORIENTATION,
        "nodes": list(names),
        "edges": [
            {"source": names[i], "target": names[j], "weight": float(W[i, j])}
            for i, j in zip(*np.nonzero(W))
        ],
    }
