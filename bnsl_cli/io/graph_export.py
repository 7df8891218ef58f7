"""A learned graph in other tools' formats: ``learn --format`` (issue 46, item 6).

- ``modelstring``: the bnlearn model string (``[a][b|a][c|a:b]``), read by R bnlearn's
  ``model2network()`` and by bnsl's own graph readers; the structure only.
- ``dagitty``: a dagitty graph (``dag { a -> b [beta=0.8] }``), read by R/JS dagitty, by pgmpy
  (``DAG.from_dagitty``, a ``LinearGaussianBayesianNetwork`` when the edges carry ``beta``) and by bnsl.
  Every node is listed (isolated ones too); an edge of a linear-Gaussian run carries its weight as
  ``beta`` (the regression coefficient of the child on the parent); edges into or out of a
  categorical column carry none (such a node has one coefficient per level). Symmetric entries (an
  undirected edge) are written once as ``a -- b`` in a ``pdag``.

A name a format cannot hold is an :class:`~bnsl_cli.errors.InputDataError` naming the column and the
format, raised by :func:`check_names` before anything is learned or written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional

import numpy as np

from bnsl_cli.errors import InputDataError, OptionError
from bnsl_cli.io.graph_text_formats import bnlearn_model_string
from bnsl_cli.io.graphs import format_float

__all__ = ["FORMATS", "check_names", "dagitty_text", "export_texts", "parse_formats"]

#: ``--format`` name -> the file it adds to a run folder.
FORMATS = {"modelstring": "graph.modelstring", "dagitty": "graph.dagitty"}

_DAGITTY_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
#: dagitty's words: a node named like one is quoted
_DAGITTY_WORDS = {"dag", "pdag", "mag", "pag", "graph", "digraph"}


def parse_formats(values: Optional[Sequence[str]]) -> tuple[str, ...]:
    """The ``--format`` values (repeatable, or comma-separated) in the order given, each once; an
    unknown name is an :class:`OptionError` listing the known ones."""
    chosen: list[str] = []
    for value in values or ():
        for name in str(value).split(","):
            name = name.strip().lower()
            if not name:
                continue
            if name not in FORMATS:
                raise OptionError(f"--format {name!r}: choose from {', '.join(FORMATS)}")
            if name not in chosen:
                chosen.append(name)
    return tuple(chosen)


def _name_problem(fmt: str, name: str) -> Optional[str]:
    if fmt == "modelstring":
        if not name or any(c.isspace() or c in "[]|:" for c in name):
            return "a bnlearn model string cannot hold an empty name, whitespace, '[', ']', '|' or ':'"
    elif fmt == "dagitty":
        if not name or any(c in '"\\' or c in "\r\n" for c in name):
            return "a dagitty graph cannot hold an empty name, a double quote, a backslash or a line break"
    return None


def check_names(formats: Sequence[str], names: Sequence[str], source: str = "the data") -> None:
    """Refuse, before any learning, a column name one of ``formats`` cannot write."""
    for fmt in formats:
        for name in names:
            problem = _name_problem(fmt, str(name))
            if problem:
                raise InputDataError(f"{source}: column {str(name)!r} cannot be written with --format {fmt} ({problem}); "
                                     "rename it, or leave it out with --drop")


def _dagitty_name(name: str) -> str:
    if _DAGITTY_PLAIN.match(name) and name.lower() not in _DAGITTY_WORDS:
        return name
    return f'"{name}"'


def dagitty_text(W, names: Sequence[str], weights: bool = True) -> str:
    """The dagitty text of ``W`` (``W[i, j] != 0``: the edge ``names[i] -> names[j]``): a header line,
    every node on its own line in the order of ``names``, then the edges by (source, target) index,
    with ``[beta=w]`` when ``weights``. Symmetric non-zeros become one undirected ``a -- b`` and the
    graph a ``pdag``."""
    W = np.asarray(W, dtype=float)
    names = [str(n) for n in names]
    d = len(names)
    if W.shape != (d, d):
        raise ValueError(f"W is {W.shape}, expected {d} x {d} for {d} names")
    for n in names:
        problem = _name_problem("dagitty", n)
        if problem:
            raise ValueError(f"node name {n!r}: {problem}")
    nz = W != 0
    undirected = nz & nz.T
    lines = [_dagitty_name(n) for n in names]
    for i, j in zip(*np.nonzero(nz)):
        a, b = _dagitty_name(names[i]), _dagitty_name(names[j])
        if undirected[i, j]:
            if i < j:
                lines.append(f"{a} -- {b}")
            continue
        lines.append(f"{a} -> {b}" + (f" [beta={format_float(W[i, j])}]" if weights else ""))
    kind = "pdag" if undirected.any() else "dag"
    return "\n".join([f"{kind} {{", *lines, "}"]) + "\n"


def export_texts(formats: Sequence[str], W, names: Sequence[str], weights: bool = True) -> dict:
    """``{file name: text}`` of the graph ``W`` in every format of ``formats`` (:data:`FORMATS`)."""
    texts = {}
    for fmt in formats:
        if fmt == "modelstring":
            texts[FORMATS[fmt]] = bnlearn_model_string(np.asarray(W) != 0, names) + "\n"
        elif fmt == "dagitty":
            texts[FORMATS[fmt]] = dagitty_text(W, names, weights=weights)
        else:
            raise ValueError(f"unknown format {fmt!r}")
    return texts
