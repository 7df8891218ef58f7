"""Splitting the rows of one table into participant shards.

Every function returns one array of row indices (0-based, into the data rows of the table) per
shard, each sorted ascending, such that their concatenation holds every row exactly once and no
shard is empty. Modes:

- ``random`` (default): a seeded random permutation cut into ``P`` shards of sizes
  ``floor(n/P)`` or ``ceil(n/P)`` (the first ``n mod P`` shards get the extra row);
- ``contiguous``: ``P`` consecutive blocks in file order, with the same sizes as ``random``;
- ``sizes``: shard sizes from proportions ``q_1 … q_P`` (``sum q = 1 ± 1e-6``) by largest-remainder
  rounding of ``q_p · n`` (ties to the earlier shard); rows assigned at random as in ``random``;
- ``group``: one shard per distinct value of a column, shards ordered by value (numerically when
  every value is a number, else as text).
"""

from __future__ import annotations

import csv
import gzip
import io
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.columns import as_point, is_number
from bnsl_cli.io.csv_reader import read_table
from bnsl_cli.io.graphs import format_float
from bnsl_cli.io.table import MISSING, ReadOptions, resolve_sep

__all__ = [
    "MODES",
    "SplitResult",
    "equal_sizes",
    "largest_remainder_sizes",
    "group_indices",
    "split_indices",
    "split_table_file",
    "text_columns",
]

MODES = ("random", "contiguous", "sizes", "group")


def equal_sizes(n: int, participants: int) -> np.ndarray:
    """Sizes ``floor(n/P)`` or ``ceil(n/P)`` summing to ``n``; the first ``n mod P`` are larger."""
    _check_count(n, participants)
    q, r = divmod(n, participants)
    return np.array([q + 1] * r + [q] * (participants - r), dtype=np.int64)


def _check_count(n: int, participants: int) -> None:
    if participants < 1:
        raise ValueError(f"participants must be >= 1 (got {participants})")
    if participants > n:
        raise InputDataError(
            f"cannot split {n} row(s) into {participants} non-empty shards; use at most {n} participants"
        )


def largest_remainder_sizes(n: int, proportions: Sequence[float]) -> np.ndarray:
    """Integer sizes summing to ``n`` closest to ``q_p · n`` (largest-remainder / Hamilton method).

    Each shard first gets ``floor(q_p · n)`` rows; the ``n - sum floor`` left over go one each to
    the shards with the largest fractional parts (ties to the earlier shard). Raises
    :class:`ValueError` for proportions that are not positive or do not sum to 1 ± 1e-6, and
    :class:`~bnsl_cli.errors.InputDataError` if a shard would get no row.
    """
    q = np.asarray(proportions, dtype=float)
    if q.ndim != 1 or q.size == 0:
        raise ValueError("give at least one proportion")
    if not np.all(np.isfinite(q)) or np.any(q <= 0):
        raise ValueError("every proportion must be a number > 0")
    if abs(q.sum() - 1.0) > 1e-6:
        raise ValueError(f"proportions must sum to 1 (they sum to {q.sum():.6g})")
    _check_count(n, q.size)
    quota = q / q.sum() * n
    base = np.floor(quota).astype(np.int64)
    left = int(n - base.sum())
    frac = quota - base
    order = np.lexsort((np.arange(q.size), -frac))  # largest fraction first, then earlier shard
    base[order[:left]] += 1
    if np.any(base == 0):
        k = int(np.flatnonzero(base == 0)[0])
        raise InputDataError(
            f"proportion {q[k]:g} of {n} rows gives shard {k + 1} no row; use larger proportions or more data"
        )
    return base


def _sort_key_values(values: np.ndarray) -> np.ndarray:
    """Distinct values sorted numerically when all parse as finite numbers, else as text."""
    uniq = np.unique(values.astype(str))
    try:
        nums = np.array([float(v) for v in uniq])
    except ValueError:
        return uniq
    if not np.all(np.isfinite(nums)):
        return uniq
    return uniq[np.lexsort((uniq, nums))]


def group_indices(groups: Sequence) -> tuple[list[str], list[np.ndarray]]:
    """One shard per distinct value of ``groups``: (sorted values, row indices per value)."""
    g = np.asarray(groups).astype(str)
    values = _sort_key_values(g)
    return [str(v) for v in values], [np.flatnonzero(g == v) for v in values]


def _permutation_chunks(n: int, sizes: np.ndarray, seed) -> list[np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    bounds = np.cumsum(sizes)[:-1]
    return [np.sort(chunk) for chunk in np.split(perm, bounds)]


def split_indices(
    n: int,
    participants: int | None = None,
    *,
    mode: str = "random",
    sizes: Sequence[float] | None = None,
    groups: Sequence | None = None,
    seed: int | None = None,
) -> list[np.ndarray]:
    """Row indices of each shard (see the module docstring for the modes).

    ``participants`` may be omitted for ``sizes`` (``len(sizes)``) and ``group`` (the number of
    distinct values); if given it must agree.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    if mode == "group":
        if groups is None:
            raise ValueError("mode 'group' needs the group values")
        if len(groups) != n:
            raise ValueError(f"{len(groups)} group values for {n} rows")
        values, idx = group_indices(groups)
        if participants is not None and participants != len(values):
            raise InputDataError(
                f"the group column has {len(values)} distinct value(s), but {participants} participants "
                "were asked for; drop --participants or make them agree"
            )
        return idx
    if mode == "sizes":
        if sizes is None:
            raise ValueError("mode 'sizes' needs proportions")
        if participants is not None and participants != len(sizes):
            raise ValueError(f"{len(sizes)} proportions given for {participants} participants")
        return _permutation_chunks(n, largest_remainder_sizes(n, sizes), seed)
    if participants is None:
        raise ValueError(f"mode {mode!r} needs the number of participants")
    counts = equal_sizes(n, participants)
    if mode == "contiguous":
        return [np.arange(a, b) for a, b in zip(np.r_[0, np.cumsum(counts)[:-1]], np.cumsum(counts))]
    return _permutation_chunks(n, counts, seed)


@dataclass(frozen=True)
class SplitResult:
    """Shards of one CSV file: ``header`` (the columns written), ``indices[p]`` (0-based data-row
    indices of shard ``p``), ``texts[p]`` (the CSV text of shard ``p``), ``groups[p]`` (the group
    value of shard ``p`` in ``group`` mode, else ``None``)."""

    header: tuple[str, ...]
    indices: tuple[np.ndarray, ...]
    texts: tuple[str, ...]
    groups: tuple[str | None, ...]
    n_rows: int
    #: the columns copied as text (besides the group column), and the rows --na drop-rows left out
    text_columns: tuple[str, ...] = ()
    dropped_rows: int = 0


def _raw_rows(text: str, sep: str = ",") -> list[list[str]]:
    rows = csv.reader(io.StringIO(text.lstrip("\r\n")), delimiter=sep)
    return [[c.strip() for c in r] for r in rows if r and any(c.strip() for c in r)]


def _csv_text(rows, sep: str = ",") -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n", delimiter=sep).writerows(rows)
    return buf.getvalue()


def text_columns(header: Sequence[str], body: Sequence[Sequence[str]], decimal: str = ".") -> list[str]:
    """The columns that hold text: every cell that is not missing (empty, ``NA``, … :data:`MISSING`)
    reads as no number (``'Adelie'``, ``'F'``, ``'yes'``). A column with numbers and text is not one of
    them: its text cells are errors the reader names (``'oops' is not a number``)."""
    out = []
    for j, name in enumerate(header):
        cells = [r[j] for r in body if j < len(r) and r[j] != "" and r[j] not in MISSING]
        if cells and not any(is_number(as_point(c, decimal)) for c in cells):
            out.append(name)
    return out


def split_table_file(
    path: str | Path,
    participants: int | None = None,
    *,
    mode: str = "random",
    sizes: Sequence[float] | None = None,
    by: str | None = None,
    seed: int | None = None,
    sep: str | None = None,
    encoding: str = "utf-8",
    decimal: str = ".",
    options: ReadOptions | None = None,
) -> SplitResult:
    """Read and validate ``path`` as ``bnsl learn`` reads it (:func:`bnsl_cli.io.csv_reader.read_table`
    with ``options``: ``--columns``, ``--drop``, ``--index-col``, ``--na``, ``--header``, ``--encoding``,
    ``--decimal``; without ``options``, ``encoding`` and ``decimal``) and split its rows.
    ``sep``: its field separator (default: detected). The shards are UTF-8, comma-separated, with ``.``
    as the decimal mark.

    Values are written with their original text (a row's cells are copied, only surrounding spaces
    removed), so every value reads back exactly. Columns: the ones the options select, in the file's
    order — text columns (:func:`text_columns`: sex, species, yes/no) kept as text, and the
    ``--index-col`` column kept too (the shards are read with the same options); in ``group`` mode the
    ``by`` column (numbers or text) is dropped. ``--na drop-rows`` drops the rows with a missing value in
    a numeric column before the split (``dropped_rows``); text cells are copied as they are. The input
    file is never modified.
    """
    path = Path(path)
    if mode == "group" and not by:
        raise ValueError("mode 'group' needs a column name (--by)")
    if by and mode != "group":
        raise ValueError("a group column is only used in mode 'group'")
    opts = (options if options is not None else ReadOptions(encoding=encoding, decimal=decimal)).check()
    try:  # read once: parsed below and copied row by row into the shards
        stored = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError:
        stored = None  # the reader names the problem
    raw, delim = None, None
    text_cols: list[str] = []
    if stored is not None:
        try:
            delim = resolve_sep(path, sep)
            raw = _raw_rows(_decoded(path, stored, opts), delim)
        except (ValueError, UnicodeDecodeError, csv.Error):
            raw = None  # the reader names the problem
        if raw and opts.header != "no" and not all(is_number(as_point(c, opts.decimal)) for c in raw[0]):
            header0 = [h.strip() for h in raw[0]]
            chosen = set(opts.columns) if opts.columns is not None else set(header0)
            skip = set(opts.drop) | {by, opts.index_col}
            text_cols = [c for c in text_columns(header0, raw[1:], opts.decimal) if c in chosen and c not in skip]
    keep = list(dict.fromkeys([c for c in (by, opts.index_col, *text_cols) if c]))
    table = read_table(path, keep=keep or None, check_constant=False, sep=sep, data=stored,
                       options=replace(opts, index_col=None) if opts.index_col else opts)
    delim = table.sep or delim or resolve_sep(path, sep)
    n = table.n
    groups = None
    if by:
        groups = table.extra[by]
        empty = np.flatnonzero(np.char.str_len(groups.astype(str)) == 0)
        if empty.size:
            raise InputDataError(
                f"{path}: column {by!r} is empty in {empty.size} row(s) (first: data row {empty[0] + 1}); "
                "every row needs a group value"
            )
    indices = split_indices(n, participants, mode=mode, sizes=sizes, groups=groups, seed=seed)

    if raw is None:
        raw = _raw_rows(_decoded(path, stored, opts), delim)
    header = [h.strip() for h in raw[0]]
    body = raw[1:]
    used = set(table.names) | set(keep)
    keep_cols = [k for k, h in enumerate(header) if h != by and h in used]
    numeric = [k for k in keep_cols if header[k] in table.names]
    if table.decimal != ".":  # the shards' numbers use "." (text columns are left as they are)
        body = [[c.replace(table.decimal, ".") if k in numeric else c for k, c in enumerate(r)] for r in body]
    if table.dropped_rows:  # --na drop-rows: the rows the reader kept, in order
        body = [r for r in body if not any(k < len(r) and (r[k] == "" or r[k] in MISSING) for k in numeric)]
    out_header = [header[k] for k in keep_cols]
    exact = len(body) == n and all(len(r) == len(header) for r in body)
    col_of = {name: j for j, name in enumerate(table.names)}
    if exact:  # double-check on a sample that the text rows are the parsed rows
        sample = np.unique(np.r_[0, n - 1, np.linspace(0, n - 1, num=min(n, 50)).astype(int)])
        for i in sample:
            vals = [float(body[i][k]) for k in numeric]
            if not np.array_equal(np.array(vals), table.X[i, [col_of[header[k]] for k in numeric]]):
                exact = False
                break
    texts = []
    for idx in indices:
        if exact:
            rows = ([body[i][k] for k in keep_cols] for i in idx)
        else:
            rows = ([format_float(table.X[i, col_of[header[k]]]) if header[k] in col_of else str(table.extra[header[k]][i])
                     for k in keep_cols] for i in idx)
        texts.append(_csv_text([out_header, *rows]))  # shards are always comma-separated
    if by:
        values, _ = group_indices(groups)
        shard_groups = tuple(values)
    else:
        shard_groups = (None,) * len(indices)
    return SplitResult(tuple(out_header), tuple(indices), tuple(texts), shard_groups, n,
                       tuple(c for c in text_cols if c != by), int(table.dropped_rows))


def _decoded(path: Path, stored: bytes, opts: ReadOptions) -> str:
    if path.name.lower().endswith(".gz") or stored[:2] == b"\x1f\x8b":
        stored = gzip.decompress(stored)
    return stored.decode("utf-8-sig" if opts.encoding == "utf-8" else opts.encoding)
