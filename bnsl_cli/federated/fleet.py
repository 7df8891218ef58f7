"""How the coordinator reaches its participants: in this process, or in worker processes.

A fleet delivers one encoded broadcast to every participant and returns their encoded replies in
participant order. Only bytes cross between the coordinator and a worker process, exactly what
a network transport would carry. At the end, :meth:`finish` brings back each participant's
JSON-able summary (:meth:`Participant.summary`: its ``B_p`` when asked for, timings, and the
privacy-ledger events it recorded, as dicts) — what a network transport would carry too.

Every fleet counts the bytes it carries in its :class:`~bnsl_cli.federated.traffic.Traffic` meter
(``fleet.traffic``): the message once per participant it reaches, every reply as it came back.

Every fleet validates the replies before the coordinator sees them
(:func:`~bnsl_cli.federated.messages.validate_reply`), and holds ``limits``: the
:class:`~bnsl_cli.federated.reply_limits.ReplyLimits` of the run, which ``run(plan, fleet)`` sets from
the plan (``None`` until then: the blanket checks only).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from typing import Optional, Sequence

from bnsl_cli.errors import BnslError, InvalidReplyError
from bnsl_cli.federated.messages import validate_reply
from bnsl_cli.federated.traffic import Traffic

__all__ = ["LocalFleet", "ProcessFleet", "make_fleet", "default_workers", "checked_replies", "checked_sum"]


def checked_replies(msg: bytes, replies: Sequence[Optional[bytes]], limits=None) -> list[Optional[bytes]]:
    """``replies`` (in participant order) after :func:`~bnsl_cli.federated.messages.validate_reply`
    (with the run's ``limits`` when given): the first bad one raises
    :class:`~bnsl_cli.errors.InvalidReplyError` naming its participant. Accepted replies are shown to
    ``limits`` (:meth:`~bnsl_cli.federated.reply_limits.ReplyLimits.seen`)."""
    for k, reply in enumerate(replies):
        why = validate_reply(msg, reply, k, limits=limits)
        if why is not None:
            raise InvalidReplyError(f"participant {k + 1} {why}; the run stopped")
    if limits is not None:
        limits.seen(msg, replies)
    return list(replies)


def checked_sum(msg: bytes, replies: Sequence[bytes], limits=None) -> list[bytes]:
    """Securely summed ``replies`` (the sum as the first, zeros for the others) after the sum's check
    against the sites' limits (:meth:`~bnsl_cli.federated.reply_limits.ReplyLimits.check_sum`): a sum
    beyond them raises :class:`~bnsl_cli.errors.InvalidReplyError`, naming no site (a secure sum
    cannot tell which sent it)."""
    if limits is not None and replies:
        why = limits.check_sum(msg, replies[0])
        if why is not None:
            raise InvalidReplyError(f"{why}; the run stopped")
        limits.seen(msg, replies)
    return list(replies)


def default_workers(n_participants: int) -> int:
    """Worker processes to use: the CPUs available to this process, at most one per participant."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, n_participants))


class LocalFleet:
    """All participants in this process (or any per-participant callables taking bytes)."""

    def __init__(self, participants: Sequence):
        self.participants = list(participants)
        self.workers = 1
        self.secure_sum = False  # every reply arrives in the clear
        self.limits = None  # the run's reply limits (run() sets them from the plan)
        self._send = [p if callable(p) and not hasattr(p, "handle") else p.handle for p in self.participants]
        self.traffic = Traffic(len(self._send))

    def __len__(self) -> int:
        return len(self._send)

    def exchange(self, msg: bytes) -> list[Optional[bytes]]:
        replies = [send(msg) for send in self._send]
        self.traffic.count(msg, replies)
        return checked_replies(msg, replies, self.limits)

    def finish(self) -> list[dict]:
        """Every participant's JSON-able summary, in participant order."""
        return [p.summary() for p in self.participants]

    def close(self) -> None:
        """Nothing to release (symmetry with :class:`ProcessFleet`)."""


#: The request that ends a worker: it answers with its participants' summaries. No protocol
#: message is empty (every one starts with a header).
_FINISH = b""


class _Failure:
    """A participant's error, carried back from a worker and raised again by the coordinator."""

    def __init__(self, exc: BaseException):
        self.exc = exc if isinstance(exc, BnslError) else None
        self.text = f"{type(exc).__name__}: {exc}"

    def reraise(self):
        if self.exc is not None:
            raise self.exc
        raise RuntimeError(f"a participant's worker process failed: {self.text}")


def _worker(conn, participants) -> None:
    import signal

    import numpy as np

    np.seterr(over="ignore", invalid="ignore", divide="ignore")  # no numpy warning reaches the user's terminal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle: one line, no traceback here
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # so is SIGTERM to the process group; the closed pipe ends us
    try:
        while True:
            msg = conn.recv_bytes()
            try:
                if msg == _FINISH:
                    conn.send([p.summary() for p in participants])
                    return
                conn.send([p.handle(msg) for p in participants])
            except Exception as exc:  # noqa: BLE001 - reported to the coordinator, which raises it
                conn.send(_Failure(exc))
                return
    except (EOFError, OSError, KeyboardInterrupt):  # the coordinator went away or was interrupted
        return
    finally:
        conn.close()


def _received(conn):
    got = conn.recv()
    if isinstance(got, _Failure):
        got.reraise()
    return got


class ProcessFleet:
    """Participants spread over ``workers`` forked processes (round-robin), run in parallel."""

    def __init__(self, participants: Sequence, workers: int):
        ctx = mp.get_context("fork")
        self.n = len(participants)
        self.groups = [list(range(w, self.n, workers)) for w in range(workers)]
        self.workers = len(self.groups)
        self.secure_sum = False
        self.limits = None  # the run's reply limits (run() sets them from the plan)
        self.participants = list(participants)
        self.traffic = Traffic(self.n)
        self.conns, self.procs = [], []
        for idx in self.groups:
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=_worker, args=(child, [participants[i] for i in idx]), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)

    def __len__(self) -> int:
        return self.n

    def exchange(self, msg: bytes) -> list[Optional[bytes]]:
        for conn in self.conns:
            conn.send_bytes(msg)
        out: list[Optional[bytes]] = [None] * self.n
        for idx, conn in zip(self.groups, self.conns):
            for i, reply in zip(idx, _received(conn)):
                out[i] = reply
        # a worker gets the message once for its participants; each of them is counted as reached
        self.traffic.count(msg, out)
        return checked_replies(msg, out, self.limits)

    def finish(self) -> list[dict]:
        """Every participant's JSON-able summary (from its worker), in participant order; the
        workers end."""
        out: list = [None] * self.n
        for conn in self.conns:
            conn.send_bytes(_FINISH)
        for idx, conn, proc in zip(self.groups, self.conns, self.procs):
            for i, summary in zip(idx, _received(conn)):
                out[i] = summary
            conn.close()
            proc.join(timeout=10)
        return out

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        import time

        # a worker ends when its pipe closes (it ignores SIGINT and SIGTERM); one still busy is killed
        deadline = time.monotonic() + 2.0
        for proc in self.procs:
            proc.join(timeout=max(deadline - time.monotonic(), 0.0))
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)


def make_fleet(participants: Sequence, workers: Optional[int]):
    """A :class:`ProcessFleet` when more than one worker is asked for and possible, else local."""
    w = default_workers(len(participants)) if workers is None else max(1, min(int(workers), len(participants)))
    if w <= 1 or "fork" not in mp.get_all_start_methods():
        return LocalFleet(participants)
    return ProcessFleet(participants, w)
