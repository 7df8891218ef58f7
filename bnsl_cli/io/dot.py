"""DOT (Graphviz) text: the writer and the readers.

Written (:func:`dot_text`): a ``digraph`` whose node names are the ids (quoted when they are not plain
identifiers), the exact weight the ``weight`` attribute, a rounded weight the edge label, |weight| the
pen width and the sign the colour.

Read by a small built-in parser for flat graphs (:func:`parse_dot_flat`); anything it does not handle
(subgraphs, HTML labels, …) goes to pydot (:func:`parse_dot_pydot`). pydot alone is too slow for large
files: on a d = 200 graph with 394 edges (38 kB, as :func:`dot_text` writes it) pydot 4.0.1 takes
6.6–10 s to parse where the built-in parser takes 0.04 s (and 0.27 s against 0.3 ms at d = 20), so the
built-in parser stays the fast path; the tests check that both give the same result on every file both
accept. A parse becomes a :class:`~bnsl_cli.io.graphs.Graph` in :mod:`bnsl_cli.io.graph_formats`.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.atomic import atomic_write_text
from bnsl_cli.io.emphasis import edge_emphasis
from bnsl_cli.io.graphs import ORIENTATION, format_float

__all__ = ["dot_text", "write_dot", "DotUnsupported", "parse_dot_flat", "parse_dot_pydot", "dot_unquote"]

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


def dot_text(W: np.ndarray, names: Sequence[str], title: str = "bnsl", *, strength=None, sd=None,
             levels: Optional[dict] = None) -> str:
    """A Graphviz ``digraph`` with the node names as ids and the exact weight under ``weight``
    (pydot and networkx read both back); a rounded weight as the edge label, |weight| as the pen
    width and the sign as the colour are for the eye.

    With ``strength`` (d × d, the share of bootstrap runs with each edge, either way) or ``sd`` (the
    columns' standard deviations), the label and the pen width say what ``bnsl show`` draws
    (:func:`bnsl_cli.io.emphasis.edge_emphasis`): the strength, else the standardised weight
    ``W[i, j]·sd(i)/sd(j)``; ``weight`` stays the exact weight. Without either the text is as before.
    ``levels`` (name -> level count, a run with categorical columns): those nodes are boxes with their
    level count beside them (``xlabel``) and in ``levels``."""
    W = np.asarray(W, dtype=float)
    lines = [
        f"// {title}",
        f"// Orientation: an edge a -> b means W[a, b] != 0; {ORIENTATION}.",
        "digraph bnsl {",
        "  rankdir=TB;",
        "  node [shape=ellipse];",
    ]
    for name in names:
        if levels and name in levels:  # (the label stays the name: readers take a label for the node's name)
            lines.append(f'  {_dot_id(name)} [shape=box, levels={int(levels[name])}, xlabel="{int(levels[name])} levels"];')
        else:
            lines.append(f"  {_dot_id(name)};")
    emphasis = None
    if strength is not None or sd is not None:
        emphasis = edge_emphasis(W, strength=strength, sd=sd)
        if emphasis.what in (None, "weight"):  # the spreads did not fit: as before
            emphasis = None
    nz = np.abs(W[W != 0])
    scale = float(nz.max()) if nz.size else 1.0
    for i, j in zip(*np.nonzero(W)):
        w = float(W[i, j])
        if emphasis is None:
            pen, label = 0.5 + 3.5 * abs(w) / scale, f"{w:.3g}"
        else:
            pen, label = 0.5 + 3.5 * float(emphasis.level[i, j]), emphasis.label(int(i), int(j))
        colour = "#1f5fbf" if w > 0 else "#c0392b"
        lines.append(
            f"  {_dot_id(names[i])} -> {_dot_id(names[j])} [weight={_dot_number(w)}, "
            f'label="{label}", penwidth={pen:.2f}, color="{colour}"];'
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_dot(path, W, names, title: str = "bnsl", *, strength=None, sd=None) -> None:
    atomic_write_text(path, dot_text(W, names, title, strength=strength, sd=sd))


_DOT_ESCAPE = re.compile(r"\\(.)", re.S)


def dot_unquote(s: str) -> str:
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
        return dot_unquote(t[1]) if t[0] == "str" else t[1]

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
        nid = dot_unquote(node.get_name())
        if nid in ("node", "edge", "graph"):
            continue
        nodes.append((nid, {k: dot_unquote(str(v)) for k, v in node.get_attributes().items()}))
    edges = []
    for e in g.get_edges():
        ends = (e.get_source(), e.get_destination())
        if not all(isinstance(x, str) for x in ends):
            raise InputDataError(f"{path}: edges to subgraphs are not supported; list each edge a -> b")
        s, t = (dot_unquote(_DOT_ID_PART.match(x).group(1)) for x in ends)  # drop ports
        edges.append((s, t, {k: dot_unquote(str(v)) for k, v in e.get_attributes().items()}))
    return g.get_type(), nodes, edges
