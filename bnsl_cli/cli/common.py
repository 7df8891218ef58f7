"""Shared helpers of the CLI layer: the stderr console, error handling, shard path expansion."""

from __future__ import annotations

import glob
import json
import os
import sys
from pathlib import Path
from typing import Iterable, Optional

import typer
from rich.console import Console

#: Everything that is not a result goes to stderr.
err_console = Console(stderr=True, highlight=False)

STATE = {"debug": False}


def fail(message: str, code: int) -> "typer.Exit":
    """Print one clean line on stderr and return an Exit to raise.

    The message is plain text (paths and user input may hold ``[``), never rich markup."""
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, markup=True)
    return typer.Exit(code)


def print_json(obj) -> None:
    """Write a JSON document to stdout (results only go there)."""
    sys.stdout.write(json.dumps(obj, indent=2, allow_nan=False, default=_json_default) + "\n")
    sys.stdout.flush()


def _json_default(o):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def expand_shard_paths(items: Iterable[str], files_from: Optional[Path] = None) -> list[Path]:
    """Expand files, directories (their ``*.csv``), quoted globs and a ``--files-from`` list.

    Returns sorted, de-duplicated paths. Missing files are left in so the reader can name them.
    """
    from bnsl_cli.errors import InputDataError

    raw: list[str] = list(items)
    if files_from is not None:
        try:
            text = Path(files_from).read_text()
        except OSError as exc:
            raise InputDataError(f"{files_from}: cannot read file list ({exc.strerror or exc})") from None
        base = Path(files_from).parent
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                p = Path(line)
                raw.append(str(p if p.is_absolute() else base / p))
    out: list[Path] = []
    for item in raw:
        p = Path(item)
        if p.is_dir():
            found = sorted(p.glob("*.csv"))
            if not found:
                raise InputDataError(f"{p}: directory holds no *.csv files")
            out.extend(found)
        elif any(ch in item for ch in "*?[") and not p.exists():
            found = sorted(Path(x) for x in glob.glob(item))
            if not found:
                raise InputDataError(f"{item}: pattern matches no files")
            out.extend(found)
        else:
            out.append(p)
    seen: dict[str, Path] = {}
    for p in out:
        key = os.path.normpath(os.path.abspath(p))
        seen.setdefault(key, p)
    return sorted(seen.values(), key=lambda q: str(q))


def env_default(name: str):
    """Name of the ``BNSL_*`` environment variable for an option (used as ``envvar=``)."""
    return f"BNSL_{name.upper()}"


def _show_warning(message, category, filename, lineno, file=None, line=None):  # noqa: ARG001
    from rich.markup import escape

    err_console.print(f"[bold yellow]warning:[/] {escape(str(message))}", soft_wrap=True)


def guarded(func):
    """Wrap a command: library errors become one line on stderr and their exit code.

    ``--debug`` (or ``BNSL_DEBUG=1``) shows the traceback instead. Warnings from the library are
    printed as one ``warning:`` line each.
    """
    import functools
    import traceback
    import warnings

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from bnsl_cli.errors import BnslError

        old = warnings.showwarning
        warnings.showwarning = _show_warning
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("default")
                warnings.filterwarnings("ignore", category=DeprecationWarning)
                return func(*args, **kwargs)
        except typer.Exit:
            raise
        except BnslError as exc:
            if STATE["debug"]:
                traceback.print_exc()
            raise fail(str(exc), exc.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted; no output was left half-written", 130) from None
        except Exception as exc:  # an internal error: still one line unless --debug
            if STATE["debug"]:
                traceback.print_exc()
            raise fail(
                f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", 1
            ) from None
        finally:
            warnings.showwarning = old

    return wrapper
