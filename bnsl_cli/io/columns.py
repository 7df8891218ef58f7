"""The columns of a data file: the header (:func:`check_columns`; whether the first line is one,
:func:`first_line_is_header`), the columns used under ``--columns``/``--drop``/``--index-col`` and text
columns (:func:`select_columns`), the rule for numeric cells and names (:func:`is_number`), the field
separator of a file that names none (:func:`detect_separator`), and the column checks: too few left,
other columns than another shard's, constant columns.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bnsl_cli.errors import InputDataError, ShardMismatchError
from bnsl_cli.io.table import ReadOptions, display_name, resolve_sep, sep_name

__all__ = [
    "is_number",
    "detect_separator",
    "as_point",
    "SEPARATORS",
    "check_columns",
    "first_line_is_header",
    "has_row_labels",
    "select_columns",
    "too_few_columns",
    "column_mismatch",
    "constant_columns",
]


def is_number(s: str) -> bool:
    """``s`` reads as a float (a number, ``nan`` or ``inf``): the rule for numeric cells and names that
    the data and graph readers share."""
    try:
        float(s)
    except ValueError:
        return False
    return True


#: The separators :func:`detect_separator` chooses among.
SEPARATORS = (",", ";", "\t", "|")
#: How much of a file's text after the header :func:`detect_separator` looks at: this many lines, within
#: this many bytes (whole lines only).
SAMPLE_BYTES = 1 << 20
SAMPLE_LINES = 100


def detect_separator(path: Path, line: str, rest: bytes, decimal: str = ".") -> str:
    """The field separator of a file whose first line is ``line`` and whose text goes on with ``rest``
    (the bytes read so far; up to :data:`SAMPLE_LINES` lines of its first :data:`SAMPLE_BYTES` are
    looked at), among :data:`SEPARATORS`. ``decimal``: the decimal mark of the numbers of a file not
    separated by ``,`` (a comma-separated file's numbers use ``.``).

    Each separator splits the first line and every sampled line (quotes respected, as the reader
    does). One that splits something and gives every line the first line's number of fields is
    *consistent* (with no line after the first in the sample: the separators that split it into the
    most fields). The rule: no separator splits anything (a one-column file) → the extension's
    default (tab for ``.tsv``/``.tab``, else ``,``); one consistent separator → it; several → the
    one whose cells read best as numbers, and undecided when they read equally well; none
    consistent → the default when it splits the first line, else the only separator that does (so
    the reader names the row that breaks the pattern), else undecided. Undecided is an
    :class:`InputDataError` that names the file and the candidates and suggests ``--sep``.
    """
    default = resolve_sep(path)
    cands = SEPARATORS
    pieces = rest[:SAMPLE_BYTES].split(b"\n", SAMPLE_LINES)
    if len(pieces) > 1 or len(rest) > SAMPLE_BYTES:
        pieces = pieces[:-1]  # whole lines only (the last piece may be cut short)
    lines = [t for t in (b.decode("utf-8", "replace") for b in pieces[:SAMPLE_LINES]) if t.strip()]
    sample = line + "\n" + "\n".join(lines)
    parsed = {}
    for c in cands:
        if c not in sample:
            continue
        try:
            rows = [r for r in csv.reader(io.StringIO(sample), delimiter=c) if r and any(f.strip() for f in r)]
        except csv.Error:
            continue
        if rows and (len(rows[0]) > 1 or any(len(r) > 1 for r in rows[1:])):
            parsed[c] = rows
    if not parsed:
        return default  # one column, whatever the separator
    consistent = [c for c, rows in parsed.items() if all(len(r) == len(rows[0]) for r in rows[1:])]
    if not lines:  # the first line alone (a header with no row after it in the sample): most fields
        most = max(len(parsed[c][0]) for c in consistent)
        consistent = [c for c in consistent if len(parsed[c][0]) == most]
    if len(consistent) == 1:
        return consistent[0]
    if consistent:
        scores = {c: _numeric_share(parsed[c][1:], "." if c == "," else decimal) for c in consistent}
        best = max(scores.values())
        top = [c for c in consistent if scores[c] == best]
        if len(top) == 1:
            return top[0]
        left = top
    else:
        splitting = [c for c, rows in parsed.items() if len(rows[0]) > 1]
        if default in splitting or not splitting:
            return default
        if len(splitting) == 1:
            return splitting[0]
        left = splitting
    names = " and ".join(sep_name(c) for c in left)
    raise InputDataError(
        f"{display_name(path)}: cannot tell the field separator: its first lines split as well on {names}; "
        f"pass --sep (e.g. --sep {'tab' if left[0] == chr(9) else repr(left[0])})"
    )


def _numeric_share(rows: list, decimal: str) -> float:
    cells = [f.strip() for r in rows for f in r if f.strip()]
    if not cells:
        return 0.0
    return sum(is_number(as_point(f, decimal)) for f in cells) / len(cells)


def as_point(cell: str, decimal: str) -> str:
    """``cell`` with its decimal mark ``decimal`` written ``.`` (a cell that holds a ``.`` beside a decimal
    comma is no number: it becomes one that :func:`is_number` rejects)."""
    if decimal == ".":
        return cell
    return cell.replace(decimal, ".") if "." not in cell else cell + "?"


def check_columns(
    names: Sequence[str], path: Path, line: int = 1, sep: str = ",", numeric_names: bool = False,
    row_labels: bool = False,
) -> None:
    """Header checks: present, no empty and no duplicate names, not another separator.
    ``numeric_names``: names that are numbers are accepted (``--header yes``); ``row_labels``: the
    first name may be empty (a column of row labels, :func:`has_row_labels`)."""
    where = f"{display_name(path)}: line {line} (header)"
    if not numeric_names and all(is_number(h) for h in names if h):
        raise InputDataError(
            f"{display_name(path)}: no header row (the first line holds numbers); add a line with the column names, "
            "or pass --header yes if these numbers are the names (e.g. gene ids), --header no if the file has "
            "no header (columns V1, V2, …)"
        )
    if len(names) == 1:
        for other in (";", "\t", "|", ","):
            if other != sep and other in names[0]:
                raise InputDataError(
                    f"{where} is one name {names[0][:40]!r} holding {sep_name(other)}: the file looks "
                    f"{sep_name(other)}-separated; pass --sep {'tab' if other == chr(9) else repr(other)}"
                )
    for k, h in enumerate(names, start=1):
        if h == "" and not (row_labels and k == 1):
            raise InputDataError(f"{display_name(path)}: column {k} has an empty name in the header")
    seen: dict[str, int] = {}
    for k, h in enumerate(names, start=1):
        if h in seen:
            raise InputDataError(f"{display_name(path)}: duplicate column name {h!r} (columns {seen[h]} and {k})")
        seen[h] = k


def has_row_labels(header: Sequence[str]) -> bool:
    """Whether the header's first name is empty and others follow: the column of row labels that R's
    ``write.csv`` and pandas' ``to_csv`` write first (read like ``--index-col ""``: left out)."""
    return len(header) > 1 and header[0] == ""


_INT = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)")


def first_line_is_header(fields: list, rest: bytes, mode: str, path: Path, sep: str, decimal: str = ".") -> bool:
    """Whether the first line is the header (see :class:`ReadOptions` ``header``)."""
    if mode != "auto":
        return mode == "yes"
    if decimal != ".":
        fields = [as_point(f, decimal) for f in fields]
    if not all(is_number(h) for h in fields if h):
        return True  # names that are words
    # only numbers: names when they are integers and every sampled row below holds a decimal
    if fields and all(_INT.fullmatch(h) for h in fields):
        lines = [ln for ln in rest.split(b"\n")[:51][:-1] if ln.strip()] if b"\n" in rest else []
        if lines:
            try:
                rows = list(csv.reader([ln.decode("utf-8", "replace").rstrip("\r") for ln in lines], delimiter=sep))
            except csv.Error:
                rows = []
            if rows and all(any(_DECIMAL.fullmatch(as_point(c.strip(), decimal)) for c in r) for r in rows):
                return True
    check_columns(fields, path)  # only numbers: raises the "no header row" error
    return False  # pragma: no cover


def select_columns(header: list, keep: list, opts: ReadOptions, path: Path,
                   absent_ok: bool = False) -> tuple[list, list]:
    """(the numeric columns used, in order; the columns left out) under ``opts``. A first column
    with an empty name (:func:`has_row_labels`) is left out, as ``--index-col`` leaves one out.
    ``absent_ok``: a ``--drop`` name that is not a column is passed over (one shard of several; the
    caller checks that some shard has it)."""
    shown = display_name(path)

    def need(name: str, option: str) -> None:
        if name not in header:
            cols = ", ".join(map(repr, header[:8])) + (" …" if len(header) > 8 else "")
            raise InputDataError(f"{shown}: {option} names {name!r}, which is not a column (columns: {cols})")

    if opts.index_col is not None:
        need(opts.index_col, "--index-col")
    for n in opts.drop:
        if not absent_ok:
            need(n, "--drop")
    for n in opts.columns or ():
        need(n, "--columns")
    gone = set(opts.drop) | ({opts.index_col} if opts.index_col is not None else set()) | set(keep)
    if has_row_labels(header):
        gone.add("")
    chosen = list(opts.columns) if opts.columns is not None else header
    sel = [h for h in chosen if h not in gone]
    ignored = [h for h in header if h not in keep and h not in sel]
    return sel, ignored


def too_few_columns(path: Path, header: list, sel: list, opts: ReadOptions, sep: str) -> InputDataError:
    """The error for a file left with too few columns ``sel`` (of ``header``) to learn a graph from."""
    shown = display_name(path)
    if len(header) == 1:
        return InputDataError(
            f"{shown}: one column ({header[0][:40]!r}); a graph needs at least two variables — is the file "
            f"separated by something other than {sep_name(sep)}? (--sep)"
        )
    left = ", ".join(map(repr, sel)) or "none"
    return InputDataError(
        f"{shown}: {len(sel)} column(s) left ({left}) after --columns/--drop/--index-col; "
        "a graph needs at least two variables"
    )


def constant_columns(X: np.ndarray) -> np.ndarray:
    """The indices of the columns of ``X`` that hold one value in every row."""
    if X.shape[0] == 0:
        return np.zeros(0, dtype=int)
    return np.flatnonzero((X == X[0]).all(axis=0))


def column_mismatch(path: Path, names: Sequence[str], ref: Sequence[str], ref_path: Optional[Path] = None) -> ShardMismatchError:
    """The error for a file whose columns ``names`` are not the columns ``ref`` (of ``ref_path``)."""
    missing = [n for n in ref if n not in set(names)]
    extra = [n for n in names if n not in set(ref)]
    what = []
    if missing:
        what.append("lacks " + ", ".join(map(repr, missing[:5])))
    if extra:
        what.append("has extra " + ", ".join(map(repr, extra[:5])))
    against = f" from {display_name(ref_path)}" if ref_path is not None else ""
    return ShardMismatchError(
        f"{display_name(path)}: columns differ{against} ({'; '.join(what)}); all shards need the same columns"
    )
