"""Graph files: weighted adjacency CSV, edges CSV, DOT, and the graph inside a report JSON.

Orientation everywhere: entry ``W[i, j]`` is the weight of the edge from node ``i`` to node ``j``
(rows are parents, columns are children).

Formats written by bnsl:

- adjacency CSV: header ``,a,b,c`` then one row per node ``a,0.0,1.25,0.0`` (first column = parent);
- edges CSV: ``source,target,weight`` with one row per non-zero entry;
- CPDAG CSV (``cpdag.csv``): the learned DAG's Markov equivalence class as a 0/1 adjacency CSV,
  ``1`` at ``[i, j]`` alone for a compelled ``i → j``, ``1`` at both ``[i, j]`` and ``[j, i]`` for an
  undirected ``i — j``;
- DOT: a ``digraph`` written as text; the node names are the ids (quoted when they are not plain
  identifiers), the exact weight is the ``weight`` attribute, a rounded weight the edge label,
  |weight| the pen width and the sign the colour;
- report JSON: ``{"graph": {"nodes": [...], "edges": [{"source", "target", "weight"}, ...]}, ...}``.

Readers also accept what other tools write:

- a plain 0/1 (or weighted) matrix with a header row of names and no index column, or with no header
  at all (a square block of numbers: the nodes get the names ``X1…Xd`` and ``positional=True``, and
  are matched to the other graph by position, see :meth:`Graph.named`); numeric names (``4,8,13``) are a
  header when a square matrix follows;
- bnlearn arc lists (``write.csv(arcs(g))``: ``from,to``, with or without R's row-number column);
- Tetrad graph text (``Graph Nodes:`` / ``Graph Edges:``, edges ``1. A --> B``, ``A <-- B``, ``A --- B``).

An undirected edge (a CPDAG estimate: Tetrad's ``---``, a bnlearn arc listed both ways, symmetric
entries of a matrix) is read as two symmetric entries ``W[i, j] = W[j, i]``;
:func:`bnsl_cli.metrics.pdag_undirected` tells such pairs from a 2-cycle.
An edges CSV or arc list cannot name isolated nodes, so a graph read from one has
``all_nodes_listed=False``.

DOT is read by a small built-in parser for flat graphs; anything it does not handle (subgraphs,
HTML labels, …) goes to pydot. pydot alone is too slow for large files: on a d = 200 graph with 394
edges (38 kB, as ``dot_text`` writes it) pydot 4.0.1 takes 6.6–10 s to parse where the built-in
parser takes 0.04 s (and 0.27 s against 0.3 ms at d = 20), so the built-in parser stays the fast
path; the tests check that both give the same result on every file both accept.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.atomic import atomic_write_text
from bnsl_cli.metrics import cpdag

__all__ = [
    "Graph",
    "format_float",
    "adjacency_csv_text",
    "edges_csv_text",
    "cpdag_csv_text",
    "dot_text",
    "write_adjacency_csv",
    "write_edges_csv",
    "write_dot",
    "graph_to_json",
    "read_graph",
    "read_graphs",
    "DotUnsupported",
    "parse_dot_flat",
    "parse_dot_pydot",
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


def edges_csv_text(W: np.ndarray, names: Sequence[str]) -> str:
    """The non-zero entries as ``source,target,weight`` rows, sorted by (source, target) index."""
    W = np.asarray(W, dtype=float)
    rows = [["source", "target", "weight"]]
    for i, j in zip(*np.nonzero(W)):
        rows.append([names[i], names[j], format_float(W[i, j])])
    return _csv_text(rows)


_DOT_PLAIN_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DOT_NUMERAL = re.compile(r"-?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)\Z")


def _dot_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dot_id(s: str) -> str:
    """``s`` as a DOT id: bare when it is a plain identifier (and no DOT keyword), else quoted."""
    if _DOT_PLAIN_ID.match(s) and s.lower() not in _DOT_KEYWORDS:
        return s
    return _dot_quote(s)


def _dot_number(x: float) -> str:
    """A weight as a DOT value: the exact float text, quoted when it is no DOT numeral (``1e-05``)."""
    text = format_float(x)
    return text if _DOT_NUMERAL.match(text) else _dot_quote(text)


def dot_text(W: np.ndarray, names: Sequence[str], title: str = "bnsl") -> str:
    """A Graphviz ``digraph`` with the node names as ids and the exact weight under ``weight``
    (pydot and networkx read both back); a rounded weight as the edge label, |weight| as the pen
    width and the sign as the colour are for the eye."""
    W = np.asarray(W, dtype=float)
    lines = [
        f"// {title}",
        f"// Orientation: an edge a -> b means W[a, b] != 0; {ORIENTATION}.",
        "digraph bnsl {",
        "  rankdir=TB;",
        "  node [shape=ellipse];",
    ]
    for name in names:
        lines.append(f"  {_dot_id(name)};")
    nz = np.abs(W[W != 0])
    scale = float(nz.max()) if nz.size else 1.0
    for i, j in zip(*np.nonzero(W)):
        w = float(W[i, j])
        pen = 0.5 + 3.5 * abs(w) / scale
        colour = "#1f5fbf" if w > 0 else "#c0392b"
        lines.append(
            f"  {_dot_id(names[i])} -> {_dot_id(names[j])} [weight={_dot_number(w)}, "
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


def read_text_file(path: Path, what: str = "a graph file") -> str:
    """The text of ``path`` (UTF-8; ``-`` is standard input), or an :class:`InputDataError` naming the
    file and the problem."""
    if str(path) == "-":
        import sys

        try:
            text = sys.stdin.buffer.read().decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InputDataError("<stdin>: not a text file (UTF-8 expected)") from None
        if not text.strip():
            raise InputDataError("<stdin>: no input (expected a graph on standard input)")
        return text
    if not path.exists():
        raise InputDataError(f"{path}: file not found")
    if path.is_dir():
        raise InputDataError(f"{path}: is a directory, expected {what}")
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


def _from_edges(
    names_order: list[str], edges: list[tuple[str, str, float]], path: Path, all_nodes_listed: bool = True
) -> Graph:
    index = {n: k for k, n in enumerate(names_order)}
    W = np.zeros((len(names_order), len(names_order)))
    seen: set[tuple[str, str]] = set()
    for s, t, w in edges:
        if s == t:
            raise InputDataError(f"{path}: self-loop on node {s!r}")
        if (s, t) in seen:
            raise InputDataError(f"{path}: edge {s!r} -> {t!r} is listed twice")
        seen.add((s, t))
        if not math.isfinite(w):
            raise InputDataError(f"{path}: edge {s!r} -> {t!r} has a non-finite weight {w!r}")
        W[index[s], index[t]] = w
    return Graph(W, tuple(names_order), all_nodes_listed)


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


_OTHER_FORMATS = (
    "bnsl reads an adjacency matrix (names in the header, optionally in the first column too; or no "
    "header at all), an edges CSV (source,target[,weight]), a bnlearn arc list (from,to), Tetrad graph "
    "text (Graph Nodes: / Graph Edges:), DOT or a report JSON"
)


def _read_arc_list(path: Path, body, cols: tuple[int, int]) -> Graph:
    """bnlearn's ``arcs()`` as CSV: one ``from,to`` row per arc; an arc listed both ways is an
    undirected edge (bnlearn's way of writing a CPDAG), read as symmetric entries."""
    edges, order = [], []
    a, b = cols
    for r_no, r in body:
        if len(r) <= max(a, b):
            raise InputDataError(f"{path}: row {r_no}: expected from,to (a bnlearn arc list)")
        s, t = r[a].strip(), r[b].strip()
        if not s or not t:
            raise InputDataError(f"{path}: row {r_no}: empty node name")
        for n in (s, t):
            if n not in order:
                order.append(n)
        edges.append((s, t, 1.0))
    return _from_edges(order, edges, path, all_nodes_listed=False)


def _read_headerless(path: Path, numbered) -> Graph:
    d = len(numbered)
    for r_no, r in numbered:
        if len(r) != d:
            raise InputDataError(
                f"{path}: the first line holds numbers, so this reads as a matrix without a header row, but "
                f"row {r_no} has {len(r)} values and there are {d} rows (a headerless matrix is square); "
                "add a header row of node names if the first line is one"
            )
    names = tuple(f"X{k + 1}" for k in range(d))
    W = np.zeros((d, d))
    for i, (r_no, r) in enumerate(numbered):
        for j, c in enumerate(r):
            W[i, j] = _parse_number(c.strip(), path, r_no, f"column {j + 1}")
    diag = np.flatnonzero(np.diag(W))
    if diag.size:
        raise InputDataError(f"{path}: self-loop on node {int(diag[0]) + 1} (non-zero diagonal entry)")
    return Graph(W, names, True, True)


def _read_csv_graph(path: Path, text: str) -> Graph:
    numbered = [(k, r) for k, r in enumerate(csv.reader(io.StringIO(text)), start=1) if any(c.strip() for c in r)]
    if not numbered:
        raise InputDataError(f"{path}: file holds no values")
    header = [c.strip() for c in numbered[0][1]]
    body = numbered[1:]
    lower = [h.lower() for h in header]
    arcs = (0, 1) if lower[:2] == ["from", "to"] else (1, 2) if lower[:3] == ["", "from", "to"] else None
    if arcs is not None:  # (1, 2): R's write.csv, a column of row numbers first
        extra = [h for h in header[arcs[1] + 1:] if h]
        if extra:
            raise InputDataError(
                f"{path}: a bnlearn arc list has the columns from,to; this one also has {', '.join(map(repr, extra))} "
                "(arc strengths list every pair: keep the arcs you accept, e.g. arcs(averaged.network(strength)))"
            )
        return _read_arc_list(path, body, arcs)
    if lower[:2] == ["source", "target"]:
        has_w = len(lower) >= 3 and lower[2] == "weight"
        edges, order = [], []
        for r_no, r in body:
            if len(r) < 2:
                raise InputDataError(f"{path}: row {r_no}: expected source,target[,weight]")
            s, t = r[0].strip(), r[1].strip()
            if not s or not t:
                raise InputDataError(f"{path}: row {r_no}: empty node name")
            w = _parse_number(r[2].strip(), path, r_no, "weight") if has_w and len(r) > 2 else 1.0
            for n in (s, t):
                if n not in order:
                    order.append(n)
            edges.append((s, t, w))
        return _from_edges(order, edges, path, all_nodes_listed=False)
    if header[0] != "" and all(_is_number(h) for h in header):
        numeric_names = len(body) == len(header) and all(len(r) == len(header) for _, r in body)
        if not numeric_names:  # the first line is data: a matrix without a header row
            return _read_headerless(path, numbered)
    # adjacency: with an index column (first header cell empty, or rows one longer than names)
    first_len = len(body[0][1]) if body else 0
    if header[0] == "" or (body and first_len == len(header) and len(header) == len(body) + 1):
        names = header[1:]
        has_index = True
    else:
        names = header
        has_index = False
    d = len(names)
    if d == 0:
        raise InputDataError(f"{path}: no node names in the header")
    for k, n in enumerate(names, start=1):
        if n == "":
            raise InputDataError(f"{path}: column {k + has_index} of the header has an empty node name")
    if len(set(names)) != d:
        dup = sorted({n for n in names if names.count(n) > 1})
        raise InputDataError(f"{path}: duplicate node names in the header ({', '.join(map(repr, dup[:5]))})")
    if len(body) != d:
        if has_index:
            raise InputDataError(
                f"{path}: adjacency matrix with {d} node names: expected a {d} x {d} matrix, found {len(body)} rows"
            )
        raise InputDataError(
            f"{path}: not a graph file bnsl knows: read as an adjacency matrix its header names {d} nodes "
            f"({', '.join(map(repr, names[:3]))}{', …' if d > 3 else ''}) but {len(body)} rows follow; "
            + _OTHER_FORMATS
        )
    if not any(_is_number(c.strip()) for _, r in body for c in (r[1:] if has_index else r)):
        raise InputDataError(
            f"{path}: not a graph file bnsl knows: read as an adjacency matrix it holds no numbers; " + _OTHER_FORMATS
        )
    W = np.zeros((d, d))
    for i, (r_no, r) in enumerate(body):
        cells = r[1:] if has_index else r
        if has_index and r[0].strip() != names[i]:
            raise InputDataError(
                f"{path}: row {r_no} is labelled {r[0].strip()!r} but column {i + 1} is {names[i]!r}"
            )
        if len(cells) != d:
            raise InputDataError(f"{path}: row {r_no} has {len(cells)} values, expected {d}")
        for j, c in enumerate(cells):
            W[i, j] = _parse_number(c.strip(), path, r_no, names[j])
    diag = np.flatnonzero(np.diag(W))
    if diag.size:
        n = names[int(diag[0])]
        raise InputDataError(f"{path}: self-loop on node {n!r} (non-zero diagonal entry)")
    return Graph(W, tuple(names))


_TETRAD_EDGE = re.compile(r"^\s*(?:\d+\.\s+)?(\S+)\s+([<o-]-[->o])\s+(\S+)")
_TETRAD_SECTIONS = ("graph nodes:", "graph edges:", "graph attributes:", "graph node attributes:")


def _is_tetrad(text: str) -> bool:
    return text.lstrip().lower().startswith("graph nodes:")


def _read_tetrad_graph(path: Path, text: str) -> Graph:
    """Tetrad's graph text: ``Graph Nodes:`` then the names separated by ``;`` (older files: ``,``),
    ``Graph Edges:`` then one edge a line, ``1. A --> B`` (``A <-- B`` is B → A; ``A --- B`` is an
    undirected edge, read as symmetric entries). Other sections are ignored; edge marks of
    latent-variable graphs (``o->``, ``<->``, ``o-o``) are refused."""
    section = None
    names: list[str] = []
    edges: list[tuple[str, str, float]] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        low = line.lower()
        head = next((h for h in _TETRAD_SECTIONS if low.startswith(h)), None)
        if head is not None:
            section = head
            line = line[len(head):].strip()
            if not line:
                continue
        if section == "graph nodes:":
            sep = ";" if ";" in line else ","
            names.extend(n.strip() for n in line.split(sep) if n.strip())
        elif section == "graph edges:":
            m = _TETRAD_EDGE.match(line)
            if m is None:
                raise InputDataError(f"{path}: line {line_no}: expected an edge such as '1. A --> B' (Tetrad graph text)")
            a, mark, b = m.groups()
            for n in (a, b):
                if n not in names:
                    raise InputDataError(f"{path}: line {line_no}: node {n!r} is not listed under Graph Nodes")
            if mark == "-->":
                edges.append((a, b, 1.0))
            elif mark == "<--":
                edges.append((b, a, 1.0))
            elif mark == "---":
                edges += [(a, b, 1.0), (b, a, 1.0)]
            else:
                raise InputDataError(
                    f"{path}: line {line_no}: edge mark {mark!r} (a PAG or latent-variable graph) is not "
                    "supported; use -->, <-- or ---"
                )
    if not names:
        raise InputDataError(f"{path}: Tetrad graph text without node names under 'Graph Nodes:'")
    if len(set(names)) != len(names):
        raise InputDataError(f"{path}: duplicate node names under 'Graph Nodes:'")
    return _from_edges(names, edges, path)


_DOT_ESCAPE = re.compile(r"\\(.)", re.S)


def _dot_unquote(s: str) -> str:
    """A DOT id as text: strip the quotes and undo the escapes :func:`_dot_quote` writes."""
    s = s.strip()
    if len(s) >= 2 and s[0] == '"' and s[-1] == '"':
        s = _DOT_ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), s[1:-1])
    return s


class DotUnsupported(Exception):
    """:func:`parse_dot_flat` met something it does not handle; :func:`parse_dot_pydot` decides
    (never leaves :func:`read_graph`)."""


_DOT_TOKEN = re.compile(
    r"""
    (?P<skip>\s+|//[^\n]*|/\*.*?\*/|(?<![^\n])\#[^\n]*)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<id>[A-Za-z_\x80-\U0010ffff][\w\x80-\U0010ffff]*|-?(?:\.\d+|\d+(?:\.\d*)?))
  | (?P<op>->|--|[{}\[\]=;,:])
    """,
    re.S | re.X,
)
_DOT_KEYWORDS = {"strict", "graph", "digraph", "node", "edge", "subgraph"}

_DOT_ID_PART = re.compile(r'\s*("(?:[^"\\]|\\.)*"|[^:]*)')
_DotParse = tuple  # (kind, nodes: list[(id, attrs)], edges: list[(src, dst, attrs)])


def _dot_tokens(text: str) -> list[tuple[str, str]]:
    out, pos, n = [], 0, len(text)
    while pos < n:
        m = _DOT_TOKEN.match(text, pos)
        if m is None:
            raise DotUnsupported(f"unexpected character at offset {pos}")
        pos = m.end()
        kind = m.lastgroup
        if kind == "skip":
            continue
        tok = m.group()
        if kind == "id" and tok.lower() in _DOT_KEYWORDS:
            kind = "kw"
            tok = tok.lower()
        out.append((kind, tok))
    return out


def parse_dot_flat(text: str) -> _DotParse:
    """A small recursive-descent parser for flat DOT graphs (node, edge and attribute statements,
    edge chains, ports, comments). Subgraphs, HTML strings and other rarities raise
    :class:`DotUnsupported` so that pydot handles them."""
    toks = _dot_tokens(text)
    k = 0

    def peek(o: int = 0):
        return toks[k + o] if k + o < len(toks) else ("eof", "")

    def take(kind=None, value=None):
        nonlocal k
        t = peek()
        if (kind and t[0] != kind) or (value and t[1] != value):
            raise DotUnsupported(f"expected {value or kind}, found {t[1]!r}")
        k += 1
        return t

    def ident() -> str:
        t = peek()
        if t[0] not in ("id", "str"):
            raise DotUnsupported(f"expected an id, found {t[1]!r}")
        take()
        return _dot_unquote(t[1]) if t[0] == "str" else t[1]

    def attr_lists() -> dict:
        attrs: dict[str, str] = {}
        while peek()[1] == "[":
            take()
            while peek()[1] != "]":
                key = ident()
                take(value="=")
                attrs[key] = ident()
                if peek()[1] in (",", ";"):
                    take()
            take(value="]")
        return attrs

    def node_id() -> str:
        nid = ident()
        for _ in range(2):  # ports a:p:c are ignored
            if peek()[1] == ":":
                take()
                ident()
        return nid

    if peek() == ("kw", "strict"):
        take()
    kind = take("kw")[1]
    if kind not in ("graph", "digraph"):
        raise DotUnsupported("not a graph")
    if peek()[0] in ("id", "str"):
        ident()
    take(value="{")
    nodes: list[tuple[str, dict]] = []
    edges: list[tuple[str, str, dict]] = []
    while peek()[1] != "}":
        t = peek()
        if t[1] == ";":
            take()
            continue
        if t[0] == "kw":
            if t[1] == "subgraph":
                raise DotUnsupported("subgraph")
            take()
            attr_lists()  # default attributes: ignored
        elif peek(1)[1] == "=":
            ident(), take(), ident()  # graph attribute a = b
        else:
            chain = [node_id()]
            while peek()[1] in ("->", "--"):
                take()
                if peek()[1] == "{":
                    raise DotUnsupported("edge to a subgraph")
                chain.append(node_id())
            attrs = attr_lists()
            if len(chain) == 1:
                nodes.append((chain[0], attrs))
            else:
                edges.extend((u, v, attrs) for u, v in zip(chain, chain[1:]))
    take(value="}")
    if peek()[0] != "eof":
        raise DotUnsupported("text after the graph")
    return kind, nodes, edges


def parse_dot_pydot(path: Path, text: str) -> _DotParse:
    """Any DOT graph, by pydot (slow; the fallback of :func:`parse_dot_flat`), as the same
    ``(kind, nodes, edges)`` triple. Text pydot cannot parse, or edges to subgraphs, raise
    :class:`~bnsl_cli.errors.InputDataError` naming ``path``."""
    try:
        with warnings.catch_warnings():  # pyparsing deprecation chatter from pydot's grammar
            warnings.simplefilter("ignore", DeprecationWarning)
            import pydot
    except ImportError:  # pragma: no cover - pydot is a dependency
        raise InputDataError(f"{path}: reading DOT needs the pydot package") from None
    chatter = io.StringIO()  # pydot prints parse errors; the library never prints
    try:
        with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            graphs = pydot.graph_from_dot_data(text)
    except Exception:
        graphs = None
    if not graphs:
        detail = [ln.strip() for ln in chatter.getvalue().splitlines() if "line:" in ln]
        hint = f" ({detail[-1]})" if detail else ""
        raise InputDataError(f"{path}: not a valid DOT graph{hint}")
    g = graphs[0]
    nodes = []
    for node in g.get_nodes():
        nid = _dot_unquote(node.get_name())
        if nid in ("node", "edge", "graph"):
            continue
        nodes.append((nid, {k: _dot_unquote(str(v)) for k, v in node.get_attributes().items()}))
    edges = []
    for e in g.get_edges():
        ends = (e.get_source(), e.get_destination())
        if not all(isinstance(x, str) for x in ends):
            raise InputDataError(f"{path}: edges to subgraphs are not supported; list each edge a -> b")
        s, t = (_dot_unquote(_DOT_ID_PART.match(x).group(1)) for x in ends)  # drop ports
        edges.append((s, t, {k: _dot_unquote(str(v)) for k, v in e.get_attributes().items()}))
    return g.get_type(), nodes, edges


def _read_dot_graph(path: Path, text: str) -> Graph:
    """DOT: node statements give names (``label=`` if present, else the id); an edge's weight is
    its ``weight_value``, else ``weight``, else a numeric ``label``, else 1."""
    try:
        kind, nodes, edges = parse_dot_flat(text)
    except DotUnsupported:
        kind, nodes, edges = parse_dot_pydot(path, text)
    if kind != "digraph":
        raise InputDataError(f"{path}: DOT graph is undirected ('graph'); a 'digraph' is needed")

    label_of: dict[str, str] = {}
    order: list[str] = []
    for nid, attrs in nodes:
        if nid not in label_of:
            order.append(nid)
        if "label" in attrs or nid not in label_of:
            label_of[nid] = attrs.get("label", nid)
    declared = bool(order)
    weighted = []
    for s, t, attrs in edges:
        for n in (s, t):
            if n not in label_of:
                label_of[n] = n
                order.append(n)
        w = 1.0
        for key in ("weight_value", "weight", "label"):
            if key in attrs:
                try:
                    w = float(attrs[key])
                    break
                except ValueError:
                    continue
        weighted.append((label_of[s], label_of[t], w))
    names = [label_of[n] for n in order]
    if len(set(names)) != len(names):
        raise InputDataError(f"{path}: duplicate node labels in the DOT graph")
    return _from_edges(names, weighted, path, all_nodes_listed=declared or not weighted)


def _load_json(path: Path, text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputDataError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None


def _local_graphs(obj) -> Optional[list]:
    """The per-participant graph objects of a ``local-notears`` report, or None for any other JSON."""
    if not isinstance(obj, dict) or obj.get("graph") is not None or not isinstance(obj.get("local"), list):
        return None
    return obj["local"]


def _read_json_graph(path: Path, text: str, obj=None) -> Graph:
    if obj is None:
        obj = _load_json(path, text)
    if _local_graphs(obj) is not None:
        raise InputDataError(
            f"{path}: a local-notears report holds one graph per participant; "
            "evaluate reads all of them, or choose one with --participant K"
        )
    return _graph_from_json_obj(path, obj)


def _graph_from_json_obj(path: Path, obj, where: str = "") -> Graph:
    graph = obj.get("graph") if isinstance(obj, dict) else None
    if graph is None and isinstance(obj, dict) and "nodes" in obj and "edges" in obj:
        graph = obj  # a bare graph object
    if not isinstance(graph, dict) or "nodes" not in graph or "edges" not in graph:
        raise InputDataError(f"{path}: JSON{where} has no 'graph' object with 'nodes' and 'edges'")
    if not isinstance(graph["nodes"], list) or not isinstance(graph["edges"], list):
        raise InputDataError(f"{path}: 'nodes' and 'edges' must be JSON lists")
    names = [str(n) for n in graph["nodes"]]
    if len(set(names)) != len(names):
        raise InputDataError(f"{path}: duplicate node names in 'nodes'")
    edges = []
    for k, e in enumerate(graph["edges"]):
        if not isinstance(e, dict) or "source" not in e or "target" not in e:
            raise InputDataError(f"{path}: edge {k} needs 'source' and 'target'")
        w = e.get("weight", 1.0)
        if isinstance(w, bool) or not isinstance(w, (int, float)):
            raise InputDataError(f"{path}: edge {k} has a non-numeric weight {w!r}")
        edges.append((str(e["source"]), str(e["target"]), float(w)))
    unknown = {n for s, t, _ in edges for n in (s, t)} - set(names)
    if unknown:
        raise InputDataError(f"{path}: edges name unknown nodes {sorted(unknown)[:5]}")
    return _from_edges(names, edges, path)


_DOT_START = re.compile(r'(//|/\*|(strict\s+)?(di)?graph\s*("(?:[^"\\]|\\.)*"|[\w.]+)?\s*\{)', re.I)


def read_graph(path: str | Path) -> Graph:
    """Read a graph from adjacency CSV, edges CSV, a 0/1 matrix (with or without a header), a bnlearn
    arc list, Tetrad graph text, DOT or report JSON.

    ``W[i, j]`` of the result is the weight of the edge ``names[i] -> names[j]``. Every problem is an
    :class:`~bnsl_cli.errors.InputDataError` whose message starts with the file name.
    """
    path = Path(path)
    return _graph_from_text(path, read_text_file(path))


def _graph_from_text(path: Path, text: str) -> Graph:
    suffix = path.suffix.lower()
    if suffix in (".dot", ".gv"):
        return _read_dot_graph(path, text)
    if suffix == ".json":
        return _read_json_graph(path, text)
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return _read_json_graph(path, text)
    if _is_tetrad(stripped):
        return _read_tetrad_graph(path, text)
    if _DOT_START.match(stripped):
        return _read_dot_graph(path, text)
    return _read_csv_graph(path, text)


def read_graphs(path: str | Path) -> list[tuple[Optional[int], Graph]]:
    """Every graph a file holds, as ``(participant, graph)`` pairs.

    A ``local-notears`` report.json (``"graph": null`` and a ``"local"`` list) gives one graph per
    participant, numbered from 1 as in the report; any other file gives ``[(None, read_graph(path))]``.
    """
    path = Path(path)
    text = read_text_file(path)  # read once: ``-`` is standard input
    if path.suffix.lower() not in (".dot", ".gv") and (
        path.suffix.lower() == ".json" or text.lstrip().startswith(("{", "["))
    ):
        obj = _load_json(path, text)
        local = _local_graphs(obj)
        if local is None:
            return [(None, _read_json_graph(path, text, obj))]
        if not local:
            raise InputDataError(f"{path}: the local-notears report lists no participant")
        out = []
        for k, entry in enumerate(local, start=1):
            number = entry.get("participant", k) if isinstance(entry, dict) else k
            if isinstance(number, bool) or not isinstance(number, int):
                raise InputDataError(f"{path}: local entry {k} has a non-integer 'participant'")
            out.append((number, _graph_from_json_obj(path, entry, f" (participant {number})")))
        return out
    return [(None, _graph_from_text(path, text))]
