"""The ADMM round loop between a coordinator and its participants.

Participants are reached through a *fleet* (:mod:`bnsl_cli.federated.fleet`) that delivers the
encoded broadcast and returns the encoded replies: in this process, or in worker processes —
moving participants elsewhere changes only the fleet. A plain list of callables
(``Participant.handle``) is accepted too. The coordinator driver of the ADMM methods is
:func:`bnsl_cli.federated.methods.admm.drive_admm`.

The loop counts no bytes: it tells the fleet's meter (``fleet.traffic``,
:mod:`bnsl_cli.federated.traffic`) which exchange it is in — the round number, ``"polish"``,
``"final"`` — and the fleet counts what it carries.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from bnsl_cli.federated.methods.admm.coordinator import Coordinator
from bnsl_cli.federated.fleet import LocalFleet
from bnsl_cli.federated.traffic import FINAL, POLISH

__all__ = ["RunLog", "run_admm"]


@dataclass
class RunLog:
    rounds: int = 0
    stopped_early: bool = False
    history: list = field(default_factory=list)
    wall_s: float = 0.0


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
    guard=None,
) -> RunLog:
    """Run at most ``max_rounds`` ADMM rounds; stop early when ``h(W) ≤ h_tol`` and
    ``max_p ‖B_p − W‖_max ≤ gap_tol``. With ``polish`` (a
    :class:`~bnsl_cli.federated.polish.PolishStage`), one second-moment exchange follows the rounds.
    Ends with a stop broadcast that delivers the final consensus W to every participant.
    ``progress`` gets each round's record and the round's bytes as the fleet counted them. ``guard``
    (an :class:`~bnsl_cli.federated.methods.admm.update_guard.UpdateGuard`) checks every round's updates against
    the coordinator's state before the W-step."""
    if not hasattr(fleet, "exchange"):
        fleet = LocalFleet(fleet)
    t0 = time.perf_counter()
    history = []
    stopped = False
    for _ in range(max_rounds):
        t_round = time.perf_counter()
        rnd = len(history) + 1
        fleet.traffic.enter(rnd)
        msg = coordinator.broadcast()
        if guard is not None:
            guard.before(coordinator)
        t_local = time.perf_counter()
        for reply in fleet.exchange(msg):
            if reply is not None:
                coordinator.receive(reply)
        t_local = time.perf_counter() - t_local
        if guard is not None:
            guard.after(coordinator)
        info = coordinator.step()
        W = coordinator.W
        info["edges"] = int(np.count_nonzero(np.abs(W) > threshold))
        info["support"] = [[int(i), int(j), float(W[i, j])] for i, j in zip(*np.nonzero(np.abs(W) > threshold))]
        info["local_s"] = t_local
        info["round_s"] = time.perf_counter() - t_round
        history.append(info)
        if progress is not None:
            progress({**info, **fleet.traffic.totals([rnd])})
        if not np.isfinite(info["h"]):
            break
        if info["h"] <= h_tol and info["gap"] <= gap_tol:
            stopped = True
            break
    if polish is not None and history and np.all(np.isfinite(coordinator.W)):
        request = polish.request(coordinator.W, len(history) + 1)
        if request is not None:
            fleet.traffic.enter(POLISH)
            polish.receive(fleet.exchange(request))
    fleet.traffic.enter(FINAL)
    fleet.exchange(coordinator.broadcast(stop=True))
    return RunLog(rounds=len(history), stopped_early=stopped, history=history, wall_s=time.perf_counter() - t0)
