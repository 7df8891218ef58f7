"""Reading participant data: one validation layer for every subcommand that reads CSV data.

A data file is a CSV with one header row of column (variable) names and one row per sample; every
cell is a finite number. Every problem is reported as an :class:`~bnsl_cli.errors.InputDataError`
whose message names the file, and where it applies the row (1-based line number in the file) and
the column.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from bnsl_cli.errors import InputDataError, ShardMismatchError

__all__ = ["Table", "read_table", "read_shards", "check_columns"]


@dataclass(frozen=True)
class Table:
    """Numeric data read from one CSV: ``X`` is ``n × d`` with columns ``names``."""

    X: np.ndarray
    names: tuple[str, ...]
    path: Path
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])


def _read_header(path: Path) -> tuple[list[str], str]:
    from bnsl_cli.io.graphs import read_text_file

    text = read_text_file(path, "a CSV file")
    first = text.lstrip("\r\n").splitlines()[0]
    header = next(csv.reader([first]))
    return [h.strip() for h in header], text


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def check_columns(names: Sequence[str], path: Path) -> None:
    """Header checks: present, no empty and no duplicate names."""
    if all(_is_number(h) for h in names if h):
        raise InputDataError(
            f"{path}: no header row (the first line holds numbers); add a line with the column names"
        )
    for k, h in enumerate(names, start=1):
        if h == "":
            raise InputDataError(f"{path}: column {k} has an empty name in the header")
    seen: dict[str, int] = {}
    for k, h in enumerate(names, start=1):
        if h in seen:
            raise InputDataError(f"{path}: duplicate column name {h!r} (columns {seen[h]} and {k})")
        seen[h] = k


def _find_bad_cell(
    path: Path, text: str, names: Sequence[str], skip: Sequence[str] = ()
) -> InputDataError | None:
    """Slow path: find the first cell that is not a finite number and describe it (None if all are)."""
    body = text.lstrip("\r\n")
    skipped = text[: len(text) - len(body)].count("\n")  # leading blank lines keep their numbers
    reader = csv.reader(io.StringIO(body))
    next(reader)
    d = len(names)
    for line_no, row in enumerate(reader, start=2 + skipped):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != d:
            return InputDataError(f"{path}: row {line_no} has {len(row)} fields, the header has {d}")
        for k, cell in enumerate(row):
            if names[k] in skip:  # a text column (``keep``)
                continue
            c = cell.strip()
            if c == "":
                return InputDataError(f"{path}: row {line_no}, column {names[k]!r}: missing value")
            try:
                if "_" in c:  # Python's float() accepts 1_000, a CSV reader does not
                    raise ValueError(c)
                v = float(c)
            except ValueError:
                return InputDataError(f"{path}: row {line_no}, column {names[k]!r}: {c!r} is not a number")
            if not math.isfinite(v):
                return InputDataError(
                    f"{path}: row {line_no}, column {names[k]!r}: {c!r} is not a finite number"
                )
    return None


def _locate_bad_cell(path: Path, text: str, names: Sequence[str], skip: Sequence[str] = ()) -> InputDataError:
    """The error for a file the fast parser rejected."""
    return _find_bad_cell(path, text, names, skip) or InputDataError(
        f"{path}: could not parse the file as numeric CSV"
    )


def read_table(
    path: str | Path,
    *,
    keep: Sequence[str] | None = None,
    min_rows: int = 2,
    check_constant: bool = True,
) -> Table:
    """Read and validate one numeric CSV file.

    ``keep`` names columns that are read as text rather than numbers (returned in ``extra``
    as arrays of strings and left out of ``X`` and ``names``), e.g. a grouping column.
    """
    import pandas as pd

    path = Path(path)
    header, text = _read_header(path)
    check_columns(header, path)
    keep = list(keep or [])
    for k in keep:
        if k not in header:
            raise InputDataError(f"{path}: no column named {k!r} (columns: {', '.join(header[:8])}…)")
    dtypes = {h: (str if h in keep else np.float64) for h in header}
    try:
        df = pd.read_csv(
            io.StringIO(text.lstrip("\r\n")),
            header=0,
            names=header,
            dtype=dtypes,
            skip_blank_lines=True,
            keep_default_na=False,
            na_values=[],
            engine="c",
        )
    except (ValueError, pd.errors.ParserError):
        raise _locate_bad_cell(path, text, header, keep) from None
    num_names = [h for h in header if h not in keep]
    X = df[num_names].to_numpy(dtype=np.float64, copy=True) if num_names else np.zeros((len(df), 0))
    if X.size and not np.isfinite(X).all():
        raise _locate_bad_cell(path, text, header, keep)
    first_nl = text.find("\n", len(text) - len(text.lstrip("\r\n")))
    if first_nl >= 0 and ("True" in text[first_nl:] or "False" in text[first_nl:]):
        # pandas' float parser reads the words True/False as 1/0; they are not numbers
        bad = _find_bad_cell(path, text, header, keep)
        if bad is not None:
            raise bad
    if X.shape[0] < min_rows:
        raise InputDataError(f"{path}: {X.shape[0]} data row(s); at least {min_rows} are needed")
    if check_constant and X.shape[0] >= 1:
        const = np.flatnonzero(np.ptp(X, axis=0) == 0)
        if const.size:
            col = num_names[const[0]]
            raise InputDataError(
                f"{path}: column {col!r} is constant ({X[0, const[0]]:g} in every row); "
                "remove it, it carries no information about the graph"
            )
    extra = {k: df[k].to_numpy(dtype=str) for k in keep}
    return Table(X, tuple(num_names), path, extra)


def read_shards(paths: Sequence[str | Path], *, min_rows: int = 2) -> list[Table]:
    """Read every participant shard, check that all have the same column names (any order),
    and return them with columns in the order of the first shard.

    Every file is validated before anything is computed.
    """
    if not paths:
        raise InputDataError("no data files given")
    tables = [read_table(p, min_rows=min_rows) for p in paths]
    ref = tables[0]
    out = [ref]
    for t in tables[1:]:
        if set(t.names) != set(ref.names):
            missing = sorted(set(ref.names) - set(t.names))
            extra = sorted(set(t.names) - set(ref.names))
            what = []
            if missing:
                what.append("lacks " + ", ".join(map(repr, missing[:5])))
            if extra:
                what.append("has extra " + ", ".join(map(repr, extra[:5])))
            raise ShardMismatchError(
                f"{t.path}: columns differ from {ref.path} ({'; '.join(what)}); all shards need the same columns"
            )
        if t.names != ref.names:
            idx = [t.names.index(n) for n in ref.names]
            t = Table(t.X[:, idx], ref.names, t.path, t.extra)
        out.append(t)
    return out
