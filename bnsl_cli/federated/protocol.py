"""The ADMM round loop between a coordinator and its participants, with byte accounting.

Participants are reached through a *fleet* (:mod:`bnsl_cli.federated.fleet`) that delivers the
encoded broadcast and returns the encoded replies: in this process, or in worker processes —
moving participants elsewhere changes only the fleet. A plain list of callables
(``Participant.handle``) is accepted too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from bnsl_cli.federated.coordinator import Coordinator

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
    from bnsl_cli.federated.fleet import LocalFleet

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


# ----------------------------------------------------------------------------------------------
# the coordinator driver of the ADMM methods (fed-sparse, fed-bnsl; private or not)
# ----------------------------------------------------------------------------------------------


def communication_report(log: RunLog) -> dict:
    """Bytes up/down per participant and per round, from the encoded message lengths."""
    up, down = log.bytes_up, log.bytes_down
    P = up.shape[1]
    pu = log.polish_up if log.polish_up is not None else np.zeros(P, dtype=np.int64)
    pd = log.polish_down if log.polish_down is not None else np.zeros(P, dtype=np.int64)
    total_up, total_down = int(up.sum() + pu.sum()), int(down.sum() + pd.sum())
    return {
        "bytes_up": total_up,
        "bytes_down": total_down,
        "bytes_total": total_up + total_down,
        "polish": {"bytes_up": int(pu.sum()), "bytes_down": int(pd.sum())},
        "per_participant": [
            {
                "participant": p + 1,
                "bytes_up": int(up[:, p].sum() + pu[p]),
                "bytes_down": int(down[:, p].sum() + pd[p]),
            }
            for p in range(P)
        ],
        "per_round": [
            {"round": r + 1, "bytes_up": int(up[r].sum()), "bytes_down": int(down[r].sum())}
            for r in range(up.shape[0])
        ]
        + ([{"round": "polish", "bytes_up": int(pu.sum()), "bytes_down": int(pd.sum())}] if pd.sum() else [])
        + [{"round": "final", "bytes_up": 0, "bytes_down": int(down[-1].sum())}],
        "encoding": "18-byte header per message; entries as int32 flat index + float64 value; W as the smallest of dense, sparse pairs and support delta",
    }


def _convergence(log: RunLog, plan, label: str) -> tuple[bool, Optional[str]]:
    """``(converged, warning)``: the warning (with the numbers and what to change) when the run
    stopped unconverged."""
    last = log.history[-1] if log.history else {"h": float("nan"), "gap": float("nan")}
    converged = bool(last["h"] <= plan.h_tol and last["gap"] <= plan.gap_tol)
    if converged or log.stopped_early:
        return converged, None
    what = []
    if not last["h"] <= plan.h_tol:
        what.append(f"h(W) = {last['h']:.2e} > {plan.h_tol:g}")
    if not last["gap"] <= plan.gap_tol:
        what.append(f"consensus gap max|B_p − W| = {last['gap']:.2e} > {plan.gap_tol:g}")
    if plan.private:
        # more rounds or steps spread the same budget thinner: different advice under --dp
        return converged, (
            f"{label} did not converge in {log.rounds} rounds ({'; '.join(what)}); the graph was thresholded "
            "and made acyclic anyway. Under --dp the noisy updates keep B_p from settling on W (the privacy "
            "guarantee is unaffected); a larger --epsilon lets them settle closer, while more --rounds or "
            "--steps spread the same budget over more noisy steps."
        )
    return converged, (
        f"{label} did not converge in {log.rounds} rounds ({'; '.join(what)}); "
        f"the graph was thresholded and made acyclic anyway. Raise --rounds (now {plan.rounds}) "
        f"or --steps (now {plan.steps}) for a converged result."
    )


def _polish_entry(stage, W: np.ndarray, plan) -> tuple[np.ndarray, Optional[dict]]:
    """The polished DAG and the report's ``polish`` entry (the thresholded consensus when off)."""
    if stage is None:
        return W, ({"applied": False, "reason": "--no-polish"} if plan.method == "fed-sparse" else None)
    if stage.result is None:
        return W, {"applied": False, "reason": "nothing to polish (no edges or candidates, or a diverged run)"}
    info = dict(stage.result.info)
    if info.get("applied"):
        return stage.result.W, info
    return W, info


def coordinator_for(plan) -> Coordinator:
    """The coordinator of an ADMM plan (fed-sparse, fed-bnsl).

    Under ``--dp`` fed-sparse's W-step runs without the speed devices of non-private runs: no screen
    and no tolerance schedule (a fixed ``server_ftol`` from the first round). Both only move a
    private run's noisy path, in either direction, without making it faster: measured at d = 200,
    ε = 10, the schedule took 3,782 evaluations of h against 3,633 without it, and on the accuracy
    grid's private cells it changed every seed's graph (benchmarks/RESULTS.md, "Acyclicity default").
    Without them a private run follows the path the accuracy grid measured."""
    from bnsl_cli.federated.coordinator import PenaltySchedule

    pen = plan.penalty
    schedule = PenaltySchedule(pen.rho1, pen.rho2, pen.growth1, pen.growth2, pen.cap)
    if plan.method == "fed-sparse":
        private = {"screen": 0.0, "ftol_start": 0.0} if plan.private else {}
        return Coordinator(
            plan.d, plan.P, schedule, snap=plan.snap, ftol=plan.server_ftol, acyclicity=plan.acyclicity, **private
        )
    return Coordinator(plan.d, plan.P, schedule, l1=plan.lam, dense=True, ftol=plan.server_ftol, acyclicity=plan.acyclicity)


def drive_admm(plan, fleet, progress=None):
    """Coordinator side of fed-sparse / fed-bnsl: the ADMM rounds, the polish exchange (fed-sparse),
    the stop broadcast, then the participants' summaries. Returns a
    :class:`~bnsl_cli.federated.roles.Outcome`."""
    import warnings

    from bnsl_cli.run import finish_graph
    from bnsl_cli.errors import ConvergenceWarning
    from bnsl_cli.federated.roles import Outcome

    coord = coordinator_for(plan)
    stage = None
    if plan.polish:
        from bnsl_cli.federated.polish import PolishStage
        from bnsl_cli.privacy.defaults import POLISH_CLIP
        from bnsl_cli.privacy.releases import ReleaseKind

        noise = None
        if plan.private:
            noise = (plan.privacy.multiplier(ReleaseKind.POLISH), POLISH_CLIP, plan.P)
        stage = PolishStage(plan.threshold, plan.n_total, noise=noise, threshold_given=plan.threshold_given)
    log = run_admm(
        coord, fleet, plan.rounds, h_tol=plan.h_tol, gap_tol=plan.gap_tol, threshold=plan.threshold,
        progress=progress, polish=stage,
    )
    summaries = fleet.finish()
    label = plan.method + (" --dp" if plan.private else "")
    W_raw = coord.W.copy()
    W, removed = finish_graph(W_raw, plan.threshold, label, plan.names)
    W, polish_info = _polish_entry(stage, W, plan)
    converged, warning = _convergence(log, plan, plan.method + (" (dp)" if plan.private else ""))
    warn_list = []
    if warning is not None:
        warnings.warn(warning, ConvergenceWarning, stacklevel=2)
        warn_list.append(warning)
    last = log.history[-1]
    report = {
        "rounds": log.rounds,
        "stopped_early": log.stopped_early,
        "converged": converged,
        "final": {"h": last["h"], "gap": last["gap"], "objective": last["objective"]},
        "history": log.history,
        "communication": communication_report(log),
        "timing": {
            "participants_s": [s["compute_s"] for s in summaries],
            "server_s": coord.server_s,
            "server_evaluations": coord.lbfgs_evals,
            "protocol_s": log.wall_s,
        },
        "removed_for_acyclicity": removed,
        "warnings": warn_list,
        "polish": polish_info,
    }
    issues = list(getattr(coord, "solver_issues", None) or [])
    report["solver_issues"] = issues
    if issues:
        first = issues[0]
        where = ", ".join(f"{k} {first[k]}" for k in ("round", "status", "message") if k in first)
        text = (
            f"{len(issues)} L-BFGS solve(s) of the coordinator's W-step did not converge"
            + (f" (first: {where})" if where else "")
            + "; the consensus may be inaccurate. Raise --rounds or lower --rho2-growth"
        )
        warnings.warn(text, ConvergenceWarning, stacklevel=2)
        warn_list.append(text)
    return Outcome(W_raw, W, report, summaries)
