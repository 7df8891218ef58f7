"""The strict (slow) checker: only for a file the fast path rejected or cannot judge. It reads the
whole text again with Python's ``csv`` module and names the line and column of the first cell that is
not a finite number (:func:`find_bad_cell`), a row of the wrong length, a missing value, or what a
``csv.Error`` means (:func:`csv_error`).
"""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path
from typing import Optional, Sequence

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.columns import as_point, is_number
from bnsl_cli.io.table import MISSING, display_name

__all__ = ["find_bad_cell", "csv_error", "is_date"]


def find_bad_cell(
    path: Path, text: str, names: Sequence[str], skip: Sequence[str] = (), sep: str = ",",
    has_header: bool = True, na: str = "error", decimal: str = ".",
) -> InputDataError | None:
    """Find the first cell that is not a finite number and describe it (None if all are). With
    ``na="drop-rows"`` a missing value (empty or one of :data:`~bnsl_cli.io.table.MISSING`) is no error.
    ``decimal``: the decimal mark (``,``: ``1,5`` is a number, ``1.5`` is not)."""
    try:
        return _find_bad_cell_rows(path, text, names, skip, sep, has_header, na, decimal)
    except _CsvTrouble as exc:  # a field beyond the csv module's limit, or a lone carriage return
        return csv_error(path, exc.message, exc.line, text)


def _lone_cr(path: Path) -> InputDataError:
    return InputDataError(
        f"{display_name(path)}: a carriage return (\\r) without a newline; save the file with \\n or \\r\\n line ends"
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


def csv_error(path: Path, message: str, line: Optional[int], text: str = "") -> InputDataError:
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
        f"{display_name(path)}:{where} a field is longer than {csv.field_size_limit():,} characters, the field "
        f"size limit of Python's csv reader{hint}"
    )


_NA_HINT = "; pass --na drop-rows to drop the rows that hold one"
#: a date or a time of day as exports write them (2024-01-03, 03/01/2024, 3.1.2024, 12:30, 2024-01-03T12:30:00Z)
_DATE = re.compile(r"\d{1,4}([-/.])\d{1,2}\1\d{1,4}([ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?"
                   r"|\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?")


def is_date(cell: str) -> bool:
    """Whether ``cell`` reads as a date or a time of day (``2024-01-03``, ``03/01/2024``, ``12:30``,
    ``2024-01-03T12:30:00Z``)."""
    return bool(_DATE.fullmatch(cell.strip()))


def _find_bad_cell_rows(path, text, names, skip, sep, has_header=True, na="error", decimal=".") -> InputDataError | None:
    body = text.lstrip("\r\n")
    skipped = text[: len(text) - len(body)].count("\n")  # leading blank lines keep their numbers
    reader = _csv_rows(csv.reader(io.StringIO(body), delimiter=sep), 1 + skipped)
    if has_header:
        next(reader, None)
    d = len(names)
    shown = display_name(path)
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
                v = float(as_point(c, decimal))
            except ValueError:
                hint = ""
                if decimal == "." and "," in c and is_number(c.replace(",", ".", 1)):
                    hint = " (a decimal comma? pass --decimal ,)"
                elif decimal != "." and "." in c:
                    hint = f" (with --decimal {decimal} a '.' is no decimal mark; a thousands separator?)"
                elif any(s in c for s in ";\t|") and len(names) == 1:
                    hint = " (another separator? pass --sep)"
                elif _DATE.fullmatch(c):
                    hint = f" (a date or time? leave the column out with --drop {names[k]} or choose --columns)"
                elif any(ch.isalpha() for ch in c):
                    hint = f" (a text column? leave it out with --drop {names[k]} or choose --columns)"
                return InputDataError(f"{shown}: row {line_no}, column {names[k]!r}: {c!r} is not a number{hint}")
            if not math.isfinite(v):
                hint = " (a missing value? pass --na drop-rows to drop such rows)" if c in missing else ""
                return InputDataError(f"{shown}: row {line_no}, column {names[k]!r}: {c!r} is not a finite number{hint}")
    return None
