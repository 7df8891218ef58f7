"""Graph files: weighted adjacency CSV, edges CSV, DOT, and the graph inside a report JSON.

Orientation everywhere: entry ``W[i, j]`` is the weight of the edge from node ``i`` to node ``j``
(rows are parents, columns are children).

Formats written by bnsl:

- adjacency CSV: header ``,a,b,c`` then one row per node ``a,0.0,1.25,0.0`` (first column = parent);
- edges CSV: ``source,target,weight`` with one row per non-zero entry;
- DOT: a ``digraph`` written as text; nodes by safe ids with ``label=`` names, weight as edge label,
  |weight| as penwidth, sign as colour;
- report JSON: ``{"graph": {"nodes": [...], "edges": [{"source", "target", "weight"}, ...]}, ...}``.

Readers also accept a plain 0/1 (or weighted) matrix with a header row of names and no index column.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.atomic import atomic_write_text

__all__ = [
    "Graph",
    "format_float",
    "adjacency_csv_text",
    "edges_csv_text",
    "dot_text",
    "write_adjacency_csv",
    "write_edges_csv",
    "write_dot",
    "graph_to_json",
    "read_graph",
]

ORIENTATION = "W[i, j] is the weight of the edge i -> j (rows are parents, columns are children)"


@dataclass(frozen=True)
class Graph:
    """A weighted directed graph: ``W[i, j]`` is the weight of the edge ``names[i] -> names[j]``."""

    W: np.ndarray
    names: tuple[str, ...]

    def reorder(self, names: Sequence[str], source: str = "estimate") -> "Graph":
        """The same graph with its nodes in the order of ``names`` (matched by name)."""
        names = tuple(names)
        if set(names) != set(self.names):
            missing = sorted(set(names) - set(self.names))
            extra = sorted(set(self.names) - set(names))
            parts = []
            if missing:
                parts.append("missing nodes " + ", ".join(missing[:5]))
            if extra:
                parts.append("unknown nodes " + ", ".join(extra[:5]))
            raise InputDataError(f"{source}: node names do not match the truth ({'; '.join(parts)})")
        idx = [self.names.index(n) for n in names]
        return Graph(self.W[np.ix_(idx, idx)], names)


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


def edges_csv_text(W: np.ndarray, names: Sequence[str]) -> str:
    """The non-zero entries as ``source,target,weight`` rows, sorted by (source, target) index."""
    W = np.asarray(W, dtype=float)
    rows = [["source", "target", "weight"]]
    for i, j in zip(*np.nonzero(W)):
        rows.append([names[i], names[j], format_float(W[i, j])])
    return _csv_text(rows)


def _dot_id(k: int) -> str:
    return f"n{k}"


def _dot_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dot_text(W: np.ndarray, names: Sequence[str], title: str = "bnsl") -> str:
    """A Graphviz ``digraph``: weight as label, |weight| as penwidth, sign as colour."""
    W = np.asarray(W, dtype=float)
    lines = [
        f"// {title}",
        f"// Orientation: an edge a -> b means W[a, b] != 0; {ORIENTATION}.",
        "digraph bnsl {",
        "  rankdir=TB;",
        "  node [shape=ellipse];",
    ]
    for k, name in enumerate(names):
        lines.append(f"  {_dot_id(k)} [label={_dot_quote(name)}];")
    nz = np.abs(W[W != 0])
    scale = float(nz.max()) if nz.size else 1.0
    for i, j in zip(*np.nonzero(W)):
        w = float(W[i, j])
        pen = 0.5 + 3.5 * abs(w) / scale
        colour = "#1f5fbf" if w > 0 else "#c0392b"
        lines.append(
            f"  {_dot_id(i)} -> {_dot_id(j)} [weight_value={_dot_quote(format_float(w))}, "
            f'label="{w:.3g}", penwidth={pen:.2f}, color="{colour}"];'
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_adjacency_csv(path, W, names) -> None:
    atomic_write_text(path, adjacency_csv_text(W, names))


def write_edges_csv(path, W, names) -> None:
    atomic_write_text(path, edges_csv_text(W, names))


def write_dot(path, W, names, title: str = "bnsl") -> None:
    atomic_write_text(path, dot_text(W, names, title))


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


# ---------------------------------------------------------------------------------------------
# Readers


def _read_text(path: Path) -> str:
    if not path.exists():
        raise InputDataError(f"{path}: file not found")
    if path.is_dir():
        raise InputDataError(f"{path}: is a directory, expected a graph file")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputDataError(f"{path}: not a text file (UTF-8 expected)") from None
    except OSError as exc:
        raise InputDataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not text.strip():
        raise InputDataError(f"{path}: file is empty")
    return text


def _parse_number(cell: str, path: Path, row: int, col: str) -> float:
    try:
        v = float(cell)
    except ValueError:
        raise InputDataError(f"{path}: row {row}, column {col!r}: {cell!r} is not a number") from None
    if not math.isfinite(v):
        raise InputDataError(f"{path}: row {row}, column {col!r}: {cell!r} is not finite")
    return v


def _from_edges(names_order: list[str], edges: list[tuple[str, str, float]], path: Path) -> Graph:
    index = {n: k for k, n in enumerate(names_order)}
    W = np.zeros((len(names_order), len(names_order)))
    for s, t, w in edges:
        if s == t:
            raise InputDataError(f"{path}: self-loop on node {s!r}")
        W[index[s], index[t]] = w
    return Graph(W, tuple(names_order))


def _read_csv_graph(path: Path, text: str) -> Graph:
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    header = [c.strip() for c in rows[0]]
    body = rows[1:]
    lower = [h.lower() for h in header]
    if lower[:2] == ["source", "target"]:
        has_w = len(lower) >= 3 and lower[2] == "weight"
        edges, order = [], []
        for r_no, r in enumerate(body, start=2):
            if len(r) < 2:
                raise InputDataError(f"{path}: row {r_no}: expected source,target[,weight]")
            s, t = r[0].strip(), r[1].strip()
            w = _parse_number(r[2], path, r_no, "weight") if has_w and len(r) > 2 else 1.0
            for n in (s, t):
                if n not in order:
                    order.append(n)
            edges.append((s, t, w))
        return _from_edges(order, edges, path)
    # adjacency: with an index column (first header cell empty, or rows one longer than names)
    if header and header[0] == "" or (body and len(body[0]) == len(header) and len(header) == len(body) + 1):
        names = header[1:]
        has_index = True
    else:
        names = header
        has_index = False
    d = len(names)
    if d == 0:
        raise InputDataError(f"{path}: no node names in the header")
    if len(set(names)) != d:
        raise InputDataError(f"{path}: duplicate node names in the header")
    if len(body) != d:
        raise InputDataError(f"{path}: expected a {d} x {d} matrix, found {len(body)} rows")
    W = np.zeros((d, d))
    for i, r in enumerate(body):
        cells = r[1:] if has_index else r
        if has_index and r[0].strip() != names[i]:
            raise InputDataError(
                f"{path}: row {i + 2} is labelled {r[0].strip()!r} but column {i + 1} is {names[i]!r}"
            )
        if len(cells) != d:
            raise InputDataError(f"{path}: row {i + 2} has {len(cells)} values, expected {d}")
        for j, c in enumerate(cells):
            W[i, j] = _parse_number(c, path, i + 2, names[j])
    return Graph(W, tuple(names))


_DOT_NODE = re.compile(r'^\s*("(?:[^"\\]|\\.)*"|[\w.]+)\s*(\[(.*)\])?\s*;?\s*$')


def _read_dot_graph(path: Path, text: str) -> Graph:
    try:
        import pydot
    except ImportError:  # pragma: no cover - pydot is a dependency
        raise InputDataError(f"{path}: reading DOT needs the pydot package") from None
    try:
        graphs = pydot.graph_from_dot_data(text)
    except Exception:
        graphs = None
    if not graphs:
        raise InputDataError(f"{path}: not a valid DOT graph")
    g = graphs[0]

    def unq(s: str) -> str:
        s = s.strip()
        if len(s) >= 2 and s[0] == '"' and s[-1] == '"':
            s = s[1:-1].replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        return s

    label_of: dict[str, str] = {}
    order: list[str] = []
    for node in g.get_nodes():
        nid = unq(node.get_name())
        if nid in ("node", "edge", "graph"):
            continue
        label = node.get_attributes().get("label")
        label_of[nid] = unq(label) if label is not None else nid
        order.append(nid)
    edges = []
    for e in g.get_edges():
        s, t = unq(str(e.get_source())), unq(str(e.get_destination()))
        for n in (s, t):
            if n not in label_of:
                label_of[n] = n
                order.append(n)
        attrs = e.get_attributes()
        w = 1.0
        for key in ("weight_value", "weight", "label"):
            if key in attrs:
                try:
                    w = float(unq(str(attrs[key])))
                    break
                except ValueError:
                    continue
        edges.append((label_of[s], label_of[t], w))
    names = [label_of[n] for n in order]
    if len(set(names)) != len(names):
        raise InputDataError(f"{path}: duplicate node labels in the DOT graph")
    return _from_edges(names, edges, path)


def _read_json_graph(path: Path, text: str) -> Graph:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputDataError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    graph = obj.get("graph") if isinstance(obj, dict) else None
    if not isinstance(graph, dict) or "nodes" not in graph or "edges" not in graph:
        raise InputDataError(f"{path}: JSON has no 'graph' object with 'nodes' and 'edges'")
    names = [str(n) for n in graph["nodes"]]
    edges = [(str(e["source"]), str(e["target"]), float(e.get("weight", 1.0))) for e in graph["edges"]]
    unknown = {n for s, t, _ in edges for n in (s, t)} - set(names)
    if unknown:
        raise InputDataError(f"{path}: edges name unknown nodes {sorted(unknown)[:5]}")
    return _from_edges(names, edges, path)


def read_graph(path: str | Path) -> Graph:
    """Read a graph from adjacency CSV, edges CSV, a 0/1 matrix with header, DOT or report JSON."""
    path = Path(path)
    text = _read_text(path)
    suffix = path.suffix.lower()
    if suffix in (".dot", ".gv"):
        return _read_dot_graph(path, text)
    if suffix == ".json":
        return _read_json_graph(path, text)
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _read_json_graph(path, text)
    if stripped.startswith(("digraph", "strict", "//", "graph")):
        return _read_dot_graph(path, text)
    return _read_csv_graph(path, text)
