"""Shared helpers of the CLI layer: the stderr console, error handling, shard path expansion."""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path
from typing import Iterable, Optional

import typer
from rich.console import Console


def _stderr_console() -> Console:
    """Everything that is not a result goes to stderr. On a terminal rich wraps at its width; in a
    pipe or a log file (no TTY, no ``COLUMNS``) lines are never hard-wrapped at 80 columns."""
    console = Console(stderr=True, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=True, highlight=False, soft_wrap=True, width=10_000)
    return console


#: Everything that is not a result goes to stderr.
err_console = _stderr_console()

STATE = {"debug": False}


#: The longest error line printed: a message that quotes user input (a cell, a name) is cut in the
#: middle beyond this (the longest message bnsl writes itself is about 800), so that a 70,000-digit cell
#: does not become a 70 kB line.
MAX_ERROR_CHARS = 1200


def clip_line(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``message`` on one line, at most ``limit`` characters (the middle replaced by `` … ``)."""
    line = " ".join(str(message).split("\n"))
    if len(line) <= limit:
        return line
    keep = (limit - 3) // 2
    return f"{line[:keep]} … {line[-keep:]}"


def fail(message: str, code: int) -> "typer.Exit":
    """Print one clean line on stderr and return an Exit to raise.

    The message is plain text (paths and user input may hold ``[``), never rich markup; it is cut to
    :data:`MAX_ERROR_CHARS`."""
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(clip_line(message))}", soft_wrap=True, markup=True)
    return typer.Exit(code)


def print_table(renderable, to_stderr: bool = False) -> None:
    """Print a rich table (or any renderable) as a result (stdout) or as context (stderr). On a
    terminal rich lays it out at the terminal's width; in a pipe or a file it is drawn at its own
    natural width, without colour codes and without the trailing spaces that pad every line to the
    widest one, so that ``| less``, ``> file`` and diffs see plain text."""
    console = err_console if to_stderr else Console(highlight=False)
    if console.is_terminal:
        console.print(renderable)
        return
    import io

    width = Console(width=100_000).measure(renderable).maximum
    sink = io.StringIO()
    Console(width=max(width, 40), color_system=None, highlight=False, file=sink).print(renderable)
    text = "\n".join(line.rstrip() for line in sink.getvalue().splitlines())
    stream = sys.stderr if to_stderr else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def print_json(obj) -> None:
    """Write a JSON document to stdout (results only go there), strict as :func:`json_text`."""
    sys.stdout.write(json_text(obj))
    sys.stdout.flush()


def finite_json(obj):
    """Strict-JSON values: :func:`bnsl_cli.io.run_folder.finite_json`."""
    from bnsl_cli.io.run_folder import finite_json as strict

    return strict(obj)


def json_text(obj, indent: int = 2) -> str:
    """``obj`` as strict JSON text: :func:`bnsl_cli.io.run_folder.json_text`."""
    from bnsl_cli.io.run_folder import json_text as text

    return text(obj, indent)


#: The data files a directory of shards contributes.
DATA_PATTERNS = ("*.csv", "*.tsv", "*.csv.gz", "*.tsv.gz")


def expand_shard_paths(items: Iterable[str], files_from: Optional[Path] = None) -> list[Path]:
    """Expand files, directories (their ``*.csv``, ``*.tsv`` and gzipped ones), quoted globs and a
    ``--files-from`` list (one path a line; relative paths are relative to the current directory,
    like ``tar -T`` or ``rsync --files-from``; ``#`` starts a comment line; ``-``: the list is read
    from standard input).

    Returns sorted, de-duplicated paths. Missing files are left in so the reader can name them.
    ``-`` (standard input) is kept as is.
    """
    from bnsl_cli.errors import InputDataError

    raw: list[str] = list(items)
    if files_from is not None:
        if str(files_from) == "-":  # the list on standard input (then no shard can be read from it)
            if "-" in raw:
                raise InputDataError("--files-from - and a shard - both read standard input; choose one")
            text = sys.stdin.read()
        else:
            try:
                text = Path(files_from).read_text()
            except OSError as exc:
                raise InputDataError(f"{files_from}: cannot read file list ({exc.strerror or exc})") from None
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                raw.append(line)
    out: list[Path] = []
    for item in raw:
        p = Path(item)
        if item == "-":
            out.append(p)
        elif p.is_dir():
            found = sorted(q for pat in DATA_PATTERNS for q in p.glob(pat))
            if not found:
                raise InputDataError(f"{p}: directory holds no *.csv (or .tsv, .csv.gz) files")
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
        key = "-" if str(p) == "-" else os.path.normpath(os.path.abspath(p))
        seen.setdefault(key, p)
    return sorted(seen.values(), key=lambda q: str(q))


def from_env(ctx: "typer.Context", name: str) -> bool:
    """Whether the option ``name`` (its parameter name) took its value from a ``BNSL_*`` variable."""
    try:
        src = ctx.get_parameter_source(name)
    except Exception:  # pragma: no cover - older click
        return False
    return src is not None and getattr(src, "name", "") == "ENVIRONMENT"


#: the input size (bytes) from which reading it shows progress
LARGE_READ_BYTES = 32 << 20


def read_progress(quiet: bool, console: Optional[Console] = None):
    """A ``progress(bytes_read, total)`` callback for the data reader, or None.

    On a terminal: a transient bar once the input is large (≥ :data:`LARGE_READ_BYTES`). Elsewhere:
    one line when a large read starts and one when it ends. ``--quiet``: nothing. Call ``.close()``
    after reading. ``console``: where it writes (default: standard error).
    """
    if quiet:
        return None
    return _ReadProgress(err_console if console is None else console)


class _ReadProgress:
    LARGE = LARGE_READ_BYTES

    def __init__(self, console: Console):
        import time

        self.console = console
        self.t0 = time.perf_counter()
        self.bar = None
        self.task = None
        self.started = False
        self.done = 0
        self.total = None

    def __call__(self, done: int, total: Optional[int]) -> None:
        self.done, self.total = done, total
        if not self.started:
            if (total or done) < self.LARGE:
                return
            self.started = True
            if self.console.is_terminal:
                from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

                self.bar = Progress("reading", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                    console=self.console, transient=True)
                self.bar.start()
                self.task = self.bar.add_task("read", total=total)
            else:
                size = f"{total / 1e6:.0f} MB" if total else "input"
                self.console.print(f"reading {size} …", highlight=False, markup=False)
        if self.bar is not None:
            self.bar.update(self.task, completed=done)

    def close(self) -> None:
        import time

        if self.bar is not None:
            self.bar.stop()
        if self.started:
            dt = time.perf_counter() - self.t0
            self.console.print(f"read {self.done / 1e6:.0f} MB in {dt:.1f} s", highlight=False, markup=False)


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
        except BrokenPipeError:
            _abort_outputs()
            quiet_pipe_exit()
        except BnslError as exc:
            if STATE["debug"]:
                traceback.print_exc()
            raise fail(str(exc), exc.exit_code) from None
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (errors.Terminated)
            _abort_outputs()
            raise fail(*interrupted_message(exc)) from None
        except Exception as exc:  # an internal error: still one line unless --debug
            if STATE["debug"]:
                traceback.print_exc()
            raise fail(
                f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", 1
            ) from None
        finally:
            _abort_outputs()  # an output folder not committed by now belongs to a failed run
            warnings.showwarning = old

    return wrapper


def interrupted_message(exc: BaseException) -> tuple[str, int]:
    """The one error line and exit code of a command stopped by Ctrl-C (130) or SIGTERM (143)."""
    from bnsl_cli.errors import Terminated

    if isinstance(exc, Terminated):
        return "terminated (SIGTERM); no output was left half-written", exc.exit_code
    return "interrupted; no output was left half-written", 130


def handle_sigterm() -> None:
    """SIGTERM (``kill``, Slurm, systemd) raises :class:`~bnsl_cli.errors.Terminated` in the main
    thread, so a command stops as on Ctrl-C: one line, its cleanup run, exit 143. The handler
    fires once: a second SIGTERM during the cleanup is ignored (SIGKILL still ends the process)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def on_term(signum, frame):  # noqa: ARG001
        from bnsl_cli.errors import Terminated

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    signal.signal(signal.SIGTERM, on_term)


def quiet_pipe_exit() -> None:
    """The reader of stdout went away (``bnsl … | head``): end quietly with 141 (128 + SIGPIPE, what
    a process killed by the signal reports), like other Unix tools — no error line, no traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's final flush of stdout must not fail again
    except (OSError, ValueError, AttributeError):
        pass
    sys.exit(141)


def _abort_outputs() -> None:
    import sys as _sys

    mod = _sys.modules.get("bnsl_cli.io.outdir")
    if mod is not None:
        mod.abort_pending()
