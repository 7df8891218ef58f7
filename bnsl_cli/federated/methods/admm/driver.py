"""The coordinator side of the ADMM methods (``fed-sparse``: Fed-Sparse-BNSL, ADMM + PGCD, private:
DP-PGCD; ``fed-bnsl``: Fed-BNSL, Ng & Zhang 2022, private: one noisy covariance per participant):
the coordinator, the driver around the round loop (:func:`bnsl_cli.federated.methods.admm.protocol.run_admm`)
and the private variants' release lists. It imports no participant code (a test keeps it so); the
participant factories are bound in the registry.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from bnsl_cli.dag import finish_graph
from bnsl_cli.errors import ByzantineWarning, ConvergenceWarning, warn
from bnsl_cli.federated.methods.admm.coordinator import Coordinator, PenaltySchedule
from bnsl_cli.federated.outcome import AdmmFinal, AdmmOutcome, AdmmRound, AdmmTiming, PolishApplied, PolishSkipped
from bnsl_cli.federated import polish, standardize
from bnsl_cli.federated.methods.admm.protocol import RunLog, run_admm
from bnsl_cli.federated.methods.admm.update_guard import UpdateGuard
from bnsl_cli.privacy.defaults import POLISH_CLIP
from bnsl_cli.privacy.release_plan import dp_fed_bnsl_releases, dp_pgcd_releases
from bnsl_cli.privacy.releases import ReleaseKind

__all__ = [
    "ENCODING",
    "coordinator_for",
    "update_guard",
    "drive_admm",
    "reply_rules",
    "dp_pgcd_builder",
    "dp_fed_bnsl_builder",
]


# ----------------------------------------------------------------------------------------------
# privacy: the release lists
# ----------------------------------------------------------------------------------------------


def dp_pgcd_builder(**kw):
    """``ρ* -> releases`` of DP-Fed-Sparse-BNSL for the plan's shape."""
    return lambda rho_star: dp_pgcd_releases(rho_star, **kw)


def dp_fed_bnsl_builder(*, mean_share, moment_share, value_bound_given, **_):
    """``ρ* -> releases`` of DP-Fed-BNSL for the plan's shape."""
    return lambda rho_star: dp_fed_bnsl_releases(
        rho_star, mean_share=mean_share, moment_share=moment_share, value_bound_given=value_bound_given
    )


# ----------------------------------------------------------------------------------------------
# the coordinator driver of the ADMM methods (fed-sparse, fed-bnsl; private or not)
# ----------------------------------------------------------------------------------------------


#: What the ADMM methods' messages carry (the report's ``communication.encoding``).
ENCODING = (
    "18-byte header per message; entries as int32 flat index + float64 value; "
    "W as the smallest of dense, sparse pairs and support delta"
)


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


def _polish_entry(spec, stage, W: np.ndarray) -> tuple[np.ndarray, Optional[Union[PolishApplied, PolishSkipped]]]:
    """The polished DAG and the polish's entry (the thresholded consensus when off)."""
    if stage is None:
        return W, (PolishSkipped("--no-polish") if spec.polishable else None)
    if stage.result is None:
        return W, PolishSkipped("nothing to polish (no edges or candidates, or a diverged run)")
    entry = stage.entry()
    return (stage.result.W if entry.applied else W), entry


def reply_rules(plan) -> dict:
    """What the ADMM methods' replies may hold (:mod:`bnsl_cli.federated.reply_limits`): the column
    statistics' shares (:func:`bnsl_cli.federated.standardize.reply_rules`) and the polish's second
    moments (:func:`bnsl_cli.federated.polish.reply_rules`). The updates themselves depend on the
    rounds' state: the coordinator checks them (:mod:`bnsl_cli.federated.methods.admm.update_guard`)."""
    return {**standardize.reply_rules(plan), **polish.reply_rules(plan)}


def coordinator_for(spec, plan) -> Coordinator:
    """The coordinator of an ADMM plan (fed-sparse, fed-bnsl) for its method's ``spec``.

    Under ``--dp`` fed-sparse's W-step runs without the speed devices of non-private runs: no screen
    and no tolerance schedule (a fixed ``server_ftol`` from the first round). Both only move a
    private run's noisy path, in either direction, without making it faster: measured at d = 200,
    ε = 10, the schedule took 3,782 evaluations of h against 3,633 without it, and on the accuracy
    grid's private cells it changed every seed's graph (benchmarks/RESULTS.md, "Acyclicity default").
    Without them a private run follows the path the accuracy grid measured."""
    pen = plan.penalty
    schedule = PenaltySchedule(pen.rho1, pen.rho2, pen.growth1, pen.growth2, pen.cap)
    if spec.sparse_updates:
        private = {"screen": 0.0, "ftol_start": 0.0} if plan.private else {}
        coord = Coordinator(
            plan.d, plan.P, schedule, snap=plan.snap, ftol=plan.server_ftol, acyclicity=plan.acyclicity, **private
        )
    else:
        coord = Coordinator(
            plan.d, plan.P, schedule, l1=plan.lam, dense=True, ftol=plan.server_ftol, acyclicity=plan.acyclicity
        )
    coord.forbidden, coord.required = plan.forbidden_mask(), plan.required_mask()
    return coord


def update_guard(spec, plan, fleet) -> Optional[UpdateGuard]:
    """The check of the sites' updates (:mod:`bnsl_cli.federated.methods.admm.update_guard`): the descent bound in
    non-private runs (the sites' second moments bounded by their shares of the pooled variances, read
    from the fleet's reply limits), the robust comparison in every run; ``None`` when the updates
    arrive securely summed (fed-bnsl under a secure sum: no site's update is seen)."""
    if fleet.secure_sum and not spec.sparse_updates:
        return None
    limits = getattr(fleet, "limits", None)
    within = None if limits is None or plan.private else limits.within_moments
    return UpdateGuard(plan.P, plan.d, lam=plan.lam if spec.sparse_updates else 0.0, within=within)


def drive_admm(spec, plan, fleet, progress=None) -> AdmmOutcome:
    """Coordinator side of fed-sparse / fed-bnsl: the ADMM rounds, the polish exchange (fed-sparse),
    the stop broadcast, then the participants' summaries."""
    coord = coordinator_for(spec, plan)
    stage = None
    if plan.polish:
        noise = None
        if plan.private:
            noise = (plan.privacy.multiplier(ReleaseKind.POLISH), POLISH_CLIP, plan.P)
        stage = polish.PolishStage(
            plan.threshold, plan.n_total, noise=noise, threshold_given=plan.threshold_given, knowledge=plan.knowledge,
            standardized=plan.standardize,
        )
    guard = update_guard(spec, plan, fleet)
    log = run_admm(
        coord, fleet, plan.rounds, h_tol=plan.h_tol, gap_tol=plan.gap_tol, threshold=plan.threshold,
        progress=progress, polish=stage, guard=guard,
    )
    summaries = fleet.finish()
    label = plan.method + (" --dp" if plan.private else "")
    W_raw = coord.W.copy()
    W, removed = finish_graph(W_raw, plan.threshold, label, plan.names, plan.knowledge)
    W, polish_info = _polish_entry(spec, stage, W)
    # the polish's search decides the edges; its own threshold (the user's, or any private run's) after it
    applied = stage.final_threshold if isinstance(polish_info, PolishApplied) else plan.threshold
    converged, warning = _convergence(log, plan, plan.method + (" (dp)" if plan.private else ""))
    warn_list = []
    if guard is not None:
        warn(guard.warnings(), ByzantineWarning, warn_list)
    if warning is not None:
        warn([warning], ConvergenceWarning, warn_list)
    issues = list(coord.solver_issues)
    if issues:
        first = issues[0]
        where = ", ".join(f"{k} {first[k]}" for k in ("round", "status", "message") if k in first)
        text = (
            f"{len(issues)} L-BFGS solve(s) of the coordinator's W-step did not converge"
            + (f" (first: {where})" if where else "")
            + "; the consensus may be inaccurate. Raise --rounds or lower --rho2-growth"
        )
        warn([text], ConvergenceWarning, warn_list)
    history = [AdmmRound(**record) for record in log.history]
    last = history[-1]
    return AdmmOutcome(
        W_raw, W, summaries,
        threshold_applied=applied,
        rounds=log.rounds,
        converged=converged,
        timing=AdmmTiming(
            participants_s=[s["compute_s"] for s in summaries],
            server_s=coord.server_s,
            server_evaluations=coord.lbfgs_evals,
            protocol_s=log.wall_s,
        ),
        messages=ENCODING,
        warnings=warn_list,
        stopped_early=log.stopped_early,
        final=AdmmFinal(h=last.h, gap=last.gap, objective=last.objective),
        history=history,
        removed_for_acyclicity=removed,
        polish=polish_info,
        solver_issues=issues,
    )
