"""A site's run state, kept in its own state directory so that no ClientApp restart can reset it.

In a Flower deployment the SuperNode starts a fresh ClientApp process for every message. ``bnsl
join`` keeps its participant, its spend guard (the privacy ledger, the message sequence and the
counters) and its transcript in one long-lived process; here they live in one file per Flower run,
``STATE_DIR/run-<run id>.state``, in the directory the SuperNode's node configuration names
(``state-dir``; the coordinator cannot choose it). The rules:

- **Loaded before, written after, sent last.** Each message takes the run's lock, loads the state,
  answers, writes the new state (a temporary file, ``fsync``, an atomic ``rename``, ``fsync`` of the
  directory) and only then returns the reply to Flower. A reply never leaves before the state that
  records its releases is on disk. A crash before the write leaves the old state: the reply was never
  sent, and answering the same message again from the same state (the noise source is part of it)
  gives the same bytes, so nothing new is released.
- **One HELLO, then numbered messages.** The state is created by the run's HELLO request (number 1)
  and refuses a second one; every later request must carry the run's tag and the next number
  (2, 3, …). A replayed, repeated or skipped number, another run's tag, or anything after the run
  ended or was refused is refused: the site answers ABORT (``refused``), its state is marked
  closed, and every later message of that run is refused too.
- **Nothing resets it.** The state is never deleted by bnsl: a new Flower run gets a new file (and
  is a new run, as a new ``bnsl join`` is); the file of a run stays, closed, as its record. Delete
  it by hand only with the transcript.

The file holds the site's rows (inside its participant), this run's secure-sum private key and
its noise source: it is written with mode 0600 in a directory created with mode 0700. It is read
only by this site's own process (pickle: the directory is trusted as the CSV is).
"""

from __future__ import annotations

import contextlib
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path

from bnsl_cli.errors import BnslError

__all__ = ["STATE_VERSION", "RunStore", "SiteState", "key_noise"]

STATE_VERSION = 2


def key_noise(rng, key: bytes, seq: int, message: bytes) -> None:
    """Re-seed ``rng`` (in place, the participant's own generator) from this site's secret ``key``,
    the message number and the message's SHA-256, before the message is answered.

    A state file is the noise source's only home between messages, so a restored (older) copy would
    answer a *different* message with the *same* noise, and the difference of the two replies would be
    noise-free. Keyed this way, the same message gets the same noise (a retry after a crash sends the
    same bytes, as before) and any other message independent noise, whatever happens to the file. The
    key never leaves the site (it lives in the state file, as the rows do)."""
    import hashlib

    import numpy as np

    h = hashlib.sha256()
    h.update(b"bnsl flower noise v1|")
    h.update(bytes(key))
    h.update(int(seq).to_bytes(8, "little"))
    h.update(hashlib.sha256(bytes(message)).digest())
    seed = np.random.SeedSequence(int.from_bytes(h.digest(), "little"))
    rng.bit_generator.state = type(rng.bit_generator)(seed).state


@dataclass
class SiteState:
    """What a site keeps between the messages of one run."""

    run_id: int
    run_tag: str
    name: str
    seq: int = 1
    #: ``hello`` (HELLO sent, waiting for the plan), ``run`` (plan accepted), ``closed``
    phase: str = "hello"
    status: str = ""
    hello: dict = field(default_factory=dict)
    secure_key: bytes | None = None  # this run's X25519 private key, raw
    plan_body: dict | None = None
    guard: object | None = None  # the participant behind its SpendGuard (stored without its steps)
    private: bool = False
    summary: dict | None = None
    transcript: dict = field(default_factory=dict)  # bytes_sent, rho_total, the releases recorded
    #: the key of :func:`key_noise` (a private run without --seed): the noise of each message is keyed
    #: to it, the message number and the message, never reused by a restored state
    noise_key: bytes | None = None
    version: int = STATE_VERSION


def _pack_guard(guard):
    """A :class:`~bnsl_cli.net.policy.SpendGuard` as plain data: everything but the message-sequence
    steps (code, rebuilt from the plan on load)."""
    if guard is None:
        return None
    data = dict(guard.__dict__)
    data.pop("steps", None)
    return (type(guard), data)


def _unpack_guard(packed):
    if packed is None:
        return None
    from bnsl_cli.federated.site_sequence import steps_by_kind

    cls, data = packed
    guard = cls.__new__(cls)
    guard.__dict__.update(data)
    guard.steps = steps_by_kind(guard.plan.spec.site_sequence(guard.plan))
    return guard


class RunStore:
    """The state file of Flower run ``run_id`` in ``state_dir`` and its lock."""

    def __init__(self, state_dir, run_id: int):
        self.dir = Path(state_dir)
        self.run_id = int(run_id)
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise BnslError(f"state-dir {self.dir}: cannot create it ({exc.strerror or exc})") from None
        self.path = self.dir / f"run-{self.run_id}.state"
        self._lock_path = self.dir / f"run-{self.run_id}.lock"

    @contextlib.contextmanager
    def locked(self):
        """The run's lock (one message of a run at a time, across processes)."""
        import fcntl

        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> SiteState | None:
        """The run's state (``None``: none yet)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BnslError(f"state-dir: cannot read {self.path} ({exc.strerror or exc})") from None
        try:
            state = pickle.loads(raw)
        except Exception as exc:  # noqa: BLE001 - a damaged file is a refusal, never a fresh start
            raise BnslError(f"state-dir: {self.path} is damaged ({type(exc).__name__}); the run is refused") from None
        if not isinstance(state, SiteState) or state.version != STATE_VERSION or state.run_id != self.run_id:
            raise BnslError(f"state-dir: {self.path} is not this bnsl's state of run {self.run_id}; the run is refused")
        state.guard = _unpack_guard(state.guard)
        return state

    def save(self, state: SiteState) -> None:
        """Write ``state`` atomically and durably (temporary file, fsync, rename, fsync the folder)."""
        guard = state.guard
        state.guard = _pack_guard(guard)
        try:
            raw = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            state.guard = guard
        tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(raw)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            dfd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise BnslError(f"state-dir: cannot write {self.path} ({exc.strerror or exc}); nothing was sent") from None
