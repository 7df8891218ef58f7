"""What a data reader is asked for and what it gives: :class:`ReadOptions` (which columns and rows
of a file are used, how its text is read), the field separator (:func:`resolve_sep`), :class:`Table`
(the numbers read from one file, with their column names) and the names the reader's modules share.

A data file is a CSV (``,``), TSV (``.tsv``: tab) or either gzip-compressed (``.gz``) with one
header row of column (variable) names and one row per sample; every cell is a finite number (``.``
as the decimal mark). ``-`` is standard input. Every problem is reported as an
:class:`~bnsl_cli.errors.InputDataError` whose message names the file, and where it applies the row
(the 1-based line number in the file) and the column.

The reader, by job: :mod:`bnsl_cli.io.csv_source` (the bytes of one input: files, standard input,
gzip, encodings, hash and progress), :mod:`bnsl_cli.io.columns` (the header and the columns used),
:mod:`bnsl_cli.io.csv_check` (the strict checker that names the first bad cell),
:mod:`bnsl_cli.io.csv_reader` (:func:`~bnsl_cli.io.csv_reader.read_table`: one file) and
:mod:`bnsl_cli.io.shards` (:func:`~bnsl_cli.io.shards.read_shards`: every participant's file, their
consistency and the warnings about the sample).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from bnsl_cli.errors import OptionError

__all__ = [
    "Table",
    "ReadOptions",
    "MISSING",
    "ReadProgress",
    "resolve_sep",
    "STDIN",
    "display_name",
    "sep_name",
]

#: The path that stands for standard input.
STDIN = "-"

#: ``progress(bytes_read, total_bytes)``: bytes read so far over every file of one call and their
#: total (``None`` when unknown, e.g. standard input).
ReadProgress = Callable[[int, Optional[int]], None]

#: Cells ``--na drop-rows`` reads as a missing value (besides an empty cell).
MISSING = ("NA", "N/A", "n/a", "na", "NaN", "nan", "NAN", "null", "NULL", "None", "?")


@dataclass(frozen=True)
class ReadOptions:
    """Which columns and rows of a data file are used, and how its text is read.

    ``columns``: only these columns, in this order; ``drop``: every column but these;
    ``index_col``: a row identifier (any text), left out; ``na``: ``"error"`` (a missing value is
    an error) or ``"drop-rows"`` (a row with a missing value — an empty cell or one of
    :data:`MISSING` — in a selected column is dropped; missing values in left-out columns do not
    count); ``header``: ``"auto"`` (the first line is the header unless it holds only numbers;
    a first line of integers over rows with decimals is a header of numeric names, such as gene
    ids), ``"yes"`` (always; numeric names accepted) or ``"no"`` (the first line is data; columns
    are named V1, V2, …); ``encoding``: the text encoding (UTF-8 by default)."""

    columns: Optional[tuple] = None
    drop: tuple = ()
    index_col: Optional[str] = None
    na: str = "error"
    header: str = "auto"
    encoding: str = "utf-8"

    NA_CHOICES = ("error", "drop-rows")
    HEADER_CHOICES = ("auto", "yes", "no")

    def check(self) -> "ReadOptions":
        """Raise :class:`OptionError` for options that contradict each other; return self with
        the encoding's canonical name."""
        if self.na not in self.NA_CHOICES:
            raise OptionError(f"--na must be one of {', '.join(self.NA_CHOICES)} (got {self.na!r})")
        if self.header not in self.HEADER_CHOICES:
            raise OptionError(f"--header must be one of {', '.join(self.HEADER_CHOICES)} (got {self.header!r})")
        try:
            enc = codecs.lookup(self.encoding).name
        except LookupError:
            raise OptionError(f"--encoding {self.encoding!r}: unknown encoding (e.g. utf-8, latin-1, cp1252)") from None
        for opt, names in (("--columns", self.columns or ()), ("--drop", self.drop)):
            if any(not n for n in names):
                raise OptionError(f"{opt}: an empty column name (check the commas)")
            dup = sorted({n for n in names if list(names).count(n) > 1})
            if dup:
                raise OptionError(f"{opt} names {dup[0]!r} twice")
        if self.columns is not None:
            both = [n for n in self.columns if n in self.drop]
            if both:
                raise OptionError(f"{both[0]!r} is both in --columns and in --drop")
            if self.index_col is not None and self.index_col in self.columns:
                raise OptionError(f"--index-col {self.index_col!r} is also in --columns; an index column is not a variable")
            if len(self.columns) < 2:
                raise OptionError("--columns needs at least two columns (a graph needs two variables)")
        return replace(self, encoding="utf-8" if enc in ("utf-8", "utf-8-sig") else enc,
                       columns=None if self.columns is None else tuple(self.columns), drop=tuple(self.drop))

    def to_dict(self) -> dict:
        return {"columns": None if self.columns is None else list(self.columns), "drop": list(self.drop),
                "index_col": self.index_col, "na": self.na, "header": self.header, "encoding": self.encoding}


@dataclass(frozen=True)
class Table:
    """Numeric data read from one CSV: ``X`` is ``n × d`` with columns ``names``.

    ``sha256`` is the hex digest of the file's bytes as stored (``None`` for tables not read from a
    file)."""

    X: np.ndarray
    names: tuple[str, ...]
    path: Path
    extra: dict = field(default_factory=dict, compare=False)
    sha256: Optional[str] = field(default=None, compare=False)
    #: rows ``--na drop-rows`` dropped (they are not in ``X``)
    dropped_rows: int = field(default=0, compare=False)
    #: the file's first column had an empty name: row labels, left out (``columns.has_row_labels``)
    row_labels: bool = field(default=False, compare=False)
    #: ``--drop`` names this file does not have (only when the reader was told to pass them over)
    absent_drop: tuple = field(default=(), compare=False)

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])


# ---------------------------------------------------------------------------------------------
# how messages name a file and a separator; the separator of a file


def display_name(path: Path) -> str:
    """How messages name ``path``: ``<stdin>`` for standard input, else the path as given."""
    return "<stdin>" if str(path) == STDIN else str(path)


def resolve_sep(path: str | Path, sep: Optional[str] = None) -> str:
    """The field separator of ``path``: ``sep`` if given (``tab`` or ``\\t`` for a tab), else tab for
    ``.tsv``/``.tab`` (also gzipped) and ``,`` otherwise. Raises ``ValueError`` for a separator
    that cannot be one (empty, several characters, a quote, a digit, ``.``, ``-``, ``+``, ``e``)."""
    if sep is None:
        name = Path(path).name.lower()
        if name.endswith(".gz"):
            name = name[:-3]
        return "\t" if name.endswith((".tsv", ".tab")) else ","
    if sep.lower() in ("tab", "\\t"):
        return "\t"
    if len(sep) != 1 or sep in "\"'\r\n.-+eE" or sep.isdigit() or sep.isalpha():
        raise ValueError(
            f"--sep must be one character that cannot be part of a number, such as , ; | or tab (got {sep!r})"
        )
    return sep


def sep_name(sep: str) -> str:
    """How messages name the separator ``sep``: ``tab`` or the character quoted."""
    return "tab" if sep == "\t" else repr(sep)
