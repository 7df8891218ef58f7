"""Reading one data file: :func:`read_table` validates a numeric CSV and returns its :class:`Table`
(the format: :mod:`bnsl_cli.io.table`).

How a file is read (memory: one float64 copy of the data, plus about two of one file's while it is
parsed, and pandas maps that file into memory):

- the bytes are read in blocks; the SHA-256 of the file's bytes (as stored, i.e. compressed for
  ``.gz``) is computed from them, and a progress callback sees the bytes read;
- the field separator is the one given (``--sep``), else the file's own, detected from its first
  line and up to 100 lines after it (:func:`~bnsl_cli.io.columns.detect_separator`: ``,`` ``;`` tab
  ``|``, quotes respected; a file no separator splits has one column; one that two separators split
  equally well is an error that asks for ``--sep``); ``--decimal ,`` reads decimal commas in every
  file not separated by ``,``;
- the header line is parsed here (so duplicate names are never renamed by the parser); the rest of a
  file on disk (not compressed, UTF-8) is parsed by pandas' C parser from the file's path, in one
  call (pandas reads a large file in parallel threads), each column then copied into its place in
  one ``n × d`` float64 array; meanwhile a thread reads its bytes once more for the hash. Other
  inputs (standard input, ``.gz``, other encodings) are parsed in chunks of rows straight into one
  preallocated ``n × d`` float64 array (its row count estimated from the file size, grown if
  needed, trimmed at the end);
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

import csv
import io
import threading
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bnsl_cli.errors import DataWarning, InputDataError, MissingRowsWarning, OptionError
from bnsl_cli.io.columns import (
    check_columns,
    column_mismatch,
    constant_columns,
    detect_separator,
    first_line_is_header,
    has_row_labels,
    select_columns,
    too_few_columns,
)
from bnsl_cli.io.csv_check import csv_error, find_bad_cell
from bnsl_cli.io.csv_source import Source, may_hold_long_lines, transcode
from bnsl_cli.io.table import (
    MISSING,
    STDIN,
    ReadOptions,
    ReadProgress,
    Table,
    display_name,
    resolve_sep,
)

__all__ = ["read_table", "read_resolved", "forced_sep", "file_separator", "parse_small", "SMALL_INPUT_BYTES",
           "CHUNK_BYTES"]

#: Inputs up to this size (all files of one call) are parsed by numpy (see the module docstring).
SMALL_INPUT_BYTES = 32 << 20
#: About this much text per parsed chunk of rows (larger inputs, pandas path).
CHUNK_BYTES = 8 << 20

_DEFAULT = ReadOptions()


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


def _estimate_rows(src: Source, rest: bytes) -> tuple[int, int]:
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
    ``sep`` is the field separator (default: ``options.sep``, else detected in the file, see
    :func:`~bnsl_cli.io.columns.detect_separator`; the table's ``sep`` is the one used).
    ``columns``, when given, is the order of the numeric columns in ``X`` (the file must hold
    exactly these names, in any order; a :class:`ShardMismatchError` otherwise).
    ``check_constant`` rejects a column with a single value. ``progress(bytes_read, total)``
    is called as the file's bytes are read. ``data``: the file's bytes when the caller already holds
    them (``path`` then only names the file in messages and tells ``.gz``). ``options``: which
    columns and rows are used and how the text is read (:class:`ReadOptions`); ``min_columns``:
    the fewest columns (after the selection) the caller can use.
    """
    path = Path(path)
    opts = (options or _DEFAULT).check()
    sep = forced_sep(sep, opts)
    table = read_resolved(path, sep, keep, min_rows, check_constant, columns, progress, data, None, opts, min_columns)
    if table.row_labels and row_labels_noted(opts):
        warnings.warn(row_labels_note(display_name(path)), DataWarning, stacklevel=2)
    return table


def forced_sep(sep: str | None, opts: ReadOptions) -> str | None:
    """The separator every file is read with: ``sep`` (``--sep`` as given to a reader), else ``opts.sep``;
    ``None``: each file's own, detected. An :class:`InputDataError` for a character that cannot be one
    (:func:`resolve_sep`), an :class:`OptionError` for the decimal mark."""
    if sep is None:
        sep = opts.sep
    if sep is None:
        return None
    try:
        sep = resolve_sep("", sep)
    except ValueError as exc:
        raise InputDataError(str(exc)) from None
    if sep == opts.decimal:
        raise OptionError(f"--sep {sep!r} and --decimal {opts.decimal} cannot be the same character; a file with "
                          "decimal commas needs another separator, such as ;")
    return sep


def file_separator(path: str | Path, options: ReadOptions | None = None) -> str:
    """The field separator :func:`read_table` reads the file ``path`` with under ``options``: their
    ``sep``, else the one detected in its first lines (standard input: ``,``, it cannot be looked at
    twice). For a caller that handles the file's text itself (``bnsl split`` copies its cells)."""
    path = Path(path)
    opts = (options or _DEFAULT).check()
    sep = forced_sep(None, opts)
    if sep is not None or str(path) == STDIN:
        return sep or resolve_sep(path)
    data = transcode(path, None, opts.encoding)[0] if opts.encoding != "utf-8" else None
    src = Source(path, None, data, plain=data is not None)
    try:
        line, _, rest = src.header()
    finally:
        src.close()
    return detect_separator(path, line, rest, opts.decimal) if line.strip() else resolve_sep(path)


def row_labels_noted(opts: ReadOptions) -> bool:
    """Whether a file's unnamed first column of row labels is noted on stderr: not when ``--index-col ""``
    chose it, nor under ``--columns`` (which leaves out every column it does not name)."""
    return opts.index_col != "" and opts.columns is None


def row_labels_note(where: str) -> str:
    """The note that ``where`` (one file, or several) had an unnamed first column, read as row labels."""
    return (
        f"{where}: the unnamed first column is read as row labels (as R's write.csv and pandas' to_csv write "
        "them) and not used; give it a name in the header to learn it as a variable"
    )


def read_resolved(path, sep, keep, min_rows, check_constant, columns, progress, data, total,
                  opts: ReadOptions = _DEFAULT, min_columns: int = 1, absent_drop_ok: bool = False) -> Table:
    """:func:`read_table` with ``sep`` resolved (``None``: detected); ``total`` is the size of every input of the call
    (``None``: this file's), which decides whether numpy may parse it. ``absent_drop_ok``: a
    ``--drop`` name the file does not have is passed over and listed in the table's ``absent_drop``."""
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
        data, sha = transcode(path, data, opts.encoding)
        plain = True
    src = Source(path, total_cb, data, plain=plain)
    if progress is not None:
        size_known[0] = src.size
    size = src.size if total is None else total
    small = size is not None and size <= SMALL_INPUT_BYTES and not src.gzipped and not keep
    try:
        table = _read(src, path, sep, list(keep or []), min_rows, check_constant, columns, small, opts, min_columns,
                      absent_drop_ok)
    finally:
        src.close()
    return table if sha is None else replace(table, sha256=sha)


#: The largest magnitude a value of a non-private run may have: its square (1e100) and any sum of squares
#: over rows stay far below what a participant may send (1e100 per value, after dividing by the rows) and
#: far from float64's overflow; data in any sensible units are far below it. (A private run clips every
#: row's contribution instead: an extreme row must change nothing there but noisy values, and a refusal
#: that depends on one row would itself tell about it.)
VALUE_LIMIT = 1e50


def check_magnitudes(table: Table) -> None:
    """An :class:`InputDataError` naming the first value with ``|x| ≥ VALUE_LIMIT`` (file, column, data row)."""
    X = table.X
    if X.size == 0 or float(np.max(np.abs(X))) < VALUE_LIMIT:
        return
    i, j = (int(k[0]) for k in np.nonzero(np.abs(X) >= VALUE_LIMIT))
    raise InputDataError(
        f"{display_name(getattr(table, 'path', 'input'))}: column {table.names[j]!r}, data row {i + 1}: {X[i, j]:.6g} is too large to learn from "
        f"(|x| ≥ {VALUE_LIMIT:.0e}: its square overflows the second moments); rescale the column, e.g. divide it by "
        "a power of ten"
    )


def parse_small(body: bytes, sep: str, d: int, decimal: str = ".") -> np.ndarray | None:
    """The ``n × d`` float64 values of ``body`` (the text after the header) parsed by numpy, or
    ``None`` when numpy's parse cannot stand for the pandas path's: bytes outside ASCII, a row of
    another length, a cell numpy rejects, a non-finite value, a line of spaces, no data rows.
    ``decimal``: the decimal mark (``,``: only a text without ``.`` is parsed here, its commas read as points)."""
    if not body.isascii():
        return None
    if decimal != ".":
        if b"." in body or sep == decimal:
            return None
        body = body.replace(decimal.encode("ascii"), b".")
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


def _read(src, path, sep, keep, min_rows, check_constant, columns, small=False, opts=_DEFAULT, min_columns=1,
          absent_drop_ok=False) -> Table:
    shown = display_name(path)
    line, header_line, rest = src.header()
    if not line.strip():
        raise InputDataError(f"{shown}: file is empty")
    if sep is None:
        sep = detect_separator(path, line, rest, opts.decimal)
    if sep == opts.decimal:  # a comma-separated file's numbers use "." (--decimal , is for the others)
        opts = replace(opts, decimal=".")
    try:
        fields = [h.strip() for h in next(csv.reader([line], delimiter=sep))]
    except csv.Error as exc:
        raise csv_error(path, str(exc), header_line, line) from None
    has_header = first_line_is_header(fields, rest, opts.header, path, sep, opts.decimal)
    row_labels = has_header and has_row_labels(fields)
    if has_header:
        header = fields
        check_columns(header, path, header_line, sep, numeric_names=True, row_labels=row_labels)
    else:
        header = [f"V{k}" for k in range(1, len(fields) + 1)]
        rest = (line + "\n").encode("utf-8") + rest  # the first line is data
        src.unread(rest)
        header_line -= 1  # data rows start at the first line
    for k in keep:
        if k not in header:
            raise InputDataError(f"{shown}: no column named {k!r} (columns: {', '.join(header[:8])}…)")
    num_names, ignored = select_columns(header, keep, opts, path, absent_ok=absent_drop_ok)
    absent = tuple(n for n in opts.drop if n not in header) if absent_drop_ok else ()
    if len(num_names) < min_columns:
        raise too_few_columns(path, header, num_names, opts, sep)
    mismatch = None
    if columns is not None and set(columns) != set(num_names):
        mismatch = column_mismatch(path, num_names, columns)  # raised once the file itself is validated
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

    hashing = None  # (a file parsed by its path: the thread that reads its bytes meanwhile)

    def slow(default: str) -> InputDataError:
        if hashing is not None:
            hashing.join()  # what reading the bytes found first (a line too long to parse, say)
        text = src.all_text()
        return find_bad_cell(path, text, header, skip, sep, has_header, opts.na, opts.decimal) or InputDataError(
            f"{shown}: {default}"
        )

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
        table = _finish(src, path, shown, rows, header, skip, sep, min_rows, mismatch, check_constant, out_names,
                        texts, has_header, opts, dropped[0])
        return replace(table, row_labels=row_labels, absent_drop=absent, sep=sep, decimal=opts.decimal)

    feed = src
    if small and not ignored:
        body = src.read()  # the rest of the file: hashed and reported to progress as it is read
        parsed = None if src.suspect else parse_small(body, sep, d_all, opts.decimal)
        if parsed is not None:
            rows.X, rows.n = (parsed if identity else parsed[:, num_idx]), parsed.shape[0]
            if not rows.X.flags.owndata or not rows.X.flags.c_contiguous:
                rows.X = np.ascontiguousarray(rows.X).copy()
            return finish()
        feed = io.BytesIO(body)  # the pandas way, on the same bytes

    # a file on disk is parsed by pandas from its path; meanwhile a thread reads its bytes for the hash
    # (and the tokens the fast path cannot judge): hashing releases the GIL, as pandas' parser does
    by_path = feed is src and src.local and not may_hold_long_lines(path)
    hashing = _Consume(src) if by_path else None

    import pandas as pd

    def take(df) -> None:
        """Validate a parsed block of rows and add it (its text columns too)."""
        texts_of = {k: df[header.index(k)].to_numpy(dtype=str) for k in keep}
        if identity and not by_path:
            block = df.to_numpy(dtype=np.float64)
        else:  # each column (a view of the frame's) copied into place: O(n·d), the frame and one copy at most
            # (never DataFrame.pop: it walks every remaining block, one per column, so d pops cost O(d²))
            block = np.empty((len(df), len(num_idx)), dtype=np.float64)
            for k, j in enumerate(num_idx):
                block[:, k] = df[j].to_numpy(dtype=np.float64)
            del df
        keep_rows = None
        if not np.isfinite(block).all():
            if not na_drop or np.isinf(block).any():
                raise slow("could not parse the file as numeric CSV")
            keep_rows = ~np.isnan(block).any(axis=1)
            dropped[0] += int(block.shape[0] - keep_rows.sum())
            block = block[keep_rows]
        if by_path:  # the whole file in one block, an array of its own
            rows.X, rows.n = block, block.shape[0]
        else:
            rows.add(block)
        for k, col in texts_of.items():
            texts[k].append(col if keep_rows is None else col[keep_rows])

    if by_path:
        rows = _Rows(0, len(num_names))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            kwargs = {
                "sep": sep, "header": None, "names": list(range(d_all)), "index_col": False, "dtype": dtypes,
                "skip_blank_lines": True, "keep_default_na": False,
                "na_values": list(MISSING) + [""] if na_drop else [], "engine": "c", "encoding": "utf-8",
                "decimal": opts.decimal,
            }
            if by_path:
                take(pd.read_csv(str(path), skiprows=header_line, **kwargs))
            else:
                with pd.read_csv(feed, chunksize=chunk_rows, **kwargs) as reader:
                    for df in reader:
                        take(df)
    except InputDataError:
        raise
    except UnicodeDecodeError:
        raise slow("not a text file (UTF-8 expected)") from None
    except (ValueError, pd.errors.ParserError, pd.errors.ParserWarning, csv.Error):
        raise slow("could not parse the file as numeric CSV") from None
    finally:
        if hashing is not None:
            hashing.join()  # raises what reading the bytes raised
    return finish()


class _Consume(threading.Thread):
    """:meth:`Source.consume` in a thread of its own; :meth:`join` re-raises its error."""

    def __init__(self, src: Source):
        super().__init__(name="bnsl-read-hash", daemon=True)
        self.src = src
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.src.consume()
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
            self.error = exc

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def _finish(src, path, shown, rows, header, keep, sep, min_rows, mismatch, check_constant, out_names, texts,
            has_header=True, opts=_DEFAULT, dropped=0) -> Table:
    src.drain()
    if src.suspect:  # a token the fast path cannot judge: the strict checker decides
        bad = find_bad_cell(path, src.all_text(), header, keep, sep, has_header, opts.na, opts.decimal)
        if bad is not None:
            raise bad
    X = rows.result()
    if X.shape[0] < min_rows:
        after = f" left after --na drop-rows dropped {dropped}" if dropped else ""
        raise InputDataError(f"{shown}: {X.shape[0]} data row(s){after}; at least {min_rows} are needed")
    if mismatch is not None:
        raise mismatch
    if check_constant and X.shape[0] >= 1:
        const = constant_columns(X)
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
