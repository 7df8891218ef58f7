"""An output folder written as one unit.

A command that writes a folder (``learn --out``, ``refit --out``, ``split --out``) does so in four
steps, so that a folder never mixes files from two runs and a failed or interrupted run leaves the
folder as it was:

1. :meth:`OutputDir.prepare` (before any computation): the target must be a directory or absent,
   must not hold an input of the run, must not hold files of the same names that bnsl did not write
   (unless ``force``), must be writable; a lock (an advisory ``flock`` on ``.<name>.lock`` beside a
   new folder, ``.bnsl.lock`` inside an existing one) refuses a second run into the same folder while
   this one works; and an empty staging folder is made on the same file system
   (``.<name>.bnsl-tmp-<random>`` beside a new folder, ``.bnsl-tmp-<random>`` inside an existing one).
   Staging folders of the same name pattern found there once the lock is held were left by a run
   that was killed (SIGKILL) and are removed.
2. The command writes every output into the staging folder (:meth:`OutputDir.file`).
3. :meth:`OutputDir.commit`: a new target is the staging folder renamed (atomic). An existing target
   first loses its *marker* file (``report.json``, ``summary.json`` or ``manifest.json``: the file
   that says a folder is complete) and every file of an earlier run that this run does not write
   (the command's ``owned`` patterns, e.g. ``participant-*/edges.csv``), then receives the new files
   one by one (``os.replace``), the marker last. A folder with its marker is therefore always one
   run's complete output; files that match none of the patterns (the user's own) are kept.
4. Anything else — an error, Ctrl-C, SIGTERM — ends in :meth:`OutputDir.abort`: the staging folder is
   removed, the lock released, the target untouched.

Files and folders are created with the process's umask (``0o666 & ~umask``), like any other tool.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import posixpath
import re
import secrets
import shutil
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from bnsl_cli.errors import OutputDirError

__all__ = ["OutputDir", "OutputDirError", "abort_pending", "current_umask"]

_PENDING: list["OutputDir"] = []


def current_umask() -> int:
    """The process umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def abort_pending() -> None:
    """Abort every prepared, uncommitted output folder (the CLI calls this when a command ends)."""
    while _PENDING:
        _PENDING[-1].abort()


def _strerror(exc: OSError) -> str:
    return exc.strerror or str(exc)


class OutputDir:
    """One command's output folder; see the module docstring.

    ``names``: the files (relative paths) this run will write, known up front for the clash checks.
    ``owned``: glob patterns (relative, ``/``-separated) of every file this command ever writes —
    files matching them that this run does not write are an earlier run's, removed on commit.
    ``marker``: the file written last. ``is_ours(target)`` says whether an existing folder was
    written by this command (then its files may be replaced without ``force``).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        names: Iterable[str] = (),
        owned: Sequence[str] = (),
        marker: Optional[str] = None,
        inputs: Iterable[str | os.PathLike] = (),
        force: bool = False,
        is_ours: Optional[Callable[[Path], bool]] = None,
        option: str = "--out",
    ):
        self.path = Path(path)
        self.names = list(names)
        self.owned = list(owned)
        self.marker = marker
        self.inputs = [Path(p) for p in inputs if str(p) != "-"]
        self.force = force
        self.is_ours = is_ours
        self.option = option
        self.staging: Optional[Path] = None
        self._lock_fd: Optional[int] = None
        self._lock_path: Optional[Path] = None
        self._created_parents: list[Path] = []
        self.committed = False

    # -- step 1 ------------------------------------------------------------------------------
    def prepare(self) -> "OutputDir":
        """Every check that can fail, before any computation; takes the lock, makes the staging folder."""
        target = self.path
        shown = str(target)
        if target.exists() and not target.is_dir():
            raise OutputDirError(f"{shown}: exists and is not a directory; choose another {self.option}")
        resolved = target.resolve()
        if resolved.parent == resolved:
            raise OutputDirError(f"{shown}: cannot write into the file-system root; choose another {self.option}")
        targets = {(resolved / n).resolve() for n in self.names}
        for p in self.inputs:
            rp = p.resolve()
            if rp in targets or rp == resolved:
                raise OutputDirError(f"{p}: is an input and would be overwritten by the output in {shown}")
        if target.is_dir() and not self.force and not (self.is_ours is not None and self.is_ours(target)):
            clash = [n for n in self.names if (target / n).exists()]
            if clash:
                raise OutputDirError(
                    f"{shown}: already holds {clash[0]} that bnsl did not write; choose another {self.option} or pass --force"
                )
        if target.is_dir():  # lock and staging inside: its parent need not be writable (--out .)
            home, lock, stage_prefix = resolved, resolved / ".bnsl.lock", ".bnsl-tmp-"
        else:
            home = resolved.parent
            lock, stage_prefix = home / f".{resolved.name}.lock", f".{resolved.name}.bnsl-tmp-"
            self._make_parents(home)
        self._lock(lock, home)
        try:
            if self._lock_fd is not None:
                self._remove_stale_staging(home, stage_prefix)
            stage = home / f"{stage_prefix}{secrets.token_hex(4)}"
            try:
                os.mkdir(stage)  # mode 0o777 & ~umask
            except OSError as exc:
                raise OutputDirError(f"{shown}: cannot write into {home} ({_strerror(exc)}); choose another {self.option}") from None
            self.staging = stage
        except BaseException:
            self._unlock()
            raise
        _PENDING.append(self)
        return self

    @staticmethod
    def _remove_stale_staging(home: Path, prefix: str) -> None:
        """Staging folders of this target left by a run that was killed (SIGKILL, power loss):
        every run into the target holds the lock we now hold while its staging folder exists, so
        one found now belongs to no running process."""
        pattern = re.compile(re.escape(prefix) + r"[0-9a-f]{8}")
        try:
            entries = list(os.scandir(home))
        except OSError:
            return
        for entry in entries:
            if pattern.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)

    def _make_parents(self, parent: Path) -> None:
        missing = []
        p = parent
        while not p.exists():
            missing.append(p)
            p = p.parent
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                continue
            except OSError as exc:
                raise OutputDirError(f"{self.path}: cannot create {d} ({_strerror(exc)}); choose another {self.option}") from None
            self._created_parents.append(d)

    def _lock(self, lock: Path, home: Path) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no lock
            return
        while True:
            try:
                fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o666)
            except OSError as exc:
                raise OutputDirError(
                    f"{self.path}: cannot write into {home} ({_strerror(exc)}); choose another {self.option}"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise OutputDirError(
                        f"{self.path}: another bnsl run is writing into this folder (lock {lock}); "
                        f"wait for it or choose another {self.option}"
                    ) from None
                raise
            try:  # the holder before us may have removed the file: lock the one on disk
                same = os.fstat(fd).st_ino == os.stat(lock).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._lock_fd, self._lock_path = fd, lock
                return
            os.close(fd)

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._lock_path)
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- step 2 ------------------------------------------------------------------------------
    def file(self, rel: str) -> Path:
        """Where to write the output ``rel`` (inside the staging folder; parents created)."""
        if self.staging is None:
            raise RuntimeError("OutputDir.file() before prepare() or after commit()")
        p = self.staging / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_text(self, rel: str, text: str) -> None:
        with open(self.file(rel), "w", encoding="utf-8", newline="") as fh:
            fh.write(text)

    # -- step 3 ------------------------------------------------------------------------------
    def commit(self) -> None:
        """Move the staged outputs into the target as one unit (see the module docstring)."""
        if self.staging is None:
            raise RuntimeError("OutputDir.commit() before prepare()")
        stage, target = self.staging, self.path
        try:
            if not target.exists():
                os.rename(stage, target)
            else:
                self._merge(stage, target)
                shutil.rmtree(stage, ignore_errors=True)
        except OSError as exc:
            raise OutputDirError(f"{target}: could not move the outputs in ({_strerror(exc)})") from None
        self.staging = None
        self.committed = True
        self._created_parents = []
        self._unlock()
        with contextlib.suppress(ValueError):
            _PENDING.remove(self)

    def _staged_files(self, stage: Path) -> list[str]:
        out = []
        for root, dirs, files in os.walk(stage):
            dirs[:] = [d for d in dirs if not d.startswith(".bnsl-tmp-")]  # a staging folder inside
            for f in files:
                out.append(Path(os.path.relpath(os.path.join(root, f), stage)).as_posix())
        return sorted(out)

    def _merge(self, stage: Path, target: Path) -> None:
        new = self._staged_files(stage)
        new_set = set(new)
        if self.marker is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target / self.marker)
        for rel in self._existing_owned(target):
            if rel not in new_set:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(target / rel)
        order = [r for r in new if r != self.marker] + ([self.marker] if self.marker in new_set else [])
        for rel in order:
            dst = target / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(stage / rel, dst)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                shutil.move(str(stage / rel), str(dst))
        self._remove_empty_owned_dirs(target)

    def _existing_owned(self, target: Path) -> list[str]:
        if not self.owned:
            return []
        out = []
        for rel in self._staged_files(target):
            if any(fnmatch.fnmatchcase(rel, pat) for pat in self.owned):
                out.append(rel)
        return out

    def _remove_empty_owned_dirs(self, target: Path) -> None:
        """Folders an earlier run made (``participant-05/``) that are empty now."""
        dir_pats = [posixpath.dirname(p) for p in self.owned if "/" in p]
        if not dir_pats:
            return
        for root, subdirs, _files in os.walk(target, topdown=False):
            for s in subdirs:
                d = Path(root) / s
                rel = Path(os.path.relpath(d, target)).as_posix()
                if any(fnmatch.fnmatchcase(rel, pat) for pat in dir_pats):
                    with contextlib.suppress(OSError):
                        d.rmdir()  # only if empty

    # -- step 4 ------------------------------------------------------------------------------
    def abort(self) -> None:
        """Remove the staging folder and release the lock; the target is left as it was."""
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None
        self._unlock()  # the lock file lives in the parent: remove it before the parents we made
        for d in reversed(self._created_parents):
            with contextlib.suppress(OSError):
                d.rmdir()
        self._created_parents = []
        with contextlib.suppress(ValueError):
            _PENDING.remove(self)

    def __enter__(self) -> "OutputDir":
        return self.prepare() if self.staging is None else self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and not self.committed:
            self.commit()
        elif not self.committed:
            self.abort()
