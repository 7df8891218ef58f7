"""Column kinds: continuous and categorical columns, part of the data's public shape.

A categorical column (sex, smoking status, a diagnosis, yes/no) holds levels, read as written. Learning
sees it as ``K − 1`` indicator columns (the first level, in sorted order, is the reference), so that the
sites' sum-shaped statistics (the pooled second moments of the expanded columns: the 1- and 2-way
contingency tables and the per-level means) carry everything the mixed score needs
(:mod:`bnsl_cli.solvers.mixed_score`). :class:`~bnsl_cli.column_kinds.ColumnKinds` is that shape: the variables in order, the
levels of each categorical one, and the expanded columns' names and blocks.

Which columns are categorical: the ones declared (``--categorical``) and, in a run without ``--dp``,
every column whose cells read as no number (:func:`text_columns_of`, from the first rows of each file).
In a non-private run the level sets of all sites are combined before learning (:func:`encode`). A column
with more levels than ``max_levels`` (an identifier, free text) or with one level only is refused,
naming it.
"""

from __future__ import annotations

import csv
import gzip
import io
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bnsl_cli.column_kinds import ColumnKinds
from bnsl_cli.errors import IdentifierColumnWarning, InputDataError, OptionError, ShardMismatchError
from bnsl_cli.io.csv_check import is_date
from bnsl_cli.io.table import MISSING, STDIN, Table, display_name

__all__ = ["MAX_LEVELS", "encode", "expand", "expand_for_plan", "site_table", "text_columns_of"]

#: The most levels a categorical column may have (``--max-levels``): more is an identifier or free text,
#: not a variable a graph of a few dozen nodes can use (each level is a column of the expanded data).
MAX_LEVELS = 20
#: How many rows of each file decide which columns hold text.
SNIFF_ROWS = 1000
#: Cells that mean "missing" in a text column: empty, and the reader's ``--na`` tokens (``NA``, ``None``, …;
#: :data:`bnsl_cli.io.table.MISSING`). A level spelled like one is a level only where it is declared so
#: (``encode``'s ``missing``; the command line's schema, to come).
_MISSING = frozenset(("",) + MISSING)


def _lines(path: Path, rows: int) -> list[str]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    out = []
    try:
        with opener(path, "rb") as fh:
            for raw in fh:
                out.append(raw.decode("utf-8-sig", "replace"))
                if len(out) > rows:
                    break
    except OSError:
        return []  # (the reader names the problem)
    return out


def text_columns_of(paths: Sequence, sep_of, decimal: str = ".") -> tuple[list, list]:
    """``(header, text columns)``: the first file's header and the columns whose cells, in the first
    :data:`SNIFF_ROWS` rows of some file, are all text (no cell reads as a number; missing cells
    aside). ``sep_of(path)``: the file's field separator. Standard input is not looked at (declare its
    columns with ``--categorical``)."""
    found: list = []
    first_header: list = []
    for p in paths:
        p = Path(p)
        if str(p) == STDIN or not p.exists():
            continue
        lines = _lines(p, SNIFF_ROWS)
        if len(lines) < 2:
            continue
        rows = list(csv.reader(io.StringIO("".join(lines)), delimiter=sep_of(p)))
        header, body = [h.strip() for h in rows[0]], rows[1:]
        first_header = first_header or header
        for j, name in enumerate(header):
            cells = [r[j].strip() for r in body if j < len(r)]
            cells = [c for c in cells if c not in _MISSING]
            if cells and all(_is_text(c, decimal) for c in cells) and name not in found:
                found.append(name)
    return first_header, found


def _is_text(cell: str, decimal: str) -> bool:
    """A word, not a number written some way (``1,5`` with a decimal comma, ``1e5``, ``inf`` are numbers:
    a file read with the wrong ``--decimal`` is the reader's error to name, not a categorical column) nor a
    date or time (the reader names those too, with ``--drop``)."""
    return any(ch.isalpha() for ch in cell) and not _is_number(cell, decimal) and not is_date(cell)


def _is_number(cell: str, decimal: str) -> bool:
    if decimal != ".":
        cell = cell.replace(decimal, ".")
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _complete_rows(t: Table, cat: Sequence[str], na_drop: bool, missing: Sequence[str]) -> np.ndarray:
    """The rows of ``t`` without a missing cell in its categorical columns ``cat`` (held as text in
    ``t.extra``); a missing cell is an error naming file, row and column unless ``na_drop``."""
    keep = np.ones(t.n, dtype=bool)
    for c in cat:
        miss = np.isin(np.char.strip(np.asarray(t.extra[c], dtype=str)), list(missing))
        if miss.any():
            if not na_drop:
                row = int(np.flatnonzero(miss)[0])
                raise InputDataError(
                    f"{display_name(t.path)}: column {c!r} (categorical) has a missing cell in data row {row + 1}; "
                    "fill it, or --na drop-rows leaves such rows out"
                )
            keep &= ~miss
    return keep


def encode(tables: Sequence[Table], categorical: Sequence[str], max_levels: int = MAX_LEVELS,
           na_drop: bool = False, order: Optional[Sequence[str]] = None,
           missing: Sequence[str] = tuple(_MISSING)) -> tuple[list, ColumnKinds]:
    """The tables with their categorical columns (held as text in ``table.extra``, read with the
    reader's ``keep``) as indicator columns, and the shape: the variables in ``order`` (a header's order;
    names it lacks follow, continuous first), levels combined over every table (sorted). A missing cell in a categorical column is an
    error naming file, row and column, or (``na_drop``) its row is left out. Refused, naming the column:
    more than ``max_levels`` levels, one level only. ``missing``: the cells that mean "missing" (every
    other text is a level)."""
    cat = [c for c in categorical]
    if not cat:
        raise ValueError("encode needs at least one categorical column")
    first = tables[0]
    present = list(first.names) + cat
    order = [n for n in (order or ()) if n in present]
    order += [n for n in present if n not in order]
    levels: dict = {}
    kept_rows = []
    for t in tables:
        keep = _complete_rows(t, cat, na_drop, missing)
        kept_rows.append(keep)
        for c in cat:
            col = np.char.strip(np.asarray(t.extra[c], dtype=str))[keep]
            levels.setdefault(c, set()).update(np.unique(col).tolist())
    per_site: dict = {c: [] for c in cat}
    for t, keep in zip(tables, kept_rows):
        for c in cat:
            per_site[c].append(set(np.unique(np.char.strip(np.asarray(t.extra[c], dtype=str))[keep]).tolist()))
    for c in cat:
        sets = per_site[c]
        if len(sets) > 1 and sum(len(x) for x in sets) == len(set().union(*sets)):
            warnings.warn(
                f"column {c!r} has no level in common between the sites (each of its {len(levels[c])} levels occurs "
                f"at one site only): it names the site rather than measuring a variable; pass --drop {c} to leave it out",
                IdentifierColumnWarning, stacklevel=3,
            )
    for c in cat:
        k = len(levels[c])
        if k > max_levels:
            raise OptionError(
                f"column {c!r} has {k} levels, more than --max-levels {max_levels}: an identifier or free text is "
                f"not a variable to learn (leave it out with --drop {c}, or raise --max-levels)"
            )
        if k < 2:
            only = next(iter(levels[c])) if levels[c] else ""
            raise InputDataError(
                f"column {c!r} has one level ({only!r}) in every row: it carries no information about the graph "
                f"(leave it out with --drop {c})"
            )
    kinds = ColumnKinds(tuple(order), tuple((n, tuple(sorted(levels[n]))) for n in order if n in levels))
    return [expand(t, kinds, keep) for t, keep in zip(tables, kept_rows)], kinds


def expand(t: Table, kinds: ColumnKinds, keep: Optional[np.ndarray] = None) -> Table:
    """The table ``t`` (its categorical columns as text in ``t.extra``) as the expanded data of ``kinds``:
    its variables in that order, a categorical one as its indicator columns against ``kinds``' levels;
    ``keep``: the rows used (all when ``None``)."""
    keep = np.ones(t.n, dtype=bool) if keep is None else keep
    cat = kinds.categorical
    cols = []
    for name in kinds.names:
        if name in cat:
            col = np.char.strip(np.asarray(t.extra[name], dtype=str))[keep]
            cols.extend((col == lev).astype(float)[:, None] for lev in cat[name][1:])
        else:
            cols.append(t.X[keep, t.names.index(name)][:, None])
    X = np.hstack(cols) if cols else np.zeros((int(keep.sum()), 0))
    extra = {k: v for k, v in t.extra.items() if k not in cat}
    return replace(t, X=np.ascontiguousarray(X), names=kinds.expanded_names(), extra=extra,
                   dropped_rows=t.dropped_rows + int((~keep).sum()), columns=kinds)


def site_table(table: Table, categorical: Sequence[str], max_levels: int = MAX_LEVELS, na_drop: bool = False,
               order: Optional[Sequence[str]] = None, missing: Sequence[str] = tuple(_MISSING)) -> tuple:
    """A site's own table for a networked run (``bnsl join``): ``(table, variables, levels)`` — the rows
    without a missing categorical cell (refused naming file, row and column, or with ``na_drop`` left out),
    the categorical columns kept as text, the variables in ``order`` (a header's) and this site's levels of
    each categorical column (sorted). More than ``max_levels`` levels is refused here, before any level
    leaves the site (an identifier's values would); one level is fine (the sites' union decides). The
    site expands its rows against the plan's levels once a plan arrives (:func:`expand_for_plan`)."""
    cat = list(categorical)
    keep = _complete_rows(table, cat, na_drop, missing)
    levels = {}
    for c in cat:
        lv = sorted(np.unique(np.char.strip(np.asarray(table.extra[c], dtype=str))[keep]).tolist())
        if len(lv) > max_levels:
            raise OptionError(
                f"{display_name(table.path)}: column {c!r} has {len(lv)} levels, more than --max-levels {max_levels}: "
                f"an identifier or free text is not a variable to learn, and its values would be sent to the "
                f"coordinator (leave it out with --drop {c}, or raise --max-levels)"
            )
        levels[c] = lv
    present = list(table.names) + cat
    variables = [n for n in (order or ()) if n in present]
    variables += [n for n in present if n not in variables]
    extra = {k: (np.char.strip(np.asarray(v, dtype=str))[keep] if k in levels else v) for k, v in table.extra.items()}
    kept = replace(table, X=np.ascontiguousarray(table.X[keep]), extra=extra,
                   dropped_rows=table.dropped_rows + int((~keep).sum()))
    return kept, tuple(variables), levels


def expand_for_plan(table: Table, kinds: ColumnKinds) -> Table:
    """A site's table (:func:`site_table`) as the expanded data of the plan's ``kinds``. A
    :class:`~bnsl_cli.errors.ShardMismatchError` when the plan takes a column as categorical that this site
    holds as numbers (or the other way round), or lacks a level this site holds."""
    where = display_name(table.path)
    cat = kinds.categorical
    for name in kinds.names:
        if name in cat:
            if name not in table.extra:
                held = "as numbers" if name in table.names else "not at all"
                raise ShardMismatchError(f"{where}: the plan takes column {name!r} as categorical; this site holds it "
                                         f"{held} (bnsl join --categorical {name})")
            have = set(np.unique(np.asarray(table.extra[name], dtype=str)).tolist())
            lacking = sorted(have - set(cat[name]))
            if lacking:
                raise ShardMismatchError(f"{where}: the plan's levels of column {name!r} lack {lacking[0]!r}, which this "
                                         "site holds")
        elif name not in table.names:
            held = "as categorical" if name in table.extra else "not at all"
            raise ShardMismatchError(f"{where}: the plan takes column {name!r} as continuous; this site holds it {held}")
    return expand(table, kinds)
