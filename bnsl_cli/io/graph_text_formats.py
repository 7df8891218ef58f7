"""Three more graph texts other tools write, parsed for :func:`bnsl_cli.io.graph_formats.read_graph`:

- bnlearn-repository **BIF** (``.bif``, also gzipped): the structure only. ``variable NAME {...}``
  blocks name the nodes (in that order) and ``probability ( CHILD | P1, P2 ) {...}`` gives the edges
  ``P1 -> CHILD``, ``P2 -> CHILD``; the numbers are ignored.
- **bnlearn model strings** (``modelstring()``, ``model2network()``):
  ``[asia][smoke][tub|asia][either|tub:lung]…``, every node once, its parents after ``|`` separated by
  ``:``; whitespace between the brackets is ignored.
- **dagitty** graphs: ``dag { a -> b  c <- d  e [exposure] ; x -> {y z} }`` (also ``pdag {}``,
  ``graph {}``, ``dag NAME {}``): ``->`` and ``<-`` edges, chains, ``{a b}`` groups on either side,
  quoted names, node attributes ``[...]`` (ignored) and graph attributes ``bb="…"`` (ignored).
  ``a -- b`` is an undirected edge (symmetric entries, as Tetrad's ``---``); ``<->`` is refused.

Each ``parse_*`` returns ``(names, edges)``, the node names in order and ``(source, target, weight)``
triples; :mod:`bnsl_cli.io.graph_formats` makes the :class:`~bnsl_cli.io.graphs.Graph`. Every problem
is an :class:`~bnsl_cli.errors.InputDataError` whose message starts with the file name.
:func:`bnlearn_model_string` writes a model string :func:`parse_model_string` reads back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import numpy as np

from bnsl_cli.errors import InputDataError

__all__ = [
    "BIF_SUFFIXES",
    "DAGITTY_SUFFIXES",
    "MODEL_STRING_SUFFIXES",
    "bnlearn_model_string",
    "graph_arcs",
    "is_bif",
    "is_dagitty",
    "is_model_string",
    "parse_bif",
    "parse_dagitty",
    "parse_model_string",
]

BIF_SUFFIXES = (".bif", ".bif.gz")
DAGITTY_SUFFIXES = (".dagitty",)
MODEL_STRING_SUFFIXES = (".modelstring", ".bnlearn")

Edges = list[tuple[str, str, float]]


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


class _Line:
    """The line number of ``pos`` in ``text``, counted only when a message shows it."""

    def __init__(self, text: str, pos: int):
        self.text, self.pos = text, pos

    def __str__(self) -> str:
        return str(_line(self.text, self.pos))


# -- BIF ----------------------------------------------------------------------------------------

_BIF_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
# comments and strings (``property "…"``) blanked out, newlines kept so line numbers stay right
_BIF_NOISE = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', re.DOTALL)
_BIF_START = re.compile(
    r"(?:\s|//[^\n]*|/\*.*?\*/)*(?:network\s+[^{}\s]*\s*\{|variable\s+[^{}\s]+\s*\{|probability\s*\()", re.DOTALL
)


def is_bif(text: str) -> bool:
    """Whether ``text`` opens as a BIF file (after comments: ``network NAME {``, ``variable NAME {``
    or ``probability (``)."""
    return _BIF_START.match(text) is not None


_BRACE = re.compile(r"[{}]")


def _blank(m: re.Match) -> str:
    s = m.group(0)
    return ('""' if s.startswith('"') else " ") + "\n" * s.count("\n")


def _skip_block(path: Path, text: str, start: int, what: str) -> int:
    """The position after the ``}`` that closes the ``{`` at ``start``."""
    depth = 0
    for m in _BRACE.finditer(text, start):
        depth += 1 if m.group(0) == "{" else -1
        if depth == 0:
            return m.end()
    raise InputDataError(f"{path}: line {_line(text, start)}: the block of {what} is not closed (missing '}}')")


def parse_bif(path: Path, text: str) -> tuple[list[str], Edges]:
    """Nodes and edges of a BIF file: names from the ``variable`` blocks (in order), edges from the
    ``probability ( CHILD | PARENTS )`` headers."""
    clean = _BIF_NOISE.sub(_blank, text)
    names: list[str] = []
    families: list[tuple[_Line, str, list[str]]] = []  # (line, child, parents)
    pos, n = 0, len(clean)
    word = re.compile(r"\s*([A-Za-z_]\w*)")
    while True:
        while pos < n and clean[pos].isspace():
            pos += 1
        if pos >= n:
            break
        m = word.match(clean, pos)
        line = _Line(clean, pos)
        kw = m.group(1) if m else clean[pos]
        if kw == "network":
            h = re.compile(r"\s*[^{}]*?\s*\{").match(clean, m.end())
            if h is None:
                raise InputDataError(f"{path}: line {line}: expected 'network NAME {{' (BIF)")
            pos = _skip_block(path, clean, h.end() - 1, "network")
        elif kw == "variable":
            h = re.compile(r"\s*([^\s{}]+)\s*\{").match(clean, m.end())
            if h is None:
                raise InputDataError(f"{path}: line {line}: expected 'variable NAME {{' (BIF)")
            name = h.group(1)
            if not _BIF_NAME.fullmatch(name):
                raise InputDataError(
                    f"{path}: line {line}: variable name {name!r} is not valid (letters, digits, '_', '.', '-')"
                )
            if name in names:
                raise InputDataError(f"{path}: line {line}: variable {name!r} is declared twice")
            names.append(name)
            pos = _skip_block(path, clean, h.end() - 1, f"variable {name!r}")
        elif kw == "probability":
            h = re.compile(r"\s*\(([^(){}]*)\)\s*\{").match(clean, m.end())
            if h is None:
                raise InputDataError(f"{path}: line {line}: expected 'probability ( CHILD | PARENTS ) {{' (BIF)")
            head = h.group(1)
            child, _, rest = head.partition("|")
            child = child.strip()
            parents = [p for p in re.split(r"[\s,]+", rest.strip()) if p]
            for node in (child, *parents):
                if not _BIF_NAME.fullmatch(node):
                    raise InputDataError(f"{path}: line {line}: 'probability ({head.strip()})' is not 'CHILD | P1, P2'")
            if "|" in head and not parents:
                raise InputDataError(f"{path}: line {line}: 'probability ({head.strip()})' names no parent after '|'")
            families.append((line, child, parents))
            pos = _skip_block(path, clean, h.end() - 1, f"probability ( {head.strip()} )")
        else:
            raise InputDataError(
                f"{path}: line {line}: unexpected {kw!r}; a BIF file holds network, variable and probability blocks"
            )
    if not names:
        raise InputDataError(f"{path}: BIF file without 'variable NAME {{...}}' blocks")
    declared = set(names)
    seen: set[str] = set()
    edges: Edges = []
    for line, child, parents in families:
        for node in (child, *parents):
            if node not in declared:
                raise InputDataError(
                    f"{path}: line {line}: probability block names variable {node!r}, which is not declared "
                    f"(no 'variable {node} {{...}}' block)"
                )
        if child in seen:
            raise InputDataError(f"{path}: line {line}: a second probability block for {child!r}")
        seen.add(child)
        edges += [(p, child, 1.0) for p in parents]
    return names, edges


# -- bnlearn model strings ----------------------------------------------------------------------

_MS_HEAD = re.compile(r"\s*\[\s*[^\s\[\]|:\"'{},]+\s*[\]|]")
_MS_NODE = re.compile(r"\s*\[([^\[\]]*)\]")


def is_model_string(text: str) -> bool:
    """Whether ``text`` reads as a bnlearn model string: it opens with ``[node]`` or ``[node|`` and is
    not JSON (``[1]`` stays a JSON list)."""
    if _MS_HEAD.match(text) is None:
        return False
    try:
        json.loads(text)
    except ValueError:
        return True
    return False


def parse_model_string(path: Path, text: str) -> tuple[list[str], Edges]:
    """Nodes (in the order of their ``[...]``) and edges of a bnlearn model string."""
    body = text.strip()
    if len(body) >= 2 and body[0] == body[-1] and body[0] in "\"'":  # as R prints it
        body = body[1:-1]
    names: list[str] = []
    families: list[tuple[str, list[str]]] = []
    pos = 0
    while pos < len(body) and not body[pos:].isspace():
        m = _MS_NODE.match(body, pos)
        if m is None:
            raise InputDataError(
                f"{path}: not a bnlearn model string: expected '[node]' or '[node|parent1:parent2]' at "
                f"{body[pos:].strip()[:20]!r}"
            )
        pos = m.end()
        inner = m.group(1)
        node, bar, rest = inner.partition("|")
        node = node.strip()
        parents = [p.strip() for p in rest.split(":")] if bar else []
        for name in (node, *parents):
            if not name or any(c.isspace() for c in name) or "|" in name:
                raise InputDataError(f"{path}: bnlearn model string: [{inner}] is not '[node]' or '[node|p1:p2]'")
        if node in names:
            raise InputDataError(f"{path}: bnlearn model string: node {node!r} appears twice")
        names.append(node)
        families.append((node, parents))
    if not names:
        raise InputDataError(f"{path}: bnlearn model string without nodes")
    known = set(names)
    edges: Edges = []
    for node, parents in families:
        for p in parents:
            if p not in known:
                raise InputDataError(
                    f"{path}: bnlearn model string: parent {p!r} of {node!r} is not a node (no [{p}...])"
                )
            edges.append((p, node, 1.0))
    return names, edges


def bnlearn_model_string(W, names: Sequence[str]) -> str:
    """The bnlearn model string of the graph ``W`` (``W[i, j] != 0``: an edge ``names[i] ->
    names[j]``): one ``[node|p1:p2]`` per node in the order of ``names``, its parents in that order
    too. An undirected edge (symmetric entries) is written both ways, which reads back the same.
    A ``ValueError`` for names a model string cannot hold (empty, whitespace, ``[``, ``]``, ``|``,
    ``:``, or twice) or a self-loop."""
    W = np.asarray(W)
    names = [str(n) for n in names]
    d = len(names)
    if W.shape != (d, d):
        raise ValueError(f"W is {W.shape}, expected {d} x {d} for {d} names")
    for n in names:
        if not n or any(c.isspace() or c in "[]|:" for c in n):
            raise ValueError(f"node name {n!r} cannot be written in a bnlearn model string")
    if len(set(names)) != d:
        raise ValueError("duplicate node names")
    loops = np.flatnonzero(np.diag(W))
    if loops.size:
        raise ValueError(f"self-loop on node {names[int(loops[0])]!r}")
    parts = []
    for j, node in enumerate(names):
        parents = [names[i] for i in range(d) if W[i, j] != 0]
        parts.append(f"[{node}|{':'.join(parents)}]" if parents else f"[{node}]")
    return "".join(parts)


# -- dagitty ------------------------------------------------------------------------------------

_DAGITTY_KINDS = ("dag", "pdag", "graph")
_DAGITTY_OTHER = ("mag", "pag")
_DAGITTY_START = re.compile(r'\s*(dag|pdag|mag|pag)\b\s*(?:[\w.]+|"(?:[^"\\]|\\.)*")?\s*\{')
_DAGITTY_TOKEN = re.compile(
    r'(?P<ws>\s+)|(?P<str>"(?:[^"\\]|\\.)*")|(?P<edge><->|->|<-|--)|(?P<punct>[{};,=])|(?P<attr>\[)|(?P<name>[\w.]+)'
)


def is_dagitty(text: str) -> bool:
    """Whether ``text`` opens as a dagitty graph (``dag {``, ``pdag {``, ``dag NAME {``; ``mag``/``pag``
    too, to refuse them clearly). ``graph {`` is DOT's header as well, so it is dagitty only by the
    ``.dagitty`` extension."""
    return _DAGITTY_START.match(text) is not None


def _dagitty_tokens(path: Path, text: str) -> list[tuple[str, str, int]]:
    """``(kind, value, pos)``: kinds ``name`` (quoted names unquoted), ``edge``, ``punct``, ``attr``
    (a whole ``[...]``, skipped over quoted strings)."""
    out, pos, n = [], 0, len(text)
    while pos < n:
        m = _DAGITTY_TOKEN.match(text, pos)
        if m is None:
            raise InputDataError(f"{path}: line {_line(text, pos)}: unexpected {text[pos]!r} in the dagitty graph")
        kind = m.lastgroup
        if kind == "attr":
            end = re.compile(r'(?:[^\]"]|"(?:[^"\\]|\\.)*")*\]').match(text, pos + 1)
            if end is None:
                raise InputDataError(f"{path}: line {_line(text, pos)}: '[' without its ']' in the dagitty graph")
            out.append(("attr", text[pos:end.end()], pos))
            pos = end.end()
            continue
        if kind == "str":
            out.append(("name", re.sub(r"\\(.)", r"\1", m.group(0)[1:-1]), pos))
        elif kind != "ws":
            out.append((kind, m.group(0), pos))
        pos = m.end()
    return out


def parse_dagitty(path: Path, text: str) -> tuple[list[str], Edges]:
    """Nodes (in the order they first appear) and edges of a dagitty graph."""
    toks = _dagitty_tokens(path, text)
    names: list[str] = []
    edges: Edges = []
    k = 0

    def where(i: int) -> str:
        return f"line {_line(text, toks[i][2] if i < len(toks) else len(text))}"

    def peek(i: int) -> tuple[str, str]:
        return toks[i][:2] if i < len(toks) else ("end", "")

    if peek(0)[0] != "name" or peek(0)[1] not in _DAGITTY_KINDS + _DAGITTY_OTHER:
        raise InputDataError(f"{path}: not a dagitty graph: expected 'dag {{', 'pdag {{' or 'graph {{' at the start")
    kind = toks[0][1]
    if kind in _DAGITTY_OTHER:
        raise InputDataError(
            f"{path}: dagitty '{kind}' graphs (latent variables) are not supported; bnsl reads dag, pdag and graph"
        )
    k = 1
    if peek(k)[0] == "name":  # dag NAME {
        k += 1
    if peek(k) != ("punct", "{"):
        raise InputDataError(f"{path}: {where(k)}: expected '{{' after '{kind}' (dagitty graph)")
    k += 1

    def node(name: str) -> str:
        if name not in names:
            names.append(name)
        return name

    def item(i: int) -> tuple[list[str], int]:
        """One node (with optional attributes) or a ``{a b}`` group, from token ``i``."""
        t, v = peek(i)
        if t == "name":
            i += 1
            if peek(i)[0] == "attr":
                i += 1
            return [node(v)], i
        if (t, v) == ("punct", "{"):
            i += 1
            group: list[str] = []
            while peek(i) != ("punct", "}"):
                if peek(i)[0] == "end":
                    raise InputDataError(f"{path}: {where(i)}: a '{{' group is not closed (missing '}}')")
                if peek(i) in (("punct", ";"), ("punct", ",")):
                    i += 1
                    continue
                members, i = item(i)
                group += [m for m in members if m not in group]
            return group, i + 1
        shown = v or "the end of the file"
        raise InputDataError(f"{path}: {where(i)}: expected a node name or a '{{...}}' group, found {shown!r}")

    while True:
        t, v = peek(k)
        if (t, v) == ("punct", "}"):
            k += 1
            break
        if t == "end":
            raise InputDataError(f"{path}: the dagitty graph is not closed (missing '}}')")
        if (t, v) in (("punct", ";"), ("punct", ",")):
            k += 1
            continue
        if t == "name" and peek(k + 1) == ("punct", "="):  # a graph attribute: bb="0,0,1,1"
            if peek(k + 2)[0] != "name":
                raise InputDataError(f"{path}: {where(k)}: expected a value after '{v} ='")
            k += 3
            continue
        left, k = item(k)
        while peek(k)[0] == "edge":
            op, at = peek(k)[1], k
            right, k = item(k + 1)
            for a in left:
                for b in right:
                    if op == "<->":
                        raise InputDataError(
                            f"{path}: {where(at)}: bidirected edge {a} <-> {b} is not supported "
                            "(bnsl's graphs are DAGs or CPDAGs: use ->, <- or --)"
                        )
                    if op == "->":
                        edges.append((a, b, 1.0))
                    elif op == "<-":
                        edges.append((b, a, 1.0))
                    else:  # --: undirected, symmetric entries
                        edges += [(a, b, 1.0), (b, a, 1.0)]
            left = right
    if k < len(toks):
        raise InputDataError(f"{path}: {where(k)}: text after the closing '}}' of the dagitty graph")
    return names, edges


def graph_arcs(path: Path, text: str) -> Optional[list]:
    """The directed edges ``(source, target)`` of ``text`` when it is a BIF file, a bnlearn model string
    or a dagitty graph (``None`` otherwise): a whole graph as a list of arcs, as ``--require-file`` and
    ``--forbid-file`` take them. An undirected dagitty edge is refused (an arc list states directions)."""
    path = Path(path)
    if is_bif(text):
        _, edges = parse_bif(path, text)
    elif is_model_string(text):
        _, edges = parse_model_string(path, text)
    elif is_dagitty(text) or path.name.lower().endswith(DAGITTY_SUFFIXES):
        _, edges = parse_dagitty(path, text)
        pairs = {(a, b) for a, b, _ in edges}
        both = sorted((a, b) for a, b in pairs if (b, a) in pairs and a < b)
        if both:
            raise InputDataError(f"{path}: {both[0][0]} -- {both[0][1]} is undirected; an arc list needs directions")
    else:
        return None
    return [(a, b) for a, b, _ in edges]
