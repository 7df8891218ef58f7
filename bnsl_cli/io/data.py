"""Reading participant data: one validation layer for every subcommand that reads CSV data.

A data file is a CSV (``,``), TSV (``.tsv``: tab) or either gzip-compressed (``.gz``) with one
header row of column (variable) names and one row per sample; every cell is a finite number (``.``
as the decimal mark). ``-`` is standard input. Every problem is reported as an
:class:`~bnsl_cli.errors.InputDataError` whose message names the file, and where it applies the row
(the 1-based line number in the file) and the column.

How a file is read (one pass over its bytes, memory about one float64 copy of the data):

- the bytes are read once, in blocks; the SHA-256 of the file's bytes (as stored, i.e. compressed
  for ``.gz``) is computed from the same blocks, and a progress callback sees the bytes read;
- the header line is parsed here (so duplicate names are never renamed by the parser), the rest is
  parsed by pandas' C parser in chunks of rows straight into one preallocated ``n × d`` float64
  array (its row count estimated from the file size, grown if needed, trimmed at the end);
- validation is vectorised per chunk (finite values; the parser rejects text cells, missing values
  and rows with extra fields); only a file that fails — or whose bytes hold a token the fast path
  cannot judge (``_``, ``true``/``false`` words) — is read again by the slow, strict checker, which
  names the line and column of the first bad cell;
- a small input (at most ``SMALL_INPUT_BYTES`` bytes over all files of one call, uncompressed, no text
  columns) is parsed by numpy's C ``loadtxt`` instead: slower per byte than pandas' parser, but
  importing pandas costs more than parsing that much text. It only takes a file whose every byte
  is ASCII and every value finite, with the header's number of fields on every row; anything else
  (blank lines with spaces, a bad cell, …) goes the pandas way above, so what is accepted and every
  message are those of the pandas path. Both parsers round correctly: the same text gives the
  same float64 values.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import hashlib
import io
import math
import os
import re
import sys
import warnings
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from bnsl_cli.errors import (
    ConstantColumnWarning,
    IdentifierColumnWarning,
    InputDataError,
    MissingRowsWarning,
    OptionError,
    ShardMismatchError,
    SmallSampleWarning,
)

__all__ = [
    "Table",
    "MIN_ROWS",
    "ReadOptions",
    "MISSING",
    "TINY_ROWS",
    "identifier_columns",
    "sample_warnings",
    "ConstantColumnWarning",
    "ReadProgress",
    "read_table",
    "read_shards",
    "check_columns",
    "resolve_sep",
    "STDIN",
    "SMALL_INPUT_BYTES",
    "CHUNK_BYTES",
    "parse_small",
    "is_number",
]

#: The path that stands for standard input.
STDIN = "-"

#: ``progress(bytes_read, total_bytes)``: bytes read so far over every file of one call and their
#: total (``None`` when unknown, e.g. standard input).
ReadProgress = Callable[[int, Optional[int]], None]

_BLOCK = 1 << 20  # bytes per read of the underlying file
#: Inputs up to this size (all files of one call) are parsed by numpy (see the module docstring).
SMALL_INPUT_BYTES = 32 << 20
#: About this much text per parsed chunk of rows (larger inputs, pandas path).
CHUNK_BYTES = 8 << 20
#: Bytes that never occur in a valid number but do in words some pandas versions read as numbers
#: (``1_000``; ``True``/``False``): a file holding one is judged by the strict checker. Single
#: bytes, so each test is one ``memchr`` over the block.
_SUSPECT = (b"_", b"r", b"R", b"s", b"S")


#: The fewest data rows a participant shard may have (``read_shards``' default; ``bnsl split`` makes
#: no smaller shard).
MIN_ROWS = 2

#: Cells ``--na drop-rows`` reads as a missing value (besides an empty cell).
MISSING = ("NA", "N/A", "n/a", "na", "NaN", "nan", "NAN", "null", "NULL", "None", "?")

#: Below this many rows in all, :func:`sample_warnings` warns that the sample is tiny: a correlation
#: estimated from n rows has a standard error of about 1/√n, and two standard errors (the size chance
#: correlations commonly reach) are 2/√50 = 0.28 at 50 rows, about the default edge threshold 0.3.
TINY_ROWS = 50

#: A column is looked at as a possible row identifier only from this many rows on (a short designed
#: series such as doses 1..5 in order is no identifier).
_ID_MIN_ROWS = 10


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


_DEFAULT = ReadOptions()


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

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])


# ---------------------------------------------------------------------------------------------
# options


def _display(path: Path) -> str:
    return "<stdin>" if str(path) == STDIN else str(path)


def _is_gzip(path: Path) -> bool:
    return path.name.lower().endswith(".gz")


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


def _sep_name(sep: str) -> str:
    return "tab" if sep == "\t" else repr(sep)


# ---------------------------------------------------------------------------------------------
# byte streams


class _Source:
    """The bytes of one input, read once: hashes the stored bytes, reports progress, and notes
    whether the (decompressed) text holds a token the fast path cannot judge."""

    def __init__(self, path: Path, progress: Optional[Callable[[int], None]] = None, data: Optional[bytes] = None,
                 plain: bool = False):
        self.path = path
        self.sha = hashlib.sha256()
        self.raw_read = 0
        self.progress = progress
        self.suspect = False
        self._pending = b""
        self._buffered: Optional[bytes] = None  # stdin: kept for the slow checker
        if data is not None or str(path) == STDIN:
            if data is None:
                data = sys.stdin.buffer.read()
            self._buffered = data
            raw: io.RawIOBase | io.BufferedIOBase = io.BytesIO(data)
            self.size: Optional[int] = len(data)
        else:
            _check_readable(path)
            try:
                raw = open(path, "rb")  # noqa: SIM115 - closed in close()
            except OSError as exc:
                raise InputDataError(f"{path}: cannot read ({exc.strerror or exc})") from None
            self.size = os.fstat(raw.fileno()).st_size
        self._raw = raw
        # gzip by name, or (standard input, bytes in hand) by its magic number
        self.gzipped = not plain and (
            _is_gzip(path) or (self._buffered is not None and self._buffered[:2] == b"\x1f\x8b")
        )
        if self.gzipped:
            self._gz = gzip.GzipFile(fileobj=_Hashing(self), mode="rb")
        else:
            self._gz = None

    # the stored bytes (hashed, counted)
    def _raw_read(self, n: int) -> bytes:
        b = self._raw.read(n)
        if b:
            self.sha.update(b)
            self.raw_read += len(b)
            if self.progress is not None:
                self.progress(len(b))
        return b

    # the text bytes (decompressed)
    def _text_read(self, n: int) -> bytes:
        if self._gz is None:
            try:
                b = self._raw_read(n)
            except OSError as exc:
                raise InputDataError(f"{_display(self.path)}: cannot read ({exc.strerror or exc})") from None
        else:
            try:
                b = self._gz.read(n)
            except (OSError, EOFError, zlib.error) as exc:
                raise InputDataError(f"{_display(self.path)}: not a valid gzip file ({exc})") from None
        if b and not self.suspect:
            self.suspect = any(s in b for s in _SUSPECT)
        return b

    def read(self, n: int = -1) -> bytes:
        """File-like ``read`` for the parser: pending bytes first, then the stream."""
        if n is None or n < 0:
            parts = [self._pending]
            self._pending = b""
            while True:
                b = self._text_read(_BLOCK)
                if not b:
                    return b"".join(parts)
                parts.append(b)
        if self._pending:
            out, self._pending = self._pending[:n], self._pending[n:]
            return out
        return self._text_read(n)

    def readable(self) -> bool:
        return True

    def __iter__(self):  # pandas checks for file-likes
        return self

    def __next__(self):
        raise StopIteration

    def header(self) -> tuple[str, int, bytes]:
        """Read up to the end of the first non-blank line. Returns (header line text, 1-based line
        number of the header, the bytes after it — kept as pending for :meth:`read`)."""
        buf = b""
        start = 0
        line_no = 1
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                more = self._text_read(_BLOCK)
                if not more:
                    nl = len(buf)
                else:
                    buf += more
                    continue
            line = buf[start:nl]
            if start == 0 and line_no == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
            if line.strip() or nl >= len(buf):
                rest = buf[nl + 1 :]
                try:
                    text = line.decode("utf-8").rstrip("\r")
                except UnicodeDecodeError:
                    raise encoding_error(self.path, buf, line_no) from None
                self._pending = rest
                self.suspect = any(s in rest for s in _SUSPECT)  # the header's own words do not count
                return text, line_no, rest
            start = nl + 1
            line_no += 1

    def drain(self) -> None:
        """Read the stored bytes to the end so the hash covers the whole file."""
        while self._gz is not None and self._gz.read(_BLOCK):
            pass
        while self._raw_read(_BLOCK):
            pass

    def all_text(self) -> str:
        """The whole file as text (the slow checker of a failing file reads it again)."""
        if self._buffered is not None:
            data = self._buffered
            if self.gzipped:
                data = gzip.decompress(data)
        elif self.gzipped:
            with gzip.open(self.path, "rb") as fh:
                data = fh.read()
        else:
            data = Path(self.path).read_bytes()
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise encoding_error(self.path, data, line) from None

    def close(self) -> None:
        if self._gz is not None:
            self._gz.close()
        self._raw.close()


class _Hashing:
    """The stored-bytes side of a :class:`_Source`, as a file for ``gzip``."""

    def __init__(self, src: _Source):
        self.src = src

    def read(self, n: int = -1) -> bytes:
        return self.src._raw_read(_BLOCK if n is None or n < 0 else n)

    def readable(self) -> bool:
        return True


def _guess_encoding(sample: bytes) -> Optional[tuple[str, str]]:
    """(name, --encoding value) of the 8-bit or UTF-16 encoding ``sample`` (not UTF-8) looks like,
    or ``None`` when it does not look like text at all."""
    if sample[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "UTF-16", "utf-16"
    if b"\x00" in sample:
        return None
    try:
        text = sample.decode("cp1252")
    except UnicodeDecodeError:
        return None
    if any(not (ch.isprintable() or ch in "\t\r\n") for ch in text):
        return None
    if any(0x80 <= b <= 0x9F for b in sample):
        return "Windows-1252", "cp1252"
    return "Latin-1", "latin-1"


def encoding_error(path: Path, sample: bytes, line: Optional[int] = None) -> InputDataError:
    """The error for bytes that are not UTF-8: names the encoding they look like and the fix."""
    where = f" (line {line})" if line else ""
    guess = _guess_encoding(sample)
    if guess is None:
        return InputDataError(f"{_display(path)}: not a text file (UTF-8 expected){where}")
    name, flag = guess
    return InputDataError(
        f"{_display(path)}: not UTF-8{where}; it looks like {name} — re-save it as UTF-8 or pass --encoding {flag}"
    )


def _check_readable(path: Path) -> None:
    if not path.exists():
        raise InputDataError(f"{path}: file not found")
    if path.is_dir():
        raise InputDataError(f"{path}: is a directory, expected a CSV file")


# ---------------------------------------------------------------------------------------------
# header


def is_number(s: str) -> bool:
    """``s`` reads as a float (a number, ``nan`` or ``inf``): the rule for numeric cells and names that
    the data and graph readers share."""
    try:
        float(s)
    except ValueError:
        return False
    return True


def check_columns(
    names: Sequence[str], path: Path, line: int = 1, sep: str = ",", numeric_names: bool = False
) -> None:
    """Header checks: present, no empty and no duplicate names, not another separator.
    ``numeric_names``: names that are numbers are accepted (``--header yes``)."""
    where = f"{_display(path)}: line {line} (header)"
    if not numeric_names and all(is_number(h) for h in names if h):
        raise InputDataError(
            f"{_display(path)}: no header row (the first line holds numbers); add a line with the column names, "
            "or pass --header yes if these numbers are the names (e.g. gene ids), --header no if the file has "
            "no header (columns V1, V2, …)"
        )
    if len(names) == 1:
        for other in (";", "\t", "|", ","):
            if other != sep and other in names[0]:
                raise InputDataError(
                    f"{where} is one name {names[0][:40]!r} holding {_sep_name(other)}: the file looks "
                    f"{_sep_name(other)}-separated; pass --sep {'tab' if other == chr(9) else repr(other)}"
                )
    for k, h in enumerate(names, start=1):
        if h == "":
            raise InputDataError(f"{_display(path)}: column {k} has an empty name in the header")
    seen: dict[str, int] = {}
    for k, h in enumerate(names, start=1):
        if h in seen:
            raise InputDataError(f"{_display(path)}: duplicate column name {h!r} (columns {seen[h]} and {k})")
        seen[h] = k


# ---------------------------------------------------------------------------------------------
# the strict (slow) checker: only for a file the fast path rejected or cannot judge


def _find_bad_cell(
    path: Path, text: str, names: Sequence[str], skip: Sequence[str] = (), sep: str = ",",
    has_header: bool = True, na: str = "error",
) -> InputDataError | None:
    """Find the first cell that is not a finite number and describe it (None if all are). With
    ``na="drop-rows"`` a missing value (empty or one of :data:`MISSING`) is no error."""
    try:
        return _find_bad_cell_rows(path, text, names, skip, sep, has_header, na)
    except _CsvTrouble as exc:  # a field beyond the csv module's limit, or a lone carriage return
        return _csv_error(path, exc.message, exc.line, text)


def _lone_cr(path: Path) -> InputDataError:
    return InputDataError(
        f"{_display(path)}: a carriage return (\\r) without a newline; save the file with \\n or \\r\\n line ends"
    )


class _CsvTrouble(Exception):
    """A ``csv.Error`` of the strict checker, with the line its record starts on."""

    def __init__(self, message: str, line: int):
        super().__init__(message)
        self.message, self.line = message, line


def _csv_rows(reader, first_line: int):
    """The rows of ``reader`` (a ``csv.reader``); its ``csv.Error`` as :class:`_CsvTrouble` naming
    the line (of the file: the reader's first line is ``first_line``) where that record starts."""
    while True:
        start = first_line + reader.line_num
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise _CsvTrouble(str(exc), start) from None
        yield row


def _csv_error(path: Path, message: str, line: Optional[int], text: str = "") -> InputDataError:
    """What a ``csv.Error`` means, in one line: a field longer than the csv module's field size
    limit (``csv.field_size_limit()``), naming the line ``line`` of ``text`` where its record
    starts (and an unclosed quote from there on, the usual cause); otherwise (the only other
    error our reader settings leave) a carriage return without a newline."""
    if "field limit" not in message:
        return _lone_cr(path)
    where = f" line {line}:" if line is not None else ""
    hint = ""
    if text.split("\n", (line or 1) - 1)[-1].count('"') % 2:  # a quote opened there is never closed
        hint = '; a quote (") left open there makes a field run on over the lines that follow'
    return InputDataError(
        f"{_display(path)}:{where} a field is longer than {csv.field_size_limit():,} characters, the field "
        f"size limit of Python's csv reader{hint}"
    )


_NA_HINT = "; pass --na drop-rows to drop the rows that hold one"


def _find_bad_cell_rows(path, text, names, skip, sep, has_header=True, na="error") -> InputDataError | None:
    body = text.lstrip("\r\n")
    skipped = text[: len(text) - len(body)].count("\n")  # leading blank lines keep their numbers
    reader = _csv_rows(csv.reader(io.StringIO(body), delimiter=sep), 1 + skipped)
    if has_header:
        next(reader, None)
    d = len(names)
    shown = _display(path)
    first_row = True
    drop = na == "drop-rows"
    missing = set(MISSING)
    for line_no, row in enumerate(reader, start=(2 if has_header else 1) + skipped):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != d:
            if not has_header:
                return InputDataError(f"{shown}: row {line_no} has {len(row)} fields, the first row has {d}")
            if len(row) > d and first_row:
                return InputDataError(
                    f"{shown}: line {line_no} has {len(row)} fields but the header (line {line_no - 1}) names "
                    f"{d} columns; name every column (an unnamed index column?) or check --sep"
                )
            hint = " (a decimal comma? bnsl reads '.' as the decimal mark)" if len(row) > d and sep == "," else ""
            return InputDataError(f"{shown}: row {line_no} has {len(row)} fields, the header has {d}{hint}")
        first_row = False
        for k, cell in enumerate(row):
            if names[k] in skip:  # a text column (``keep``)
                continue
            c = cell.strip()
            if drop and (c == "" or c in missing):
                continue
            if c == "":
                return InputDataError(f"{shown}: row {line_no}, column {names[k]!r}: missing value{_NA_HINT}")
            if c in missing and not is_number(c):
                return InputDataError(f"{shown}: row {line_no}, column {names[k]!r}: missing value ({c!r}){_NA_HINT}")
            try:
                if "_" in c:  # Python's float() accepts 1_000, a CSV reader does not
                    raise ValueError(c)
                v = float(c)
            except ValueError:
                hint = ""
                if "," in c and is_number(c.replace(",", ".", 1)):
                    hint = " (a decimal comma? bnsl reads '.' as the decimal mark)"
                elif any(s in c for s in ";\t|") and len(names) == 1:
                    hint = " (another separator? pass --sep)"
                elif any(ch.isalpha() for ch in c):
                    hint = f" (a text column? leave it out with --drop {names[k]} or choose --columns)"
                return InputDataError(f"{shown}: row {line_no}, column {names[k]!r}: {c!r} is not a number{hint}")
            if not math.isfinite(v):
                hint = " (a missing value? pass --na drop-rows to drop such rows)" if c in missing else ""
                return InputDataError(f"{shown}: row {line_no}, column {names[k]!r}: {c!r} is not a finite number{hint}")
    return None


# ---------------------------------------------------------------------------------------------
# the fast path


class _Rows:
    """A preallocated ``capacity × d`` float64 array filled chunk by chunk (grown if needed)."""

    def __init__(self, capacity: int, d: int):
        self.X = np.empty((max(capacity, 1), d), dtype=np.float64)
        self.n = 0

    def add(self, block: np.ndarray) -> None:
        m = block.shape[0]
        if self.n + m > self.X.shape[0]:
            new = max(self.n + m, int(self.X.shape[0] * 1.5) + 1024)
            self.X.resize((new, self.X.shape[1]), refcheck=False)
        self.X[self.n : self.n + m] = block
        self.n += m

    def result(self) -> np.ndarray:
        if self.X.shape[0] != self.n:
            self.X.resize((self.n, self.X.shape[1]), refcheck=False)
        return self.X


def _estimate_rows(src: _Source, rest: bytes) -> tuple[int, int]:
    """(estimated data rows, rows per parsed chunk) from the bytes after the header."""
    lines = rest.count(b"\n")
    per_line = (len(rest) / lines) if lines else max(len(rest), 16)
    chunk = int(min(max(CHUNK_BYTES / max(per_line, 1.0), 1024), 1 << 20))
    if src.size is None or src.gzipped:
        return chunk, chunk
    remaining = max(src.size - src.raw_read + len(rest), 0)
    return int(remaining / max(per_line, 1.0) * 1.02) + 16, chunk


def read_table(
    path: str | Path,
    *,
    keep: Sequence[str] | None = None,
    min_rows: int = 2,
    check_constant: bool = True,
    sep: Optional[str] = None,
    columns: Sequence[str] | None = None,
    progress: Optional[ReadProgress] = None,
    data: Optional[bytes] = None,
    options: Optional[ReadOptions] = None,
    min_columns: int = 1,
) -> Table:
    """Read and validate one numeric CSV file (``-``: standard input).

    ``keep`` names columns that are read as text rather than numbers (returned in ``extra``
    as arrays of strings and left out of ``X`` and ``names``), e.g. a grouping column.
    ``sep`` is the field separator (default: by extension, see :func:`resolve_sep`).
    ``columns``, when given, is the order of the numeric columns in ``X`` (the file must hold
    exactly these names, in any order; a :class:`ShardMismatchError` otherwise).
    ``check_constant`` rejects a column with a single value. ``progress(bytes_read, total)``
    is called as the file's bytes are read. ``data``: the file's bytes when the caller already holds
    them (``path`` then only names the file in messages and tells ``.gz``). ``options``: which
    columns and rows are used and how the text is read (:class:`ReadOptions`); ``min_columns``:
    the fewest columns (after the selection) the caller can use.
    """
    path = Path(path)
    try:
        sep = resolve_sep(path, sep)
    except ValueError as exc:
        raise InputDataError(str(exc)) from None
    opts = (options or _DEFAULT).check()
    return _read_table(path, sep, keep, min_rows, check_constant, columns, progress, data, None, opts, min_columns)


def _read_table(path, sep, keep, min_rows, check_constant, columns, progress, data, total,
                opts: ReadOptions = _DEFAULT, min_columns: int = 1) -> Table:
    """:func:`read_table` with ``sep`` resolved; ``total`` is the size of every input of the call
    (``None``: this file's), which decides whether numpy may parse it."""
    total_cb = None
    if progress is not None:
        done = [0]
        size_known: list[Optional[int]] = [None]

        def total_cb(nbytes: int) -> None:
            done[0] += nbytes
            progress(done[0], size_known[0])

    sha = None
    plain = False
    if opts.encoding != "utf-8":  # decoded here, read as UTF-8; the hash stays that of the stored bytes
        data, sha = _transcode(path, data, opts.encoding)
        plain = True
    src = _Source(path, total_cb, data, plain=plain)
    if progress is not None:
        size_known[0] = src.size
    size = src.size if total is None else total
    small = size is not None and size <= SMALL_INPUT_BYTES and not src.gzipped and not keep
    try:
        table = _read(src, path, sep, list(keep or []), min_rows, check_constant, columns, small, opts, min_columns)
    finally:
        src.close()
    return table if sha is None else replace(table, sha256=sha)


def _transcode(path: Path, data: Optional[bytes], encoding: str) -> tuple[bytes, str]:
    """The file's text in ``encoding`` as UTF-8 bytes (decompressed), and the SHA-256 of its stored bytes."""
    if data is None:
        if str(path) == STDIN:
            data = sys.stdin.buffer.read()
        else:
            _check_readable(path)
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise InputDataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    sha = hashlib.sha256(data).hexdigest()
    raw = data
    if _is_gzip(path) or raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputDataError(f"{_display(path)}: not a valid gzip file ({exc})") from None
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputDataError(f"{_display(path)}: line {line}: not valid {encoding} text") from None
    return text.encode("utf-8"), sha


def parse_small(body: bytes, sep: str, d: int) -> Optional[np.ndarray]:
    """The ``n × d`` float64 values of ``body`` (the text after the header) parsed by numpy, or
    ``None`` when numpy's parse cannot stand for the pandas path's: bytes outside ASCII, a row of
    another length, a cell numpy rejects, a non-finite value, a line of spaces, no data rows."""
    if not body.isascii():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. "input contained no data"
            X = np.loadtxt(
                io.BytesIO(body), delimiter=sep, quotechar='"', comments=None, dtype=np.float64,
                ndmin=2, encoding="ascii",
            )
    except (ValueError, UserWarning):
        return None
    if X.ndim != 2 or X.shape[1] != d or X.shape[0] == 0 or not np.isfinite(X).all():
        return None
    return X


_INT = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)")


def _has_header(fields: list, rest: bytes, mode: str, path: Path, sep: str) -> bool:
    """Whether the first line is the header (see :class:`ReadOptions` ``header``)."""
    if mode != "auto":
        return mode == "yes"
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
            if rows and all(any(_DECIMAL.fullmatch(c.strip()) for c in r) for r in rows):
                return True
    check_columns(fields, path)  # only numbers: raises the "no header row" error
    return False  # pragma: no cover


def _select(header: list, keep: list, opts: ReadOptions, path: Path) -> tuple[list, list]:
    """(the numeric columns used, in order; the columns left out) under ``opts``."""
    shown = _display(path)

    def need(name: str, option: str) -> None:
        if name not in header:
            cols = ", ".join(map(repr, header[:8])) + (" …" if len(header) > 8 else "")
            raise InputDataError(f"{shown}: {option} names {name!r}, which is not a column (columns: {cols})")

    if opts.index_col is not None:
        need(opts.index_col, "--index-col")
    for n in opts.drop:
        need(n, "--drop")
    for n in opts.columns or ():
        need(n, "--columns")
    gone = set(opts.drop) | ({opts.index_col} if opts.index_col is not None else set()) | set(keep)
    chosen = list(opts.columns) if opts.columns is not None else header
    sel = [h for h in chosen if h not in gone]
    ignored = [h for h in header if h not in keep and h not in sel]
    return sel, ignored


def _read(src, path, sep, keep, min_rows, check_constant, columns, small=False, opts=_DEFAULT, min_columns=1) -> Table:
    shown = _display(path)
    line, header_line, rest = src.header()
    if not line.strip():
        raise InputDataError(f"{shown}: file is empty")
    try:
        fields = [h.strip() for h in next(csv.reader([line], delimiter=sep))]
    except csv.Error as exc:
        raise _csv_error(path, str(exc), header_line, line) from None
    has_header = _has_header(fields, rest, opts.header, path, sep)
    if has_header:
        header = fields
        check_columns(header, path, header_line, sep, numeric_names=True)
    else:
        header = [f"V{k}" for k in range(1, len(fields) + 1)]
        rest = (line + "\n").encode("utf-8") + rest  # the first line is data
        src._pending = rest
        src.suspect = src.suspect or any(x in rest for x in _SUSPECT)
        header_line -= 1  # data rows start at the first line
    for k in keep:
        if k not in header:
            raise InputDataError(f"{shown}: no column named {k!r} (columns: {', '.join(header[:8])}…)")
    num_names, ignored = _select(header, keep, opts, path)
    if len(num_names) < min_columns:
        raise _too_few_columns(path, header, num_names, opts, sep)
    mismatch = None
    if columns is not None and set(columns) != set(num_names):
        mismatch = _mismatch(path, num_names, columns)  # raised once the file itself is validated
        columns = None
    if columns is not None:
        out_names = list(columns)
    else:
        out_names = num_names
    d_all = len(header)
    skip = list(keep) + ignored
    na_drop = opts.na == "drop-rows"

    capacity, chunk_rows = _estimate_rows(src, rest)
    rows = _Rows(capacity, len(num_names))
    texts: dict[str, list[np.ndarray]] = {k: [] for k in keep}
    num_idx = [header.index(h) for h in out_names]
    identity = num_idx == list(range(d_all))
    dtypes = {k: (object if h in skip else np.float64) for k, h in enumerate(header)}
    dropped = [0]

    def slow(default: str) -> InputDataError:
        text = src.all_text()
        return _find_bad_cell(path, text, header, skip, sep, has_header, opts.na) or InputDataError(f"{shown}: {default}")

    # the first data line must have as many fields as the header (else pandas may shift names)
    first = _first_data_line(rest)
    if first is not None:
        try:
            fields = next(csv.reader([first.decode("utf-8", "replace")], delimiter=sep))
        except (csv.Error, StopIteration):
            fields = None
        if fields is not None and len(fields) != d_all:
            raise slow(f"row {header_line + 1} has {len(fields)} fields, the header has {d_all}")

    def finish() -> Table:
        return _finish(src, path, shown, rows, header, skip, sep, min_rows, mismatch, check_constant, out_names,
                       texts, has_header, opts, dropped[0])

    feed = src
    if small and not ignored:
        body = src.read()  # the rest of the file: hashed and reported to progress as it is read
        parsed = None if src.suspect else parse_small(body, sep, d_all)
        if parsed is not None:
            rows.X, rows.n = (parsed if identity else parsed[:, num_idx]), parsed.shape[0]
            if not rows.X.flags.owndata or not rows.X.flags.c_contiguous:
                rows.X = np.ascontiguousarray(rows.X).copy()
            return finish()
        feed = io.BytesIO(body)  # the pandas way, on the same bytes

    import pandas as pd

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            reader = pd.read_csv(
                feed,
                sep=sep,
                header=None,
                names=list(range(d_all)),
                index_col=False,
                dtype=dtypes,
                skip_blank_lines=True,
                keep_default_na=False,
                na_values=list(MISSING) + [""] if na_drop else [],
                engine="c",
                encoding="utf-8",
                chunksize=chunk_rows,
            )
            with reader:
                for df in reader:
                    block = df.to_numpy(dtype=np.float64) if identity else df[num_idx].to_numpy(dtype=np.float64)
                    keep_rows = None
                    if not np.isfinite(block).all():
                        if not na_drop or np.isinf(block).any():
                            raise slow("could not parse the file as numeric CSV")
                        keep_rows = ~np.isnan(block).any(axis=1)
                        dropped[0] += int(block.shape[0] - keep_rows.sum())
                        block = block[keep_rows]
                    rows.add(block)
                    for k in keep:
                        col = df[header.index(k)].to_numpy(dtype=str)
                        texts[k].append(col if keep_rows is None else col[keep_rows])
    except InputDataError:
        raise
    except UnicodeDecodeError:
        raise slow("not a text file (UTF-8 expected)") from None
    except (ValueError, pd.errors.ParserError, pd.errors.ParserWarning, csv.Error):
        raise slow("could not parse the file as numeric CSV") from None
    return finish()


def _too_few_columns(path: Path, header: list, sel: list, opts: ReadOptions, sep: str) -> InputDataError:
    shown = _display(path)
    if len(header) == 1:
        return InputDataError(
            f"{shown}: one column ({header[0][:40]!r}); a graph needs at least two variables — is the file "
            f"separated by something other than {_sep_name(sep)}? (--sep)"
        )
    left = ", ".join(map(repr, sel)) or "none"
    return InputDataError(
        f"{shown}: {len(sel)} column(s) left ({left}) after --columns/--drop/--index-col; "
        "a graph needs at least two variables"
    )


def _finish(src, path, shown, rows, header, keep, sep, min_rows, mismatch, check_constant, out_names, texts,
            has_header=True, opts=_DEFAULT, dropped=0) -> Table:
    src.drain()
    if src.suspect:  # a token the fast path cannot judge: the strict checker decides
        bad = _find_bad_cell(path, src.all_text(), header, keep, sep, has_header, opts.na)
        if bad is not None:
            raise bad
    X = rows.result()
    if X.shape[0] < min_rows:
        after = f" left after --na drop-rows dropped {dropped}" if dropped else ""
        raise InputDataError(f"{shown}: {X.shape[0]} data row(s){after}; at least {min_rows} are needed")
    if mismatch is not None:
        raise mismatch
    if check_constant and X.shape[0] >= 1:
        const = _constant_columns(X)
        if const.size:
            col = out_names[const[0]]
            raise InputDataError(
                f"{shown}: column {col!r} is constant ({X[0, const[0]]:g} in every row); "
                "remove it, it carries no information about the graph"
            )
    if dropped:
        warnings.warn(
            f"{shown}: dropped {dropped} of {X.shape[0] + dropped} rows that hold a missing value (--na drop-rows)",
            MissingRowsWarning,
            stacklevel=4,
        )
    extra = {k: (np.concatenate(v) if v else np.array([], dtype=str)) for k, v in texts.items()}
    return Table(X, tuple(out_names), path, extra, src.sha.hexdigest(), dropped)


def _first_data_line(rest: bytes) -> Optional[bytes]:
    start = 0
    while start < len(rest):
        nl = rest.find(b"\n", start)
        if nl < 0:
            return None  # possibly incomplete; the parser checks it
        line = rest[start:nl].rstrip(b"\r")
        if line.strip():
            return line if b'"' not in line else None
        start = nl + 1
    return None


def _constant_columns(X: np.ndarray) -> np.ndarray:
    if X.shape[0] == 0:
        return np.zeros(0, dtype=int)
    return np.flatnonzero((X == X[0]).all(axis=0))


def _mismatch(path: Path, names: Sequence[str], ref: Sequence[str], ref_path: Optional[Path] = None) -> ShardMismatchError:
    missing = [n for n in ref if n not in set(names)]
    extra = [n for n in names if n not in set(ref)]
    what = []
    if missing:
        what.append("lacks " + ", ".join(map(repr, missing[:5])))
    if extra:
        what.append("has extra " + ", ".join(map(repr, extra[:5])))
    against = f" from {_display(ref_path)}" if ref_path is not None else ""
    return ShardMismatchError(
        f"{_display(path)}: columns differ{against} ({'; '.join(what)}); all shards need the same columns"
    )


def read_shards(
    paths: Sequence[str | Path],
    *,
    min_rows: int = MIN_ROWS,
    sep: Optional[str] = None,
    progress: Optional[ReadProgress] = None,
    options: Optional[ReadOptions] = None,
    min_columns: int = 2,
    check_constant: bool = True,
) -> list[Table]:
    """Read every participant shard, check that all have the same column names (any order),
    and return them with columns in the order of the first shard (of ``options.columns`` when
    given). ``options`` (:class:`ReadOptions`) apply to every shard alike.

    Every file is validated before anything is computed. A column constant in some shards (a
    site where a variable does not vary) is legal — the learners centre each site and only use
    its means and second moments — and warns with :class:`ConstantColumnWarning` naming the
    files; a column constant in every shard is an error (it carries no information).
    ``check_constant=False`` (private runs) skips both: whether a column is constant is a
    function of the rows that no mechanism protects, so a private run must not depend on it.
    ``progress(bytes_read, total_bytes)`` covers all files. :func:`sample_warnings` then warns
    about identifier-like columns and small samples.
    """
    if not paths:
        raise InputDataError("no data files given")
    opts = (options or _DEFAULT).check()
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
    for p in paths:
        cb = None
        if progress is not None:
            cb = (lambda b, _t, base=base: progress(base + b, total))  # noqa: E731
        ref = tables[0].names if tables else None
        try:
            t = _read_table(p, _sep_of(p, sep), None, min_rows, False, ref, cb, None, total, opts, min_columns)
        except ShardMismatchError as exc:
            raise ShardMismatchError(str(exc).replace("columns differ (", f"columns differ from {_display(tables[0].path)} (", 1)) from None
        tables.append(t)
        try:
            base += p.stat().st_size if str(p) != STDIN else 0
        except OSError:
            pass
    if check_constant:
        _check_constant_columns(tables)
    sample_warnings(tables, opts)
    return tables


def check_constant_columns(table: Table) -> None:
    """Raise :class:`InputDataError` when a column of ``table`` is constant (the check
    :func:`read_table` makes by default), for a reader that postponed it."""
    const = _constant_columns(table.X)
    if const.size:
        raise InputDataError(
            f"{_display(table.path)}: column {table.names[const[0]]!r} is constant ({table.X[0, const[0]]:g} in every row); "
            "remove it, it carries no information about the graph"
        )


def identifier_columns(tables: Sequence[Table]) -> list[str]:
    """Columns that look like row identifiers in every table (all with the same columns): integer
    values, all distinct, and either strictly increasing or decreasing in file order or a run of
    consecutive integers in any order — at least :data:`_ID_MIN_ROWS` rows in all. Measurements
    rarely do that; a row number or a record id does."""
    if not tables or sum(t.n for t in tables) < _ID_MIN_ROWS:
        return []
    out = []
    for j, name in enumerate(tables[0].names):
        if all(_looks_like_id(t.X[:, j]) for t in tables):
            out.append(name)
    return out


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
            f"column {name!r} looks like a row identifier (distinct integers in sequence) and is learned as a "
            f"variable; pass {hint} to leave it out",
            IdentifierColumnWarning,
            stacklevel=3,
        )
    d = tables[0].d
    n = sum(t.n for t in tables)
    where = _display(tables[0].path) if len(tables) == 1 else f"{len(tables)} shards"
    if not whole:
        for t in tables:
            if t.n < d:
                warnings.warn(
                    f"{_display(t.path)}: {t.n} rows for {d} variables (fewer rows than variables): this site's "
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
            f"{_display(t.path)}: {t.n} rows for {d} variables (fewer rows than variables; "
            f"{len(small)} of {len(tables)} shards): that participant's own fit rests on the penalty alone",
            SmallSampleWarning,
            stacklevel=3,
        )


def _sep_of(path: Path, sep: Optional[str]) -> str:
    try:
        return resolve_sep(path, sep)
    except ValueError as exc:
        raise InputDataError(str(exc)) from None


def _check_constant_columns(tables: Sequence[Table]) -> None:
    names = tables[0].names
    const = np.zeros((len(tables), len(names)), dtype=bool)
    for k, t in enumerate(tables):
        const[k, _constant_columns(t.X)] = True
    everywhere = np.flatnonzero(const.all(axis=0))
    if everywhere.size:
        col = names[everywhere[0]]
        where = _display(tables[0].path) if len(tables) == 1 else f"every shard ({_display(tables[0].path)} …)"
        raise InputDataError(
            f"{where}: column {col!r} is constant in "
            + ("every row" if len(tables) == 1 else "every shard")
            + "; remove it, it carries no information about the graph"
        )
    for j in np.flatnonzero(const.any(axis=0)):
        files = [_display(tables[k].path) for k in np.flatnonzero(const[:, j])]
        shown = ", ".join(files[:3]) + (" …" if len(files) > 3 else "")
        warnings.warn(
            f"column {names[j]!r} is constant in {shown} ({len(files)} of {len(tables)} shards); "
            "that site contributes zero variance for it, the run goes on",
            ConstantColumnWarning,
            stacklevel=3,
        )
