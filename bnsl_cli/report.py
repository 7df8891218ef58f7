"""The report builder: the run plan, the method's outcome and the run's own records become
``report.json`` (one dict, written in one place, in the order the keys appear in the file).

:func:`base_report` starts it before the rounds; :func:`method_report` adds the pre-round stage's
record and the driver's typed outcome (:mod:`bnsl_cli.federated.outcome`) after them, with every
byte count of the report — ``communication``, the stage's and each round's bytes — read from the
fleet's meter (:mod:`bnsl_cli.federated.traffic`), the one place bytes are counted; and
:func:`complete_report` adds the graphs, the privacy account and the run's warnings
(:func:`bnsl_cli.run.run` calls them in turn).
"""

from __future__ import annotations

import platform
import warnings
from typing import Optional

import numpy as np
import scipy

from bnsl_cli import __version__
from bnsl_cli.dag import unfitted_required
from bnsl_cli.errors import ConvergenceWarning, PrivacyBudgetError, PrivacyWarning, ReproducibleNoiseWarning, warn
from bnsl_cli.federated.method_spec import Rounds
from bnsl_cli.federated.outcome import Outcome
from bnsl_cli.federated.standardize import ColumnStats
from bnsl_cli.federated.traffic import FINAL, POLISH, STANDARDIZE, Traffic
from bnsl_cli.io.graphs import ORIENTATION, graph_to_json
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.privacy.ledger import PrivacyEvent, PrivacyLedger
from bnsl_cli.privacy.split_noise import split_of, trust_statement

__all__ = [
    "SCHEMA_VERSION",
    "PRIVACY_UNIT",
    "PUBLIC_QUANTITIES",
    "WEAK_N_DELTA",
    "base_report",
    "method_report",
    "communication_report",
    "complete_report",
    "weak_participants",
    "privacy_report",
    "summarise",
]

SCHEMA_VERSION = 1

#: The privacy unit every guarantee refers to, and what a run treats as public.
PRIVACY_UNIT = (
    "one row of one participant (replace-one): neighbouring data sets differ in one row of one participant's "
    "file, replaced by any other row; each participant's guarantee covers its own rows, the run's is the largest "
    "participant's spend"
)
#: A participant's guarantee is called weak when ``n_p · δ`` exceeds this: δ bounds the probability
#: that the guarantee fails, and with ``n_p · δ`` near 1 one of its rows may as well be published.
WEAK_N_DELTA = 0.01

PUBLIC_QUANTITIES = (
    "the number of rows of each participant (n_p) and in total (n), the column names and their number d, "
    "and every option of the run"
)


def versions() -> dict:
    return {
        "bnsl": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
    }


# ----------------------------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------------------------


def base_report(plan: RunPlan) -> dict:
    """The report's head: schema, orientation, method, resolved options, seed, versions, the data's
    public shape (and, for a public run, each file's SHA-256)."""
    options_dp = None if plan.privacy is None else dp_options(plan)
    participants = []
    for k, p in enumerate(plan.participants):
        entry = {"participant": k + 1, "file": p.label, "rows": p.rows}
        # a hash of a participant's file is a deterministic function of its rows: it identifies the data
        # exactly, so a private run's report leaves it out (it is not covered by the guarantee)
        if p.sha256 is not None and not plan.private:
            entry["sha256"] = p.sha256
        participants.append(entry)
    options = plan.options_dict()
    if options_dp is not None:
        options["dp"] = options_dp
    return {
        "schema_version": SCHEMA_VERSION,
        "orientation": ORIENTATION,
        "method": plan.method + (" (dp)" if plan.private else ""),
        "options": options,
        "seed": plan.seed,
        "versions": versions(),
        "data": {
            "participants": participants,
            "n_total": plan.n_total,
            "d": plan.d,
            "nodes": list(plan.names),
        },
    }


def method_report(report: dict, spec, stats: Optional[ColumnStats], outcome: Outcome, traffic: Traffic) -> None:
    """After the rounds: the pre-round stage's record (``standardize``, with its bytes), then the
    driver's outcome in its report order, ``communication`` built from the fleet's meter, and each
    ADMM round's record with the bytes of its exchange."""
    if stats is not None:
        report["standardize"] = {
            "applied": stats.applied,
            "source": stats.source,
            **traffic.totals([STANDARDIZE]),
            "per_participant_up": [u for u, _ in traffic.per_participant([STANDARDIZE])],
            "per_participant_down": [d for _, d in traffic.per_participant([STANDARDIZE])],
            "mean": stats.mean,
            "sd": stats.sd,
        }
    for key, value in outcome.report_entries():
        if key == "communication":
            report[key] = communication_report(spec, outcome, traffic, stats is not None)
        elif key == "history" and spec.rounds is Rounds.ADMM:
            # the round loop names round r's exchange r (1, 2, …)
            report[key] = [_with_bytes(h, traffic.totals([r])) for r, h in enumerate(value, start=1)]
        else:
            report[key] = value


def _with_bytes(record: dict, totals: dict) -> dict:
    """A round's record with the bytes of its exchange, before its timings (where the round loop
    wrote them before the fleet counted them)."""
    out = {}
    for key, value in record.items():
        if key == "local_s":
            out.update(totals)
        out[key] = value
    out.update({k: v for k, v in totals.items() if k not in out})
    return out


def communication_report(spec, outcome: Outcome, traffic: Traffic, stage: bool) -> dict:
    """The report's ``communication``: the bytes of every message sent to a participant and of every
    reply, as the fleet counted them (:class:`~bnsl_cli.federated.traffic.Traffic`), in total; for
    the ADMM methods also per participant, per round and for the polish; the pre-round stage's
    (``stage``) as its own entry (also in the totals); and what the messages carried."""
    comm = traffic.totals()
    comm["bytes_total"] = comm["bytes_up"] + comm["bytes_down"]
    if spec.rounds is Rounds.ADMM:
        rounds = [s for s in traffic.stages() if isinstance(s, int)]
        polish = traffic.totals([POLISH])
        comm["polish"] = polish
        comm["per_participant"] = [
            {"participant": k + 1, "bytes_up": up, "bytes_down": down}
            for k, (up, down) in enumerate(traffic.per_participant())
        ]
        comm["per_round"] = (
            [{"round": r, **traffic.totals([r])} for r in rounds]
            + ([{"round": POLISH, **polish}] if polish["bytes_down"] else [])
            + [{"round": FINAL, **traffic.totals([FINAL])}]
        )
        comm["encoding"] = outcome.messages
    else:
        if spec.federated:
            comm["exchanges"] = traffic.exchanges() - traffic.exchanges([STANDARDIZE])
        comm["note"] = outcome.messages
    if stage:
        comm["standardize"] = traffic.totals([STANDARDIZE])
    return comm


def complete_report(report: dict, spec, plan: RunPlan, outcome, *, workers: int, weak: tuple) -> None:
    """After the rounds (:func:`method_report` already applied): the worker count, the prior knowledge used (when given), the graph (or each participant's), the
    privacy account with the weak-participant warning, and — without ``trace`` — the per-round
    records summarised."""
    report["timing"]["workers"] = workers
    if plan.knowledge is not None:
        report["knowledge"] = knowledge_report(plan, outcome, report["warnings"])
    if outcome.local is not None:
        for entry in report["local"]:
            entry["graph"] = graph_to_json(entry.pop("W"), plan.names)
        report["graph"] = None
    else:
        report["graph"] = graph_to_json(outcome.W, plan.names)
    report["privacy"] = None if plan.privacy is None else privacy_report(spec, plan, outcome.summaries, report["warnings"])
    if weak[0]:
        report["privacy"]["weak_participants"] = weak[0]
        report["warnings"].append(weak[1])
    if not plan.trace:
        summarise(report)


def knowledge_report(plan: RunPlan, outcome, warn_list: list) -> dict:
    """The report's ``knowledge`` entry: what was used (counts and edges) and how the graph(s) meet
    it. A required edge left at weight 0 (a method with no second moments at the coordinator to fit
    it, e.g. ``--dp`` without the polish) cannot be written as an edge: it is listed and warned about."""
    k = plan.knowledge
    entry = k.summary()
    graphs = outcome.local if outcome.local is not None else [outcome.W]
    F = k.forbidden_mask()
    entry["forbidden_in_graph"] = int(sum(int(((np.asarray(W) != 0) & F).sum()) for W in graphs))
    missing = sorted({(i, j) for W in graphs for i, j in unfitted_required(np.asarray(W), k)})
    entry["required_missing"] = [[plan.names[i], plan.names[j]] for i, j in missing]
    if missing:
        edges = ", ".join(f"{plan.names[i]} -> {plan.names[j]}" for i, j in missing)
        text = (
            f"required edge(s) {edges} ended with weight 0 and no second moments were available to fit them, "
            "so they are missing from the graph; run with the polish (fed-sparse) or a NOTEARS method to fit them"
        )
        warn([text], ConvergenceWarning, warn_list, stacklevel=3)
    return entry


def summarise(report: dict) -> None:
    """Without ``trace``: per-round records are summarised — the history keeps its numbers but not
    each round's support, and a participant's privacy events of one release that come as many
    records (one per round and row when the clip levels follow ρ₂) become one entry: the summed
    ``count`` and ``rho``, the smallest ``noise_multiplier``, the sensitivity range and the number
    of ``records``. Single records stay as they are."""
    for h in report.get("history") or []:
        h.pop("support", None)
    pv = report.get("privacy")
    if not pv:
        return
    for part in pv["participants"]:
        groups: dict = {}
        for ev in part["events"]:
            groups.setdefault((ev["release"], ev["mechanism"]), []).append(ev)
        events = []
        for (release, mechanism), evs in groups.items():
            if len(evs) == 1:
                events.append(evs[0])
                continue
            rhos = [ev["rho"] for ev in evs]
            mults = [ev["noise_multiplier"] for ev in evs]
            events.append({
                "release": release,
                "mechanism": mechanism,
                "count": sum(ev["count"] for ev in evs),
                "rho": None if None in rhos else sum(rhos),
                "noise_multiplier": None if None in mults else min(mults),
                "sensitivity_min": min(ev["sensitivity"] for ev in evs),
                "sensitivity_max": max(ev["sensitivity"] for ev in evs),
                "records": len(evs),
            })
        part["events"] = events
    pv["events_summarised"] = "releases made as many records are one entry each; --trace keeps every record"


def weak_participants(plan: RunPlan) -> tuple[list, Optional[str]]:
    """``(participant numbers, warning)`` for the participants whose guarantee is weak
    (``n_p · δ > WEAK_N_DELTA``), warned now in one line naming their files — and, when δ is the
    default ``1/n_p²`` of the smallest participant, the file that set it."""
    if plan.privacy is None:
        return [], None
    delta = plan.privacy.delta
    weak = [(k + 1, p) for k, p in enumerate(plan.participants) if p.rows * delta > WEAK_N_DELTA]
    if not weak:
        return [], None
    listed = "; ".join(f"{p.label} (participant {k}, {p.rows} rows: n_p·δ = {p.rows * delta:.3g})" for k, p in weak)
    if plan.privacy.delta_given:
        cause = f"δ = {delta:.3g} was given"
        fix = "give a smaller --delta"
    else:
        k_min = min(range(plan.P), key=lambda k: plan.participants[k].rows)
        small = plan.participants[k_min]
        cause = (f"δ = {delta:.3g} is the default 1/n_p² of the smallest participant, {small.label} "
                 f"(participant {k_min + 1}, {small.rows} rows)")
        fix = f"merge {small.label}'s rows into another participant's file, or give a smaller --delta"
    text = (
        f"weak privacy guarantee (n_p·δ > {WEAK_N_DELTA:g}; δ should be far below 1/n_p) for {listed}: "
        f"{cause}; {fix}"
    )
    warnings.warn(text, PrivacyWarning, stacklevel=3)
    return [k for k, _ in weak], text


def dp_options(plan: RunPlan) -> dict:
    pv = plan.privacy
    return {
        "epsilon": pv.epsilon, "delta": pv.delta if pv.delta_given else None, "clip": pv.clip,
        "selection_share": pv.selection_share, "conversion": pv.conversion, "accountant": pv.accountant, "public_means": pv.public_means,
        "value_bound": pv.value_bound, "clip_levels": pv.clip_levels, "polish_share": pv.polish_share,
    }


def privacy_report(spec, plan: RunPlan, summaries: list, warn_list: list) -> dict:
    pv = plan.privacy
    ledger = PrivacyLedger()
    for k, s in enumerate(summaries):
        ledger.add_participant(k + 1)  # 1-based, as everywhere in the report
        for ev in s["events"]:
            ledger.record(k + 1, PrivacyEvent.from_dict(ev))
    planned = pv.spend()[1]
    for k in ledger.participants:
        if ledger.rho(k) > planned * (1 + 1e-9):
            raise PrivacyBudgetError(
                f"participant {k} ({plan.participants[k - 1].label}) recorded a spend ρ = {ledger.rho(k):.6g} above "
                f"the plan's ρ = {planned:.6g}; the run's result is withheld"
            )
    privacy = ledger.to_dict(pv.delta, pv.conversion, pv.accountant)
    for entry in privacy["participants"]:
        entry["file"] = plan.participants[entry["participant"] - 1].label
        entry["rows"] = plan.participants[entry["participant"] - 1].rows
    seeded = plan.seed is not None
    mechanism = spec.mechanism + (spec.polish_mechanism if plan.polish else "")
    privacy.update(
        target_epsilon=pv.epsilon,
        delta_default="given" if pv.delta_given else "1/n_p^2 of the smallest participant",
        privacy_unit=PRIVACY_UNIT,
        public=PUBLIC_QUANTITIES,
        mechanism=mechanism,
        plan=pv.summary(),
        clip={"multiplier": pv.clip if spec.clip_multiplier is None else spec.clip_multiplier,
              "levels": spec.clip_description or pv.clip_levels},
        centring=(summaries[0].get("notes") or {}).get("centring"),
        value_bound=pv.value_bound,
        seeded=seeded,
        noise_source="numpy PCG64 seeded with --seed" if seeded else "numpy PCG64 seeded from operating-system entropy",
        released_values=sorted({ev["release"] for p in privacy["participants"] for ev in p["events"]}),
    )
    k = split_of(plan)
    if k > 1 or spec.distributed_noise:  # the methods that can distribute their noise say how they did
        privacy["noise"] = {
            "mode": "distributed" if k > 1 else "per-site",
            "sites": plan.P,
            **({"collusion_tolerance": plan.P - k, "trust": trust_statement(k, plan.P)} if k > 1 else {}),
        }
    if seeded:
        privacy["warning"] = (
            "the noise was drawn from --seed: anyone who knows the seed can reproduce it and remove it; "
            "omit --seed for a real private release"
        )
        warn([privacy["warning"]], ReproducibleNoiseWarning, warn_list, stacklevel=4)
    return privacy
