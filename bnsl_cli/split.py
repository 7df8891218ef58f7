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
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.csv_reader import read_table
from bnsl_cli.io.graphs import format_float
from bnsl_cli.io.table import ReadOptions, resolve_sep

__all__ = [
    "MODES",
    "SplitResult",
    "equal_sizes",
    "largest_remainder_sizes",
    "group_indices",
    "split_indices",
    "split_table_file",
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


def _raw_rows(text: str, sep: str = ",") -> list[list[str]]:
    rows = csv.reader(io.StringIO(text.lstrip("\r\n")), delimiter=sep)
    return [[c.strip() for c in r] for r in rows if r and any(c.strip() for c in r)]


def _csv_text(rows, sep: str = ",") -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n", delimiter=sep).writerows(rows)
    return buf.getvalue()


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
) -> SplitResult:
    """Read and validate ``path`` (see :func:`bnsl_cli.io.data.read_table`) and split its rows.
    ``encoding``: the text encoding of ``path``; the shards are always written as UTF-8.
    ``sep``: its field separator (default: detected); ``decimal``: the decimal mark of its numbers
    (the shards are comma-separated with ``.``: a decimal comma is written as a point).

    Values are written with their original text (a row's cells are copied, only surrounding
    spaces removed), so every value reads back exactly; the header names are kept, and in
    ``group`` mode the ``by`` column is dropped. The input file is never modified.
    """
    path = Path(path)
    if mode == "group" and not by:
        raise ValueError("mode 'group' needs a column name (--by)")
    if by and mode != "group":
        raise ValueError("a group column is only used in mode 'group'")
    keep = [by] if by else None
    try:  # read once: parsed below and copied row by row into the shards
        stored = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError:
        stored = None  # the reader names the problem
    opts = ReadOptions(encoding=encoding, decimal=decimal).check()
    table = read_table(path, keep=keep, check_constant=False, sep=sep, data=stored, options=opts)
    delim = table.sep or resolve_sep(path, sep)
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

    if path.name.lower().endswith(".gz") or stored[:2] == b"\x1f\x8b":
        stored = gzip.decompress(stored)
    text = stored.decode("utf-8-sig" if opts.encoding == "utf-8" else opts.encoding)
    raw = _raw_rows(text, delim)
    header = [h.strip() for h in raw[0]]
    if table.decimal != ".":  # the shards' numbers use "." (the group column's text is left as it is)
        raw = [raw[0]] + [[c if header[k:k + 1] == [by] else c.replace(table.decimal, ".") for k, c in enumerate(r)]
                          for r in raw[1:]]
    body = raw[1:]
    keep_cols = [k for k, h in enumerate(header) if h != by]
    out_header = [header[k] for k in keep_cols]
    exact = len(body) == n and all(len(r) == len(header) for r in body)
    if exact:  # double-check on a sample that the text rows are the parsed rows
        sample = np.unique(np.r_[0, n - 1, np.linspace(0, n - 1, num=min(n, 50)).astype(int)])
        for i in sample:
            vals = [float(body[i][k]) for k in keep_cols]
            if not np.array_equal(np.array(vals), table.X[i]):
                exact = False
                break
    texts = []
    for idx in indices:
        if exact:
            rows = ([body[i][k] for k in keep_cols] for i in idx)
        else:
            rows = ([format_float(v) for v in table.X[i]] for i in idx)
        texts.append(_csv_text([out_header, *rows]))  # shards are always comma-separated
    if by:
        values, _ = group_indices(groups)
        shard_groups = tuple(values)
    else:
        shard_groups = (None,) * len(indices)
    return SplitResult(tuple(out_header), tuple(indices), tuple(texts), shard_groups, n)
