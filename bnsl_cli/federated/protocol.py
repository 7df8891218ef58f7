"""The ADMM round loop between a coordinator and its participants, with byte accounting.

Participants are reached through a *fleet* (:mod:`bnsl_cli.federated.fleet`) that delivers the
encoded broadcast and returns the encoded replies: in this process, or in worker processes —
moving participants elsewhere changes only the fleet. A plain list of callables
(``Participant.handle``) is accepted too. The coordinator driver of the ADMM methods is
:func:`bnsl_cli.federated.methods.admm.drive_admm`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from bnsl_cli.federated.coordinator import Coordinator
from bnsl_cli.federated.fleet import LocalFleet

__all__ = ["RunLog", "run_admm"]


@dataclass
class RunLog:
    rounds: int = 0
    stopped_early: bool = False
    history: list = field(default_factory=list)
    bytes_up: np.ndarray = None  # (rounds, P)
    bytes_down: np.ndarray = None  # (rounds + 1, P); the last row is the final stop broadcast
    wall_s: float = 0.0
    polish_up: np.ndarray = None  # (P,) bytes of the polish exchange (zeros when there is none)
    polish_down: np.ndarray = None


def run_admm(
    coordinator: Coordinator,
    fleet,
    max_rounds: int,
    *,
    h_tol: float = 1e-8,
    gap_tol: float = 1e-3,
    threshold: float = 0.3,
    progress: Optional[Callable[[dict], None]] = None,
    polish=None,
) -> RunLog:
    """Run at most ``max_rounds`` ADMM rounds; stop early when ``h(W) ≤ h_tol`` and
    ``max_p ‖B_p − W‖_max ≤ gap_tol``. With ``polish`` (a
    :class:`~bnsl_cli.federated.polish.PolishStage`), one second-moment exchange follows the rounds.
    Ends with a stop broadcast that delivers the final consensus W to every participant."""
    if not hasattr(fleet, "exchange"):
        fleet = LocalFleet(fleet)
    t0 = time.perf_counter()
    P = len(fleet)
    up_rows, down_rows, history = [], [], []
    stopped = False
    for _ in range(max_rounds):
        t_round = time.perf_counter()
        msg = coordinator.broadcast()
        down = np.full(P, len(msg), dtype=np.int64)
        up = np.zeros(P, dtype=np.int64)
        t_local = time.perf_counter()
        for p, reply in enumerate(fleet.exchange(msg)):
            if reply is not None:
                up[p] = len(reply)
                coordinator.receive(reply)
        t_local = time.perf_counter() - t_local
        info = coordinator.step()
        W = coordinator.W
        info["edges"] = int(np.count_nonzero(np.abs(W) > threshold))
        info["support"] = [[int(i), int(j), float(W[i, j])] for i, j in zip(*np.nonzero(np.abs(W) > threshold))]
        info["bytes_up"] = int(up.sum())
        info["bytes_down"] = int(down.sum())
        info["local_s"] = t_local
        info["round_s"] = time.perf_counter() - t_round
        up_rows.append(up)
        down_rows.append(down)
        history.append(info)
        if progress is not None:
            progress(info)
        if not np.isfinite(info["h"]):
            break
        if info["h"] <= h_tol and info["gap"] <= gap_tol:
            stopped = True
            break
    polish_up = np.zeros(P, dtype=np.int64)
    polish_down = np.zeros(P, dtype=np.int64)
    if polish is not None and history and np.all(np.isfinite(coordinator.W)):
        request = polish.request(coordinator.W, len(history) + 1)
        if request is not None:
            replies = fleet.exchange(request)
            polish_down[:] = len(request)
            polish_up[:] = [len(r) for r in replies]
            polish.receive(replies)
    final = coordinator.broadcast(stop=True)
    fleet.exchange(final)
    down_rows.append(np.full(P, len(final), dtype=np.int64))
    return RunLog(
        rounds=len(history),
        stopped_early=stopped,
        history=history,
        bytes_up=np.array(up_rows).reshape(len(up_rows), P),
        bytes_down=np.array(down_rows).reshape(len(down_rows), P),
        wall_s=time.perf_counter() - t0,
        polish_up=polish_up,
        polish_down=polish_down,
    )
