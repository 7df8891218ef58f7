"""The bytes of one data input, read once: a file, standard input or bytes in hand, gzip-compressed
or not, in UTF-8 or another encoding (:func:`transcode`). :class:`Source` hashes the stored bytes
(SHA-256), reports progress, reads the header line and notes whether the text holds a token the fast
path cannot judge; for a file the parser reads by its path (:attr:`Source.local`) it reads the bytes
for that alone (:meth:`Source.consume`). The errors of unreadable input (not found, a directory, not
gzip, not UTF-8 — :func:`encoding_error` names the encoding it looks like) are raised here.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import sys
import zlib
from pathlib import Path
from typing import Callable, Optional

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.table import STDIN, display_name

__all__ = ["Source", "encoding_error", "check_readable", "transcode", "is_gzip", "may_hold_long_lines", "MAX_LINE_BYTES"]

_BLOCK = 1 << 20  # bytes per read of the underlying file
#: The longest line a data file may have (64 MiB: about 2.6 million cells of 25 characters). A longer
#: one is a file without line ends or not a CSV file at all; it is refused when the reading reaches it,
#: before a parser tries to hold it.
MAX_LINE_BYTES = 64 << 20
#: Bytes that never occur in a valid number but do in words some pandas versions read as numbers
#: (``1_000``; ``True``/``False``): a file holding one is judged by the strict checker. Single
#: bytes, so each test is one ``memchr`` over the block.
_SUSPECT = (b"_", b"r", b"R", b"s", b"S")


def may_hold_long_lines(path: Path) -> bool:
    """Whether the file ``path`` may hold a line longer than :data:`MAX_LINE_BYTES`: some stretch of
    half that length without a line end (each probe is one ``memchr`` that stops at the first line end,
    so a CSV file costs one touched page per 32 MiB). A parser that reads such a file by its path would
    hold the whole line before any check; the reader then streams it through :class:`Source`, which
    refuses the line when the reading passes the limit."""
    import mmap

    half = MAX_LINE_BYTES // 2
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size <= half:
                return False
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return any(mm.find(b"\n", start, start + half) < 0 for start in range(0, size - half + 1, half))
    except (OSError, ValueError):
        return False  # (unreadable here: the reading says so)


def is_gzip(path: Path) -> bool:
    """Whether ``path`` names a gzip-compressed file (by its name)."""
    return path.name.lower().endswith(".gz")


class Source:
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
        self._line_run = 0  # text bytes since the last line end
        self._lines = 0  # line ends read
        self._buffered: Optional[bytes] = None  # stdin: kept for the slow checker
        self.plain = plain
        if data is not None or str(path) == STDIN:
            if data is None:
                data = sys.stdin.buffer.read()
            self._buffered = data
            raw: io.RawIOBase | io.BufferedIOBase = io.BytesIO(data)
            self.size: Optional[int] = len(data)
        else:
            check_readable(path)
            try:
                raw = open(path, "rb")  # noqa: SIM115 - closed in close()
            except OSError as exc:
                raise InputDataError(f"{path}: cannot read ({exc.strerror or exc})") from None
            self.size = os.fstat(raw.fileno()).st_size
        self._raw = raw
        # gzip by name, or (standard input, bytes in hand) by its magic number
        self.gzipped = not plain and (
            is_gzip(path) or (self._buffered is not None and self._buffered[:2] == b"\x1f\x8b")
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
                raise InputDataError(f"{display_name(self.path)}: cannot read ({exc.strerror or exc})") from None
        else:
            try:
                b = self._gz.read(n)
            except (OSError, EOFError, zlib.error) as exc:
                raise InputDataError(f"{display_name(self.path)}: not a valid gzip file ({exc})") from None
        if b:
            self._check_lines(b)
            if not self.suspect:
                self.suspect = any(s in b for s in _SUSPECT)
        return b

    def _check_lines(self, b: bytes) -> None:
        """Refuse a line longer than :data:`MAX_LINE_BYTES` as soon as the reading passes its limit."""
        first = b.find(b"\n")
        if first < 0:
            self._line_run += len(b)
        elif self._line_run + first > MAX_LINE_BYTES:
            self._line_run += first
        else:
            self._lines += 1
            self._line_run = 0
            start = first + 1
            if len(b) - start > MAX_LINE_BYTES:  # (a read larger than the limit: every line in it)
                while (nl := b.find(b"\n", start)) >= 0 and nl - start <= MAX_LINE_BYTES:
                    self._lines += 1
                    start = nl + 1
                if nl >= 0:
                    self._line_run = nl - start
            if self._line_run <= MAX_LINE_BYTES:
                self._lines += b.count(b"\n", start)
                self._line_run = len(b) - b.rfind(b"\n") - 1
        if self._line_run > MAX_LINE_BYTES:
            raise InputDataError(
                f"{display_name(self.path)}: line {self._lines + 1} is longer than "
                + (f"{MAX_LINE_BYTES >> 20} MB " if MAX_LINE_BYTES >= 1 << 20 else f"{MAX_LINE_BYTES} bytes ")
                + 
                "(a file without line ends, or not a CSV file)"
            )

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

    def unread(self, text: bytes) -> None:
        """Make ``text`` the bytes :meth:`read` gives first (in place of those pending), noting a token
        the fast path cannot judge in it."""
        self._pending = text
        self.suspect = self.suspect or any(x in text for x in _SUSPECT)

    @property
    def local(self) -> bool:
        """Whether the text is a file's own bytes on disk: not standard input nor bytes in hand, not
        compressed, not transcoded (a reader may then parse the file by its path)."""
        return (self._buffered is None and not self.gzipped and not self.plain
                and isinstance(self._raw, io.BufferedReader))

    def consume(self) -> None:
        """Read the rest of the stored bytes (hashed, reported to progress, looked at for a token the
        fast path cannot judge) without keeping them: for a caller that parses the file by its path."""
        self._pending = b""
        while True:
            b = self._text_read(_BLOCK)
            if not b:
                return

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
    """The stored-bytes side of a :class:`Source`, as a file for ``gzip``."""

    def __init__(self, src: Source):
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
        return InputDataError(f"{display_name(path)}: not a text file (UTF-8 expected){where}")
    name, flag = guess
    return InputDataError(
        f"{display_name(path)}: not UTF-8{where}; it looks like {name} — re-save it as UTF-8 or pass --encoding {flag}"
    )


def check_readable(path: Path) -> None:
    """Raise :class:`InputDataError` when ``path`` does not exist or is a directory."""
    if not path.exists():
        raise InputDataError(f"{path}: file not found")
    if path.is_dir():
        raise InputDataError(f"{path}: is a directory, expected a CSV file")


def transcode(path: Path, data: Optional[bytes], encoding: str) -> tuple[bytes, str]:
    """The file's text in ``encoding`` as UTF-8 bytes (decompressed), and the SHA-256 of its stored bytes."""
    if data is None:
        if str(path) == STDIN:
            data = sys.stdin.buffer.read()
        else:
            check_readable(path)
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise InputDataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    sha = hashlib.sha256(data).hexdigest()
    raw = data
    if is_gzip(path) or raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputDataError(f"{display_name(path)}: not a valid gzip file ({exc})") from None
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputDataError(f"{display_name(path)}: line {line}: not valid {encoding} text") from None
    return text.encode("utf-8"), sha

