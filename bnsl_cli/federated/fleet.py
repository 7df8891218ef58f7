"""How the coordinator reaches its participants: in this process, or in worker processes.

A fleet delivers one encoded broadcast to every participant and returns their encoded replies in
participant order. Only bytes cross between the coordinator and a worker process, exactly what
a network transport would carry. After the final (stop) broadcast, :meth:`finish` brings back
what the run report needs from each participant (its ``B_p``, timings, and the privacy-ledger
events it recorded), which in a real deployment each participant would keep and report itself.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from typing import Optional, Sequence

__all__ = ["LocalFleet", "ProcessFleet", "make_fleet", "default_workers"]


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
        self._send = [p if callable(p) and not hasattr(p, "handle") else p.handle for p in self.participants]

    def __len__(self) -> int:
        return len(self._send)

    def exchange(self, msg: bytes) -> list[Optional[bytes]]:
        return [send(msg) for send in self._send]

    def finish(self) -> list:
        """The participant objects themselves (their state is already here)."""
        return self.participants


def _state(p) -> dict:
    out = {"pid": p.pid, "B": p.B, "beta": p.beta, "compute_s": p.compute_s, "steps_taken": p.steps_taken}
    ledger = getattr(p, "ledger", None)
    if ledger is not None:
        out["events"] = ledger.events(p.pid)
    return out


def _worker(conn, participants) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle: one line, no traceback here
    try:
        while True:
            msg = conn.recv_bytes()
            replies = [p.handle(msg) for p in participants]
            conn.send(replies)
            if all(r is None for r in replies):  # the stop broadcast
                conn.send([_state(p) for p in participants])
                return
    except EOFError:  # the coordinator went away
        return
    finally:
        conn.close()


class ProcessFleet:
    """Participants spread over ``workers`` forked processes (round-robin), run in parallel."""

    def __init__(self, participants: Sequence, workers: int):
        ctx = mp.get_context("fork")
        self.n = len(participants)
        self.groups = [list(range(w, self.n, workers)) for w in range(workers)]
        self.participants = list(participants)
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
            for i, reply in zip(idx, conn.recv()):
                out[i] = reply
        return out

    def finish(self) -> list:
        """Bring back each participant's final state into this process's participant objects."""
        for idx, conn, proc in zip(self.groups, self.conns, self.procs):
            states = conn.recv()
            for i, st in zip(idx, states):
                p = self.participants[i]
                p.B, p.beta, p.compute_s, p.steps_taken = st["B"], st["beta"], st["compute_s"], st["steps_taken"]
                if "events" in st:
                    p.ledger.replace_events(p.pid, st["events"])
            conn.close()
            proc.join(timeout=10)
        return self.participants

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
            proc.join(timeout=5)


def make_fleet(participants: Sequence, workers: Optional[int]):
    """A :class:`ProcessFleet` when more than one worker is asked for and possible, else local."""
    w = default_workers(len(participants)) if workers is None else max(1, min(int(workers), len(participants)))
    if w <= 1 or "fork" not in mp.get_all_start_methods():
        return LocalFleet(participants)
    return ProcessFleet(participants, w)
