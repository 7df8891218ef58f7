"""Every participant's data file as one data set: :func:`read_shards` reads the shards (each with
:func:`~bnsl_cli.io.csv_reader.read_table`'s checks), requires the same columns in each, checks
columns constant across shards (:func:`check_constant_columns` for one table a reader postponed it
for), and :func:`sample_warnings` warns about identifier-like columns (:func:`identifier_columns`)
and samples too small for the graph to mean much.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bnsl_cli.errors import (
    ConstantColumnWarning,
    DataWarning,
    IdentifierColumnWarning,
    InputDataError,
    ShardMismatchError,
    SmallSampleWarning,
)
from bnsl_cli.io.columns import constant_columns
from bnsl_cli.io.csv_reader import forced_sep, read_resolved, row_labels_note, row_labels_noted
from bnsl_cli.io.table import STDIN, ReadOptions, ReadProgress, Table, display_name

__all__ = [
    "read_shards",
    "check_constant_columns",
    "identifier_columns",
    "sample_warnings",
    "MIN_ROWS",
    "TINY_ROWS",
]

#: The fewest data rows a participant shard may have (``read_shards``' default; ``bnsl split`` makes
#: no smaller shard).
MIN_ROWS = 2

#: Below this many rows in all, :func:`sample_warnings` warns that the sample is tiny: a correlation
#: estimated from n rows has a standard error of about 1/√n, and two standard errors (the size chance
#: correlations commonly reach) are 2/√50 = 0.28 at 50 rows, about the default edge threshold 0.3.
TINY_ROWS = 50

#: A column is looked at as a possible row identifier only from this many rows on (a short designed
#: series such as doses 1..5 in order is no identifier).
_ID_MIN_ROWS = 10


_DEFAULT = ReadOptions()


def read_shards(
    paths: Sequence[str | Path],
    *,
    min_rows: int = MIN_ROWS,
    sep: Optional[str] = None,
    progress: Optional[ReadProgress] = None,
    options: Optional[ReadOptions] = None,
    min_columns: int = 2,
    check_constant: bool = True,
    keep: Sequence[str] = (),
) -> list[Table]:
    """Read every participant shard, check that all have the same column names (any order),
    and return them with columns in the order of the first shard (of ``options.columns`` when
    given). ``options`` (:class:`ReadOptions`) apply to every shard alike; the field separator is
    ``sep`` (else ``options.sep``) for every shard, or without one each shard's own, detected (a ``;``
    site and ``,`` sites read together; each table's ``sep`` says which).

    Every file is validated before anything is computed. A column constant in some shards (a
    site where a variable does not vary) is legal — the learners centre each site and only use
    its means and second moments — and warns with :class:`ConstantColumnWarning` naming the
    files; a column constant in every shard is an error (it carries no information).
    ``check_constant=False`` (private runs) skips both: whether a column is constant is a
    function of the rows that no mechanism protects, so a private run must not depend on it.
    ``progress(bytes_read, total_bytes)`` covers all files. :func:`sample_warnings` then warns
    about identifier-like columns and small samples. ``keep``: columns read as text into each
    table's ``extra`` (categorical columns, :func:`bnsl_cli.io.kinds.encode`).
    """
    if not paths:
        raise InputDataError("no data files given")
    opts = (options or _DEFAULT).check()
    sep = forced_sep(sep, opts)
    paths = [Path(p) for p in paths]
    if sum(str(p) == STDIN for p in paths) > 1:
        raise InputDataError("'-' (standard input) can be given only once")
    total: Optional[int] = 0
    for p in paths:
        try:
            total = None if total is None or str(p) == STDIN else total + p.stat().st_size
        except OSError:
            pass  # the reader names the problem
    base = 0
    tables: list[Table] = []
    several_drop = len(paths) > 1 and bool(opts.drop)  # a --drop column some shards lack: dropped where present
    for p in paths:
        cb = None
        if progress is not None:
            cb = (lambda b, _t, base=base: progress(base + b, total))  # noqa: E731
        ref = tables[0].names if tables else None
        try:
            t = read_resolved(p, sep, list(keep) or None, min_rows, False, ref, cb, None, total, opts,
                              max(min_columns - len(keep), 0), absent_drop_ok=several_drop)
        except ShardMismatchError as exc:
            raise ShardMismatchError(str(exc).replace("columns differ (", f"columns differ from {display_name(tables[0].path)} (", 1)) from None
        tables.append(t)
        try:
            base += p.stat().st_size if str(p) != STDIN else 0
        except OSError:
            pass
    if several_drop:
        _check_drop_somewhere(tables, opts.drop)
    labelled = [display_name(t.path) for t in tables if t.row_labels]
    if labelled and row_labels_noted(opts):
        where = labelled[0] if len(labelled) == 1 else (
            ", ".join(labelled[:3]) + (" …" if len(labelled) > 3 else "") + f" ({len(labelled)} of {len(tables)} shards)"
        )
        warnings.warn(row_labels_note(where), DataWarning, stacklevel=2)
    if check_constant:
        _check_constant_columns(tables)
    sample_warnings(tables, opts)
    return tables


def _check_drop_somewhere(tables: Sequence[Table], drop: Sequence[str]) -> None:
    """Raise :class:`InputDataError` for a ``--drop`` name that no shard has (a shard lacking one
    that another shard has is fine: it is dropped where present)."""
    for name in drop:
        if all(name in t.absent_drop for t in tables):
            cols = ", ".join(map(repr, tables[0].names[:8])) + (" …" if len(tables[0].names) > 8 else "")
            raise InputDataError(
                f"{display_name(tables[0].path)} and the {len(tables) - 1} other shard(s): --drop names {name!r}, "
                f"which is not a column of any of them (columns used: {cols})"
            )


def check_constant_columns(table: Table) -> None:
    """Raise :class:`InputDataError` when a column of ``table`` is constant (the check
    :func:`~bnsl_cli.io.csv_reader.read_table` makes by default), for a reader that postponed it."""
    const = constant_columns(table.X)
    if const.size:
        raise InputDataError(
            f"{display_name(table.path)}: column {table.names[const[0]]!r} is constant ({table.X[0, const[0]]:g} in every row); "
            "remove it, it carries no information about the graph"
        )


def identifier_columns(tables: Sequence[Table]) -> list[str]:
    """Columns that look like row identifiers in every table (all with the same columns): integer
    values, all distinct, and either strictly increasing or decreasing in file order or a run of
    consecutive integers in any order — at least :data:`_ID_MIN_ROWS` rows in all — or, from
    :data:`_RANDOM_ID_MIN_ROWS` rows on, integers all distinct over every shard (a random id).
    Measurements rarely do that; a row number or a record id does."""
    if not tables or sum(t.n for t in tables) < _ID_MIN_ROWS:
        return []
    total = sum(t.n for t in tables)
    out = []
    for j, name in enumerate(tables[0].names):
        if all(_looks_like_id(t.X[:, j]) for t in tables):
            out.append(name)
        elif total >= _RANDOM_ID_MIN_ROWS and _unique_integers([t.X[:, j] for t in tables]):
            out.append(name)
    return out


#: From this many rows in all, integer values that are all distinct over every shard (a random
#: patient or record id) are taken as an identifier too: integer measurements over so many rows
#: almost always repeat a value (the birthday bound), an id never does.
_RANDOM_ID_MIN_ROWS = 100


def _unique_integers(columns) -> bool:
    x = np.concatenate(columns)
    if not np.all(np.abs(x) < 2**53) or not np.all(x == np.round(x)):
        return False
    return np.unique(x).size == x.size


def _looks_like_id(x: np.ndarray) -> bool:
    n = x.shape[0]
    if n < 2 or not np.all(np.abs(x) < 2**53) or not np.all(x == np.round(x)):
        return False
    dx = np.diff(x)
    if np.all(dx > 0) or np.all(dx < 0):
        return True
    u = np.unique(x)
    return u.size == n and float(u[-1] - u[0]) == n - 1


def sample_warnings(tables: Sequence[Table], options: Optional[ReadOptions] = None, whole: bool = True) -> None:
    """Warn (:class:`IdentifierColumnWarning`, :class:`SmallSampleWarning`) about columns that look
    like row identifiers and about samples too small for the graph to mean much: fewer rows than
    variables (in all, or at one participant), or fewer than :data:`TINY_ROWS` rows in all.
    ``whole=False``: ``tables`` are one site's of a larger run (``bnsl join``), whose total is not
    known here — only the identifier columns and a site with fewer rows than variables are named."""
    if not tables:
        return
    opts = options or _DEFAULT
    for name in identifier_columns(tables):
        hint = f"--index-col {name}" if opts.index_col is None else f"--drop {name}"
        warnings.warn(
            f"column {name!r} looks like a row identifier (distinct integers) and is learned as a "
            f"variable; pass {hint} to leave it out",
            IdentifierColumnWarning,
            stacklevel=3,
        )
    d = tables[0].d
    n = sum(t.n for t in tables)
    where = display_name(tables[0].path) if len(tables) == 1 else f"{len(tables)} shards"
    if not whole:
        for t in tables:
            if t.n < d:
                warnings.warn(
                    f"{display_name(t.path)}: {t.n} rows for {d} variables (fewer rows than variables): this site's "
                    "own fit rests on the penalty alone",
                    SmallSampleWarning,
                    stacklevel=3,
                )
        return
    if n < d:
        warnings.warn(
            f"{where}: {n} rows in all for {d} variables (fewer rows than variables): the covariance is singular "
            "and the graph is not identified; add rows or choose fewer --columns",
            SmallSampleWarning,
            stacklevel=3,
        )
    elif n < TINY_ROWS:
        warnings.warn(
            f"{where}: only {n} rows in all: below {TINY_ROWS} rows chance correlations (about 2/√n = "
            f"{2 / math.sqrt(n):.2f}) reach the default edge threshold 0.3, so the graph is unreliable",
            SmallSampleWarning,
            stacklevel=3,
        )
    small = [t for t in tables if t.n < d]
    if n >= d and small and len(tables) > 1:
        t = min(small, key=lambda t: t.n)
        warnings.warn(
            f"{display_name(t.path)}: {t.n} rows for {d} variables (fewer rows than variables; "
            f"{len(small)} of {len(tables)} shards): that participant's own fit rests on the penalty alone",
            SmallSampleWarning,
            stacklevel=3,
        )


def _check_constant_columns(tables: Sequence[Table]) -> None:
    names = tables[0].names
    const = np.zeros((len(tables), len(names)), dtype=bool)
    for k, t in enumerate(tables):
        const[k, constant_columns(t.X)] = True
    everywhere = np.flatnonzero(const.all(axis=0))
    if everywhere.size:
        col = names[everywhere[0]]
        where = display_name(tables[0].path) if len(tables) == 1 else f"every shard ({display_name(tables[0].path)} …)"
        raise InputDataError(
            f"{where}: column {col!r} is constant in "
            + ("every row" if len(tables) == 1 else "every shard")
            + "; remove it, it carries no information about the graph"
        )
    for j in np.flatnonzero(const.any(axis=0)):
        files = [display_name(tables[k].path) for k in np.flatnonzero(const[:, j])]
        shown = ", ".join(files[:3]) + (" …" if len(files) > 3 else "")
        warnings.warn(
            f"column {names[j]!r} is constant in {shown} ({len(files)} of {len(tables)} shards); "
            "that site contributes zero variance for it, the run goes on",
            ConstantColumnWarning,
            stacklevel=3,
        )
