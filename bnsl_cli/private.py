"""Private learning runs: DP-Fed-Sparse-BNSL (DP-PGCD) and DP-Fed-BNSL (noisy covariances).

The noise is calibrated before round 1 for the maximum rounds × steps (so a run cannot overspend);
every release is recorded in a :class:`~bnsl_cli.privacy.ledger.PrivacyLedger` and the reported
(ε, δ) is computed from that ledger only. Neighbouring relation: replace one row of one participant.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import Optional

from bnsl_cli.errors import PrivacyBudgetError, ReproducibleNoiseWarning
from bnsl_cli.privacy.defaults import POLISH_SHARE

__all__ = ["DPConfig", "run_private", "default_delta", "CLIP_LEVELS"]

CLIP_LEVELS = ("auto", "adaptive", "static")
#: ``auto`` uses adaptive clip levels below this many variables, static ones from it on.
AUTO_STATIC_FROM_D = 50


@dataclass
class DPConfig:
    """Privacy options. ``delta=None`` means ``1/n_p²`` of the smallest participant."""

    epsilon: float
    delta: Optional[float] = None
    clip: float = 1.5
    selection_share: float = 0.5
    conversion: str = "tight"
    public_means: bool = False
    value_bound: Optional[float] = None
    clip_levels: str = "auto"
    polish_share: float = POLISH_SHARE  # of the whole budget, for the polish's second moments (fed-sparse)


def default_delta(rows: list[int]) -> float:
    """``1 / n_p²`` of the smallest participant."""
    return 1.0 / float(min(rows)) ** 2


def _check(dp: DPConfig) -> None:
    if not dp.clip > 0:
        raise PrivacyBudgetError(f"--clip must be > 0, got {dp.clip:g}")
    if dp.value_bound is not None and not dp.value_bound > 0:
        raise PrivacyBudgetError(f"--value-bound must be > 0, got {dp.value_bound:g}")
    if not 0.0 <= dp.polish_share < 1.0:
        raise PrivacyBudgetError(f"--polish-share must be in (0, 1), got {dp.polish_share:g}")
    if dp.clip_levels not in CLIP_LEVELS:
        raise PrivacyBudgetError(f"--clip-levels must be one of {', '.join(CLIP_LEVELS)}")


def run_private(tables, cfg, names, report, progress):
    from bnsl_cli.federated.coordinator import Coordinator, PenaltySchedule
    from bnsl_cli.federated.dp_participant import DPDenseParticipant, DPSparseParticipant, OneOffBudget
    from bnsl_cli.learn import (
        LearnResult, _finish_graph, _removed_json, _workers_used, apply_polish, communication_report, polish_stage,
        run_fleet,
    )
    from bnsl_cli.io.graphs import graph_to_json
    from bnsl_cli.privacy.calibrate import calibrate, dp_fed_bnsl_plan, dp_fed_bnsl_split
    from bnsl_cli.privacy.defaults import MEAN_SHARE, MOMENT_SHARE, POLISH_CLIP
    from bnsl_cli.privacy.ledger import PrivacyLedger
    from bnsl_cli.privacy.mechanisms import make_rng

    dp: DPConfig = cfg.dp
    _check(dp)
    if cfg.method == "fed-sparse" and cfg.polish and dp.polish_share == 0.0:
        raise PrivacyBudgetError("--polish-share 0 leaves the polish no budget; use --no-polish to skip it")
    d, P = len(names), len(tables)
    rows = [t.n for t in tables]
    n_total = int(sum(rows))
    delta = dp.delta if dp.delta is not None else default_delta(rows)
    mean_share = 0.0 if dp.public_means else MEAN_SHARE
    try:
        rng, seeded = make_rng(cfg.seed)
    except ValueError as exc:
        raise PrivacyBudgetError(f"--seed: {exc}") from None
    child_rngs = rng.spawn(P)
    ledger = PrivacyLedger()
    schedule = PenaltySchedule(cfg.rho1, cfg.rho2, cfg.rho1_growth, cfg.rho2_growth, cfg.rho_max)
    clip_levels = dp.clip_levels
    if clip_levels == "auto":
        clip_levels = "adaptive" if d < AUTO_STATIC_FROM_D else "static"

    stage = None  # DP-Fed-BNSL is not polished
    if cfg.method == "fed-sparse":
        plan = calibrate(
            dp.epsilon, delta, cfg.rounds, cfg.steps, dp.selection_share, MOMENT_SHARE, mean_share, dp.conversion,
            polish_share=dp.polish_share if cfg.polish else 0.0,
        )
        stage = polish_stage(cfg, n_total, noise=(plan.polish_multiplier, POLISH_CLIP, P))
        budget = OneOffBudget(plan.rho_means, plan.rho_moments, dp.value_bound)
        parts = [
            DPSparseParticipant(
                k, t.X, n_total, cfg.lam, cfg.steps,
                gumbel_multiplier=plan.gumbel_multiplier, sigma_multiplier=plan.sigma_multiplier,
                budget=budget, rng=child_rngs[k], ledger=ledger, clip=dp.clip, clip_levels=clip_levels,
                polish_multiplier=plan.polish_multiplier, polish_clip=POLISH_CLIP,
            )
            for k, t in enumerate(tables)
        ]
        coord = Coordinator(d, P, schedule, snap=cfg.snap)
        mechanism = "DP-PGCD: exponential-mechanism selection (Gumbel-max) + Gaussian noisy update per step" + (
            "; polish: one Gaussian release of clipped second moments on the pairs the consensus selects"
            if stage is not None else ""
        )
    else:
        plan = dp_fed_bnsl_plan(dp.epsilon, delta, dp.conversion, dp.public_means)
        budget = OneOffBudget(*dp_fed_bnsl_split(plan, dp.public_means), dp.value_bound)
        parts = [
            DPDenseParticipant(
                k, t.X, n_total, sigma_multiplier=plan.sigma_multiplier, budget=budget,
                rng=child_rngs[k], ledger=ledger, clip=dp.clip,
            )
            for k, t in enumerate(tables)
        ]
        coord = Coordinator(d, P, schedule, l1=cfg.lam, dense=True)
        mechanism = "one Gaussian release of the clipped covariance per participant, then Fed-BNSL (post-processing)"

    log, parts = run_fleet(coord, parts, cfg, progress, polish=stage)
    W_raw = coord.W.copy()
    W, removed = _finish_graph(W_raw, cfg.threshold, cfg.method + " --dp")
    W, report["polish"] = apply_polish(stage, W, cfg)
    last = log.history[-1]
    report["converged"] = bool(last["h"] <= cfg.h_tol and last["gap"] <= cfg.gap_tol)
    privacy = ledger.to_dict(delta, dp.conversion)
    privacy.update(
        target_epsilon=float(dp.epsilon),
        delta_default="1/n_p^2 of the smallest participant" if dp.delta is None else "given",
        mechanism=mechanism,
        plan=plan.to_dict(),
        clip={"multiplier": dp.clip, "levels": clip_levels if cfg.method == "fed-sparse" else "row L2 norm"},
        centring=parts[0].notes["centring"],
        value_bound=dp.value_bound,
        seeded=seeded,
        noise_source="numpy PCG64 seeded with --seed" if seeded else "numpy PCG64 seeded from operating-system entropy",
        released_values=sorted({ev["release"] for p in privacy["participants"] for ev in p["events"]}),
    )
    if seeded:
        privacy["warning"] = (
            "the noise was drawn from --seed: anyone who knows the seed can reproduce it and remove it; "
            "omit --seed for a real private release"
        )
        warnings.warn(privacy["warning"], ReproducibleNoiseWarning, stacklevel=3)
    report.update(
        rounds=log.rounds,
        stopped_early=log.stopped_early,
        final={"h": last["h"], "gap": last["gap"], "objective": None},
        history=log.history,
        communication=communication_report(log),
        timing={"workers": _workers_used(cfg, P), "participants_s": [p.compute_s for p in parts], "server_s": coord.server_s, "server_evaluations": coord.lbfgs_evals, "protocol_s": log.wall_s},
        graph=graph_to_json(W, names),
        removed_for_acyclicity=_removed_json(removed, names),
        privacy=privacy,
    )
    report["options"]["dp"] = asdict(dp)
    personal = [p.B.copy() for p in parts] if cfg.personal else None
    return LearnResult(names, W, W_raw, report, personal=personal)
