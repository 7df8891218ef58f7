"""Atomic file output: write to a temporary file in the same directory, then rename.

A crash or Ctrl-C therefore never leaves a half-written file behind, and an existing file is only
replaced once its successor is complete. The file gets the mode an ordinary ``open()`` would give it
(``0o666 & ~umask``; an existing file keeps its mode), not the ``0o600`` of a temporary file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator, TextIO

from bnsl_cli.io.outdir import current_umask

__all__ = ["atomic_open", "atomic_write_text", "atomic_write_bytes"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", newline: str | None = "") -> Iterator[TextIO]:
    """Open a temporary sibling of ``path`` for writing; rename it onto ``path`` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            perm = os.stat(path).st_mode & 0o7777
        except OSError:
            perm = 0o666 & ~current_umask()
        if hasattr(os, "fchmod"):
            os.fchmod(fd, perm)
        kwargs = {} if "b" in mode else {"newline": newline, "encoding": "utf-8"}
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8, ``\\n`` line endings)."""
    with atomic_open(path, "w", newline="") as fh:
        fh.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as fh:
        fh.write(data)
