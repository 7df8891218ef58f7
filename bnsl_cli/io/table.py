"""What a data reader is asked for and what it gives: :class:`ReadOptions` (which columns and rows
of a file are used, how its text is read), the field separator (:func:`resolve_sep`), :class:`Table`
(the numbers read from one file, with their column names) and the names the reader's modules share.

A data file is a CSV with one header row of column (variable) names and one row per sample, its fields
separated by ``,``, ``;``, a tab or ``|`` (each file's own, detected; ``--sep`` forces one), possibly
gzip-compressed (``.gz``); every cell is a finite number (``.`` as the decimal mark, or ``,`` with
``--decimal ,``). ``-`` is standard input. Every problem is reported as an
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


def split_names(text: Optional[str]) -> Optional[tuple]:
    """``"a, b,c"`` → ``("a", "b", "c")`` (None stays None): how ``--columns``/``--drop`` lists are read
    (``learn``, ``split``, ``serve``). Names keep inner spaces."""
    if text is None:
        return None
    return tuple(p.strip() for p in text.split(","))


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
    are named V1, V2, …); ``encoding``: the text encoding (UTF-8 by default); ``decimal``: the decimal
    mark of the numbers (``.`` or ``,``; with ``,`` a ``.`` in a number is an error; a file separated by
    ``,`` keeps ``.``, so one ``--decimal ,`` reads a ``;`` site with ``1,5`` beside ``,`` sites);
    ``sep``: the field separator of every file (``--sep``), or ``None``: each file's own, detected
    (:func:`~bnsl_cli.io.columns.detect_separator`). ``separators`` is a record, not a choice: the
    separator each file of a call was read with, when one is not its extension's default
    (:meth:`used`), so a report says how its shards were read."""

    columns: Optional[tuple] = None
    drop: tuple = ()
    index_col: Optional[str] = None
    na: str = "error"
    header: str = "auto"
    encoding: str = "utf-8"
    decimal: str = "."
    sep: str | None = None
    separators: tuple = ()

    NA_CHOICES = ("error", "drop-rows")
    HEADER_CHOICES = ("auto", "yes", "no")
    DECIMAL_CHOICES = (".", ",")

    def check(self) -> "ReadOptions":
        """Raise :class:`OptionError` for options that contradict each other; return self with
        the encoding's canonical name."""
        if self.na not in self.NA_CHOICES:
            raise OptionError(f"--na must be one of {', '.join(self.NA_CHOICES)} (got {self.na!r})")
        if self.header not in self.HEADER_CHOICES:
            raise OptionError(f"--header must be one of {', '.join(self.HEADER_CHOICES)} (got {self.header!r})")
        if self.decimal not in self.DECIMAL_CHOICES:
            raise OptionError(f"--decimal must be . or , (got {self.decimal!r})")
        sep = self.sep
        if sep is not None:
            try:
                sep = resolve_sep("", sep)
            except ValueError as exc:
                raise OptionError(str(exc)) from None
            if sep == self.decimal:
                raise OptionError(f"--sep {sep_name(sep)} and --decimal {self.decimal} cannot be the same character")
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
                       columns=None if self.columns is None else tuple(self.columns), drop=tuple(self.drop), sep=sep,
                       separators=tuple(self.separators))

    def used(self, tables) -> ReadOptions:
        """These options with ``separators``: the separator each of ``tables`` (in order) was read with,
        recorded only when some file's is not its extension's default (so options left at their
        defaults on files read the default way stay equal to ``ReadOptions()``)."""
        seps = tuple(getattr(t, "sep", None) or resolve_sep(t.path) for t in tables)
        if self.sep is not None or all(s == resolve_sep(t.path) for s, t in zip(seps, tables)):
            seps = ()
        return replace(self, separators=seps)

    def to_dict(self) -> dict:
        out = {"columns": None if self.columns is None else list(self.columns), "drop": list(self.drop),
               "index_col": self.index_col, "na": self.na, "header": self.header, "encoding": self.encoding}
        if self.decimal != "." or self.sep is not None or self.separators:  # earlier reports stay as they were
            out.update(decimal=self.decimal, sep=self.sep, separators=list(self.separators))
        return out

    @classmethod
    def from_dict(cls, entry: dict) -> ReadOptions:
        """The options a report's ``input`` entry (:meth:`to_dict`, with other keys) records; keys it
        lacks keep their defaults (reports written before they existed). Not checked."""
        kw = {}
        for f in ("index_col", "na", "header", "encoding", "decimal", "sep"):
            if isinstance(entry.get(f), str):
                kw[f] = entry[f]
        if isinstance(entry.get("columns"), list):
            kw["columns"] = tuple(str(c) for c in entry["columns"])
        for f in ("drop", "separators"):
            if isinstance(entry.get(f), list):
                kw[f] = tuple(str(c) for c in entry[f])
        return cls(**kw)


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
    #: the field separator the file was read with (given, or detected) and the decimal mark of its numbers
    sep: str | None = field(default=None, compare=False)
    decimal: str = field(default=".", compare=False)
    #: the variables' kinds when some are categorical (:class:`bnsl_cli.io.kinds.ColumnKinds`): ``X``
    #: then holds their indicator columns (``names`` are the expanded ones)
    columns: Optional[object] = field(default=None, compare=False)

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
