"""Reading a graph file of any format bnsl writes or other tools write (:func:`read_graph`,
:func:`read_graphs`): adjacency CSV, edges CSV, DOT (parsed by :mod:`bnsl_cli.io.dot`), report JSON, and

- a plain 0/1 (or weighted) matrix with a header row of names and no index column, or with no header
  at all (a square block of numbers: the nodes get the names ``X1…Xd`` and ``positional=True``, and
  are matched to the other graph by position, see :meth:`~bnsl_cli.io.graphs.Graph.named`); numeric
  names (``4,8,13``) are a header when a square matrix follows;
- bnlearn arc lists (``write.csv(arcs(g))``: ``from,to``, with or without R's row-number column);
- Tetrad graph text (``Graph Nodes:`` / ``Graph Edges:``, edges ``1. A --> B``, ``A <-- B``, ``A --- B``);
- bnlearn-repository BIF (``.bif``, ``.bif.gz``: the structure only), bnlearn model strings
  (``[a][b|a][c|a:b]``) and dagitty graphs (``dag { a -> b; c <- d; x -> {y z} }``), parsed in
  :mod:`bnsl_cli.io.graph_text_formats`.

A gzip-compressed file (by its magic number) is read decompressed, whatever its format.

Orientation everywhere: ``W[i, j]`` is the weight of the edge ``i -> j``. An undirected edge (a CPDAG
estimate: Tetrad's ``---``, dagitty's ``--``, a bnlearn arc listed both ways, symmetric entries of a
matrix) is read as two symmetric entries ``W[i, j] = W[j, i]``; :func:`bnsl_cli.metrics.pdag_undirected`
tells such pairs from a 2-cycle. An edges CSV or arc list cannot name isolated nodes, so a graph read from one has
``all_nodes_listed=False``. Every problem is an :class:`~bnsl_cli.errors.InputDataError` whose message
starts with the file name.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import re
from pathlib import Path
from typing import Optional

import numpy as np

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.columns import is_number
from bnsl_cli.io.dot import DotUnsupported, parse_dot_flat, parse_dot_pydot
from bnsl_cli.io.graph_text_formats import (
    BIF_SUFFIXES,
    DAGITTY_SUFFIXES,
    MODEL_STRING_SUFFIXES,
    bnlearn_model_string,
    is_bif,
    is_dagitty,
    is_model_string,
    parse_bif,
    parse_dagitty,
    parse_model_string,
)
from bnsl_cli.io.graphs import Graph

__all__ = ["bnlearn_model_string", "graph_from_json_obj", "read_graph", "read_graphs", "read_text_file"]


def _decode(raw: bytes, name) -> str:
    """UTF-8 text of ``raw``, decompressed first when it is gzip (magic number ``1f 8b``)."""
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise InputDataError(f"{name}: not a valid gzip file ({exc})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputDataError(f"{name}: not a text file (UTF-8 expected)") from None

def read_text_file(path: Path, what: str = "a graph file") -> str:
    """The text of ``path`` (UTF-8, or gzip-compressed UTF-8; ``-`` is standard input), or an
    :class:`InputDataError` naming the file and the problem."""
    if str(path) == "-":
        import sys

        text = _decode(sys.stdin.buffer.read(), "<stdin>")
        if not text.strip():
            raise InputDataError("<stdin>: no input (expected a graph on standard input)")
        return text
    if not path.exists():
        raise InputDataError(f"{path}: file not found")
    if path.is_dir():
        raise InputDataError(f"{path}: is a directory, expected {what}")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputDataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    text = _decode(raw, path)
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


_OTHER_FORMATS = (
    "bnsl reads an adjacency matrix (names in the header, optionally in the first column too; or no "
    "header at all), an edges CSV (source,target[,weight]), a bnlearn arc list (from,to), Tetrad graph "
    "text (Graph Nodes: / Graph Edges:), DOT, a report JSON, BIF, a bnlearn model string ([a][b|a]) or "
    "a dagitty graph (dag { a -> b })"
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
    if header[0] != "" and all(is_number(h) for h in header):
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
    if not any(is_number(c.strip()) for _, r in body for c in (r[1:] if has_index else r)):
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
    return graph_from_json_obj(path, obj)


def graph_from_json_obj(path: Path, obj, where: str = "") -> Graph:
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


def _read_bif_graph(path: Path, text: str) -> Graph:
    """bnlearn-repository BIF: the structure only (:func:`~bnsl_cli.io.graph_text_formats.parse_bif`)."""
    return _from_edges(*parse_bif(path, text), path)


def _read_model_string_graph(path: Path, text: str) -> Graph:
    """A bnlearn model string (:func:`~bnsl_cli.io.graph_text_formats.parse_model_string`)."""
    return _from_edges(*parse_model_string(path, text), path)


def _read_dagitty_graph(path: Path, text: str) -> Graph:
    """A dagitty graph (:func:`~bnsl_cli.io.graph_text_formats.parse_dagitty`)."""
    return _from_edges(*parse_dagitty(path, text), path)


_DOT_START = re.compile(r'(//|/\*|(strict\s+)?(di)?graph\s*("(?:[^"\\]|\\.)*"|[\w.]+)?\s*\{)', re.I)


def _format_of(path: Path, text: str) -> str:
    """Which reader reads ``text``: by the extension first (``.dot``/``.gv``, ``.json``, ``.bif``/
    ``.bif.gz``, ``.dagitty``, ``.modelstring``/``.bnlearn``), then by the content: ``{`` JSON; ``[``
    a model string when it opens ``[node]``/``[node|`` and is not valid JSON, else JSON; Tetrad;
    ``dag {``/``pdag {`` dagitty (``graph {`` stays DOT's); ``network NAME {``/``variable NAME {`` BIF;
    DOT; anything else CSV."""
    name = path.name.lower()
    suffix = path.suffix.lower()
    if suffix in (".dot", ".gv"):
        return "dot"
    if suffix == ".json":
        return "json"
    if name.endswith(BIF_SUFFIXES):
        return "bif"
    if suffix in DAGITTY_SUFFIXES:
        return "dagitty"
    if suffix in MODEL_STRING_SUFFIXES:
        return "modelstring"
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return "json"
    if stripped.startswith("["):
        return "modelstring" if is_model_string(stripped) else "json"
    if _is_tetrad(stripped):
        return "tetrad"
    if is_dagitty(stripped):
        return "dagitty"
    if is_bif(stripped):
        return "bif"
    if _DOT_START.match(stripped):
        return "dot"
    return "csv"


_READERS = {
    "dot": _read_dot_graph,
    "json": _read_json_graph,
    "tetrad": _read_tetrad_graph,
    "bif": _read_bif_graph,
    "modelstring": _read_model_string_graph,
    "dagitty": _read_dagitty_graph,
    "csv": _read_csv_graph,
}


def read_graph(path: str | Path) -> Graph:
    """Read a graph from adjacency CSV, edges CSV, a 0/1 matrix (with or without a header), a bnlearn
    arc list, Tetrad graph text, DOT, report JSON, BIF, a bnlearn model string or a dagitty graph.

    ``W[i, j]`` of the result is the weight of the edge ``names[i] -> names[j]``. Every problem is an
    :class:`~bnsl_cli.errors.InputDataError` whose message starts with the file name.
    """
    path = Path(path)
    return _graph_from_text(path, read_text_file(path))


def _graph_from_text(path: Path, text: str) -> Graph:
    return _READERS[_format_of(path, text)](path, text)


def read_graphs(path: str | Path) -> list[tuple[Optional[int], Graph]]:
    """Every graph a file holds, as ``(participant, graph)`` pairs.

    A ``local-notears`` report.json (``"graph": null`` and a ``"local"`` list) gives one graph per
    participant, numbered from 1 as in the report; any other file gives ``[(None, read_graph(path))]``.
    """
    path = Path(path)
    text = read_text_file(path)  # read once: ``-`` is standard input
    if _format_of(path, text) == "json":
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
            out.append((number, graph_from_json_obj(path, entry, f" (participant {number})")))
        return out
    return [(None, _graph_from_text(path, text))]
