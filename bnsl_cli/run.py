"""The one run pipeline: ``run(plan, fleet)`` — (pre-round stage) → the method's exchanges → finish
the graph → report (:mod:`bnsl_cli.report`). Private runs are the same pipeline with a plan that carries a release list.

The library's front door for tables held here is :func:`bnsl_cli.learn.learn` (resolve the plan
from the tables' public shape, put the participants in this process or in worker processes, and
``run``).

Methods (the registry, :mod:`bnsl_cli.federated.methods.registry`): ``fed-sparse`` (Fed-Sparse-BNSL: ADMM + PGCD; private:
DP-PGCD), ``fed-bnsl`` (Fed-BNSL, Ng & Zhang 2022; private: one noisy covariance per participant),
``notears`` (NOTEARS on all rows pooled: the accuracy ceiling, not federated) and
``local-notears`` (NOTEARS on each participant's rows alone).

Orientation: ``W[i, j]`` is the weight of the edge ``i → j``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from bnsl_cli.confidence import EdgeCounts, Replicates, averaged_network, estimated_threshold, pair_strengths
from bnsl_cli.errors import BnslError, DenseGraphWarning, warn
from bnsl_cli.federated.fleet import make_fleet
from bnsl_cli.federated.methods.registry import make_participant
from bnsl_cli.federated.reply_limits import ReplyLimits
from bnsl_cli.federated.secure_local import SecureLocalFleet
from bnsl_cli.federated.standardize import after_rounds, floating_point_trap, standardize_stage
from bnsl_cli.numerics import single_blas_thread
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.privacy.mechanisms import make_rng
from bnsl_cli.privacy.split_noise import check_split_allowed, split_of
from bnsl_cli.report import (  # noqa: F401 - the report's constants, importable from here too
    PRIVACY_UNIT,
    ConfidenceRecord,
    PUBLIC_QUANTITIES,
    SCHEMA_VERSION,
    InputRecord,
    NetworkRecord,
    Numerics,
    RunRecord,
    build_report,
    weak_participants,
)

__all__ = [
    "SCHEMA_VERSION",
    "LearnResult",
    "run",
    "local_fleet",
    "participant_rngs",
    "PRIVACY_UNIT",
    "PUBLIC_QUANTITIES",
]

@dataclass
class LearnResult:
    """``W`` is the final DAG (thresholded, cycles broken); ``W_raw`` the consensus before that."""

    names: tuple
    W: np.ndarray
    W_raw: Optional[np.ndarray]
    report: dict
    personal: Optional[list] = None  # per-participant B_p (fed-sparse/fed-bnsl with personal=True)
    local: Optional[list] = None  # per-participant DAGs (local-notears)
    #: edge confidence (``--bootstrap``): the replicates' counts (strengths, directions)
    confidence: Optional[EdgeCounts] = None


def run(
    plan: RunPlan,
    fleet,
    progress: Optional[Callable[[dict], None]] = None,
    *,
    input_record: Optional[InputRecord] = None,
    network: Optional[NetworkRecord] = None,
    replicates: Optional[Replicates] = None,
    started: Optional[float] = None,
) -> LearnResult:
    """Run ``plan`` with the participants reached through ``fleet`` (which the caller closes). The
    fleet checks the replies against the limits this plan's public facts give
    (:class:`~bnsl_cli.federated.reply_limits.ReplyLimits`, from the method's ``reply_rules``), set
    here as ``fleet.limits`` for this run. ``input_record`` (``bnsl learn``'s choice of columns and
    rows) and ``network`` (``bnsl serve``'s transport) are the caller's entries of the report, which
    :func:`bnsl_cli.report.build_report` builds once, at the end. ``replicates``: the edge counts of
    a non-private ``--bootstrap`` (:func:`bnsl_cli.bootstrap.run_replicates`); a private driver
    that resamples its releases puts its own in ``outcome.confidence``."""
    check_split_allowed(plan, bool(fleet.secure_sum))  # split noise: secure sums only
    # timing.wall_s: the run itself (every module is imported at the top), from ``started`` when the
    # caller ran more before it (a non-private --bootstrap's replicates: the whole command's learning)
    t0 = time.perf_counter() if started is None else float(started)
    spec = plan.spec
    fleet.limits = ReplyLimits(plan, spec.reply_rules(plan) if spec.reply_rules is not None else {})
    weak = weak_participants(plan)  # warned before the rounds, reported after

    mark = len(fleet.traffic.crossings)  # this run's exchanges (a fleet may have carried others before)
    with single_blas_thread(), floating_point_trap() as fp:
        pre = standardize_stage(spec, plan, fleet)
        outcome = spec.drive(spec, plan, fleet, progress)
    # the count includes in-process participants' arithmetic on their rows: a private run neither
    # reports it nor lets it decide anything (it is not an accounted release)
    fp_seen = 0 if plan.private else fp["count"]
    # from here on the graph is over the variables (categorical columns: not the expanded columns the
    # sites' statistics were over); the report records their kinds
    protocol, plan = plan, plan.on_variables()
    # original units, the scale warning (or error)
    units = after_rounds(spec, plan, outcome, pre, fp_seen)
    conf = outcome.confidence if outcome.confidence is not None else replicates
    counts, conf_record = (None, None) if conf is None else _confidence(plan, outcome, conf)
    if outcome.local is None:
        warn(dense_graph_advice(plan, outcome.W), DenseGraphWarning, outcome.warnings)
    personal = None
    if plan.personal and spec.federated:
        personal = [np.array(s["B"], dtype=float) for s in outcome.summaries]
    # the stage's record, the driver's outcome, every byte count (from the fleet's meter) and the run's own
    report = build_report(plan, spec, RunRecord(
        stats=pre,
        outcome=outcome,
        traffic=fleet.traffic.since(mark),
        units=units,
        numerics=Numerics(fp_seen, sorted(fp["kinds"])) if fp_seen else None,
        workers=int(fleet.workers),
        weak=weak,
        started=t0,
        input=input_record,
        network=network,
        confidence=conf_record,
        columns=protocol.columns,
    ))
    return LearnResult(plan.names, outcome.W, outcome.W_raw, report, personal=personal, local=outcome.local,
                       confidence=counts)


#: Edges per variable above which a graph is called dense: every network of the bnlearn repository's
#: Gaussian and discrete collections has at most about 2 (alarm 1.2, insurance 1.9, hepar2 1.8,
#: ecoli70 1.5, magic-irri 1.6, arth150 1.9; Sachs' consensus 1.5–1.8).
DENSE_EDGES_PER_NODE = 2.5


def dense_graph_advice(plan: RunPlan, W) -> list:
    """One line when the finished graph has more than :data:`DENSE_EDGES_PER_NODE` edges per
    variable, with what to try: edge confidence (``--bootstrap``, then ``--min-strength``) or a
    threshold. Empty otherwise (and for graphs of fewer than 5 variables)."""
    d, e = plan.d, int((W != 0).sum())
    if d < 5 or e <= DENSE_EDGES_PER_NODE * d:
        return []
    if plan.bootstrap and (plan.min_strength is not None or plan.min_strength_auto):
        return []  # the averaged network is already the answer to this
    what = ("--min-strength auto keeps the edges the replicates agree on" if plan.bootstrap else
            "--bootstrap 30 shows which of its edges hold (then --min-strength auto keeps those)")
    return [f"the graph has {e} edges among {d} variables ({e / d:.1f} per variable; known networks have at most "
            f"about 2): many are likely spurious. {what[0].upper() + what[1:]}, or raise --threshold"]


def _confidence(plan: RunPlan, outcome, conf: Replicates):
    """The replicates' counts and the report's entry; with ``--min-strength`` the outcome's graph
    becomes the averaged network (:func:`bnsl_cli.confidence.averaged_network`)."""
    counts = conf.counts
    if counts is None:
        first = f"replicate {conf.failures[0][0] + 1}: {conf.failures[0][1]}" if conf.failures else "none ran"
        raise BnslError(f"--bootstrap: none of the {conf.asked} replicates finished ({first})")
    estimate = estimated_threshold(pair_strengths(counts))
    applied = plan.min_strength if not plan.min_strength_auto else estimate
    if applied is not None:
        outcome.W = averaged_network(counts, applied, strict=plan.min_strength_auto,
                                     required=plan.required_mask(), forbidden=plan.forbidden_mask())
        what = (f"the averaged network: pairs of strength {'>' if plan.min_strength_auto else '≥'} {applied:.4g}"
                + (" (the estimated threshold)" if plan.min_strength_auto else "")
                + ", oriented by the majority of the replicates, kept acyclic; weights: the replicates' mean")
    else:
        what = "the run's own graph; its edges annotated with the replicates' strengths"
    S = counts.strength
    E = outcome.W != 0
    record = ConfidenceRecord(
        replicates=conf.asked,
        completed=counts.runs,
        failed=[{"replicate": b + 1, "reason": why} for b, why in conf.failures[:5]],
        source=conf.source,
        estimated_threshold=float(estimate),
        min_strength=None if applied is None else float(applied),
        graph=what,
        edges=int(E.sum()),
        edges_above_estimated_threshold=int((E & (S > estimate)).sum()),
        edges_with_strength_0_9=int((E & (S >= 0.9 - 1e-12)).sum()),
    )
    return counts, record


# ----------------------------------------------------------------------------------------------
# participants held in this process (bnsl_cli.learn.learn)
# ----------------------------------------------------------------------------------------------


def participant_rngs(plan: RunPlan) -> list:
    """Each participant's own noise source: PCG64 streams spawned from ``plan.seed`` (OS entropy
    without a seed)."""
    rng, _ = make_rng(plan.seed)
    return rng.spawn(plan.P)


def local_fleet(plan: RunPlan, tables):
    """The participants of ``plan`` built from ``tables`` with :func:`make_participant`, in this
    process or in ``plan.workers`` worker processes."""
    if len(tables) != plan.P:
        raise BnslError(f"the plan has {plan.P} participants, {len(tables)} tables were given")
    if plan.spec.pooled:
        return make_fleet([make_participant(plan, 0, np.vstack([t.X for t in tables]))], 1)
    rngs = participant_rngs(plan) if plan.private else [None] * plan.P
    parts = [make_participant(plan, k, t.X, rngs[k]) for k, t in enumerate(tables)]
    if split_of(plan) > 1 and plan.spec.distributed_noise:
        # distributed noise: the sites' shares reach the coordinator only as their secure sum
        return SecureLocalFleet(make_fleet(parts, plan.workers), plan.P)
    return make_fleet(parts, plan.workers)
