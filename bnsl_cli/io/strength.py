"""Reading edge strengths (``bnsl learn --bootstrap``) back: the ``strength`` column of an edges CSV,
or the ``strength.csv`` beside a run's graph file (:mod:`bnsl_cli.confidence` says what they are)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Optional

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.graph_formats import read_graph, read_text_file

__all__ = ["read_strengths", "STRENGTH_BANDS", "strength_bands"]

#: the bands of ``bnsl evaluate``'s precision by strength: ``[low, high)`` (the last includes 1)
STRENGTH_BANDS = ((0.9, 1.0), (0.7, 0.9), (0.5, 0.7), (0.0, 0.5))


def _from_edges_csv(path: Path, text: str) -> Optional[dict]:
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    if not rows:
        return None
    head = [c.strip().lower() for c in rows[0]]
    if head[:2] != ["source", "target"] or "strength" not in head:
        return None
    k = head.index("strength")
    out = {}
    for r_no, r in enumerate(rows[1:], start=2):
        try:
            s = float(r[k])
        except (IndexError, ValueError):
            raise InputDataError(f"{path}: row {r_no}: the strength is not a number") from None
        if not (math.isfinite(s) and 0.0 <= s <= 1.0):
            raise InputDataError(f"{path}: row {r_no}: a strength lies in [0, 1], got {r[k]!r}")
        out[frozenset((r[0].strip(), r[1].strip()))] = s
    return out


def read_strengths(path) -> Optional[dict]:
    """``{frozenset({a, b}): strength}`` of the estimate ``path``: its ``strength`` column (an edges
    CSV), else the pairs of the ``strength.csv`` in the same folder (directed shares summed both
    ways); ``None`` when it has neither (standard input has no folder)."""
    path = Path(path)
    if str(path) == "-":
        return None
    if path.suffix.lower() in (".csv", ".tsv", ""):
        got = _from_edges_csv(path, read_text_file(path))
        if got is not None:
            return got
    beside = path.parent / "strength.csv"
    if path.name == "strength.csv" or not beside.is_file():
        return None
    g = read_graph(beside)
    W = g.W
    if not (((W >= 0) & (W <= 1 + 1e-12)).all()):
        raise InputDataError(f"{beside}: shares lie in [0, 1]")
    names = list(g.names)
    return {frozenset((names[i], names[j])): float(W[i, j] + W[j, i])
            for i in range(len(names)) for j in range(i + 1, len(names))}


def strength_bands(edges, strengths: dict, truth_pairs: set, truth_arcs: set) -> list:
    """Precision by strength band of the estimate's ``edges`` (``(a, b)`` name pairs): per band of
    :data:`STRENGTH_BANDS` the edges in it, the share whose pair the truth has (either way:
    ``precision``) and in the same direction (``precision_directed``); ``None`` when the band is empty.
    An edge without a strength is left out."""
    out = []
    for low, high in STRENGTH_BANDS:
        top = high - 1e-9 if high < 1.0 else 2.0  # shares summed in floating point: 0.9 may read 0.8999…
        inside = [(a, b) for a, b in edges if frozenset((a, b)) in strengths
                  and low - 1e-9 <= strengths[frozenset((a, b))] < top]
        n = len(inside)
        out.append({
            "band": f"[{low:g}, {high:g}{']' if high >= 1.0 else ')'}",
            "edges": n,
            "precision": None if not n else sum(frozenset(e) in truth_pairs for e in inside) / n,
            "precision_directed": None if not n else sum(e in truth_arcs for e in inside) / n,
        })
    return out
