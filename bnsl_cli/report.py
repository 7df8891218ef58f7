"""The report builder: the one module that writes ``report.json``'s keys.

:func:`build_report` is called once, at the end of :func:`bnsl_cli.run.run`, with typed entries
and nothing else: the run plan, the pre-round stage's record
(:class:`~bnsl_cli.federated.standardize.ColumnStats`), the driver's typed outcome and its entries
(:mod:`bnsl_cli.federated.outcome`), what the run did after the rounds
(:class:`~bnsl_cli.federated.standardize.UnitsRecord`), the run's own records (:class:`Numerics`, the
workers, the start time) and its caller's (``bnsl learn``'s :class:`InputRecord`, ``bnsl serve``'s
:class:`NetworkRecord`), gathered in one :class:`RunRecord`. Every byte count of the report —
``communication``, the stage's and each round's bytes — is read from the fleet's meter
(:mod:`bnsl_cli.federated.traffic`), the one place bytes are counted. The keys are written in the
order they appear in the file; no other module assigns one.
"""

from __future__ import annotations

import math
import platform
import time
import warnings
from dataclasses import dataclass, fields, is_dataclass
from typing import Optional

import numpy as np
import scipy

from bnsl_cli import __version__
from bnsl_cli.dag import unfitted_required
from bnsl_cli.errors import ConvergenceWarning, PrivacyBudgetError, PrivacyWarning, ReproducibleNoiseWarning, warn
from bnsl_cli.federated.method_spec import Rounds
from bnsl_cli.federated.outcome import AdmmOutcome, AdmmRound, LocalOutcome, Outcome, SolverOutcome
from bnsl_cli.federated.standardize import ColumnStats, UnitsRecord
from bnsl_cli.federated.traffic import FINAL, POLISH, STANDARDIZE, Traffic
from bnsl_cli.io.graphs import ORIENTATION, graph_to_json
from bnsl_cli.io.table import ReadOptions
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.privacy.defaults import WEAK_N_DELTA
from bnsl_cli.privacy.ledger import PrivacyEvent, PrivacyLedger
from bnsl_cli.privacy.split_noise import split_of, trust_statement

__all__ = [
    "SCHEMA_VERSION",
    "PRIVACY_UNIT",
    "PUBLIC_QUANTITIES",
    "WEAK_N_DELTA",
    "STANDARDIZED_WEIGHTS",
    "InputRecord",
    "SiteRecord",
    "NetworkRecord",
    "Numerics",
    "RunRecord",
    "build_report",
    "communication_report",
    "network_report",
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
#: A participant's guarantee is called weak when ``n_p · δ`` exceeds WEAK_N_DELTA (its home, with the
#: default δ that never crosses it, is :mod:`bnsl_cli.privacy.defaults`)
#: Above this ε a private run warns that its guarantee is void in practice: e^20 ≈ 5·10⁸, so one row may
#: move the odds of any outcome by that factor (the literature's deployments use ε of at most about 10
#: per release; docs/privacy.md, "Choosing ε").
EPSILON_WARN = 20.0

PUBLIC_QUANTITIES = (
    "the number of rows of each participant (n_p) and in total (n), the column names and their number d, "
    "and every option of the run"
)

#: ``standardize.weights`` when the weights were learned on standardised columns.
STANDARDIZED_WEIGHTS = (
    "learned and thresholded on standardised columns; reported in original units: "
    "W[i, j] = W_std[i, j] · sd_j / sd_i"
)


def versions() -> dict:
    return {
        "bnsl": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
    }


# ----------------------------------------------------------------------------------------------
# what the run and its callers hand the builder
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputRecord:
    """``bnsl learn``'s choice of columns and rows, when it made one (the report's ``input``): the
    read options and each participant's rows dropped for missing values."""

    read: ReadOptions
    dropped_rows: tuple


@dataclass(frozen=True)
class SiteRecord:
    """One site of a networked run as the coordinator saw it: its number, declared name, address,
    rows, and the identity and SHA-256 fingerprint of its certificate (``None`` in plaintext)."""

    participant: int
    site: str
    peer: str
    rows: int
    identity: Optional[str]
    certificate_sha256: Optional[str]


@dataclass(frozen=True)
class NetworkRecord:
    """``bnsl serve``'s transport (the report's ``network``): the address listened on, whether the
    parties authenticated with mutual TLS, the secure sum's fraction bits (``None``: no secure sum),
    the coordinator's certificate fingerprint, the allowed site names and the sites."""

    listen: str
    mutual_tls: bool
    secure_sum_bits: Optional[int]
    coordinator_certificate_sha256: Optional[str]
    allow_sites: Optional[list]
    sites: tuple
    #: the transport and who vouches for the parties, when not bnsl's gRPC (the Flower app): ``(transport,
    #: peer identity)``
    carrier: Optional[tuple] = None


@dataclass(frozen=True)
class ConfidenceRecord:
    """Edge confidence (``--bootstrap``; the report's ``confidence``): the replicates asked for and
    finished, the first failures, how they were made, the strength threshold estimated from the
    data (:func:`bnsl_cli.confidence.estimated_threshold`), the threshold applied (``None``: the
    graph is the run's own, annotated), what the graph is, and how many of its edges reach the
    estimated threshold and 0.9."""

    replicates: int
    completed: int
    failed: list
    source: str
    estimated_threshold: float
    min_strength: Optional[float]
    graph: str
    edges: int
    edges_above_estimated_threshold: int
    edges_with_strength_0_9: int


@dataclass(frozen=True)
class Numerics:
    """The floating-point events of a non-private run (overflows, invalid operations) and their kinds."""

    floating_point_events: int
    kinds: list


@dataclass(frozen=True)
class RunRecord:
    """Everything :func:`build_report` reads besides the plan: the pre-round stage's record
    (``None`` for a method without the exchange), the driver's outcome, the fleet's meter for this run,
    what :func:`~bnsl_cli.federated.standardize.after_rounds` did, the floating-point events (``None``:
    none, or a private run), the worker count, the weak participants ``(numbers, warning)``, the run's
    start (``time.perf_counter()``: ``timing.wall_s`` is measured up to the report's end), and the
    caller's records."""

    stats: Optional[ColumnStats]
    outcome: Outcome
    traffic: Traffic
    units: UnitsRecord
    numerics: Optional[Numerics]
    workers: int
    weak: tuple
    started: float
    input: Optional[InputRecord] = None
    network: Optional[NetworkRecord] = None
    confidence: Optional[ConfidenceRecord] = None
    #: the variables' kinds of a run with categorical columns (the report's ``columns``)
    columns: Optional[object] = None


# ----------------------------------------------------------------------------------------------
# the report
# ----------------------------------------------------------------------------------------------

#: Each outcome's entries in report order: ``(key, attribute)``; ``communication`` is the meter's.
#: A key in :data:`_OPTIONAL` is left out when its attribute is ``None``; :data:`METHOD_SECTION` stands
#: for a method's own section, reported under its entry's ``REPORT_KEY``.
METHOD_SECTION = object()
_LAYOUT = {
    AdmmOutcome: (
        ("rounds", "rounds"), ("stopped_early", "stopped_early"), ("converged", "converged"), ("final", "final"),
        ("history", "history"), ("communication", None), ("timing", "timing"),
        ("removed_for_acyclicity", "removed_for_acyclicity"), ("warnings", "warnings"), ("polish", "polish"),
        ("solver_issues", "solver_issues"),
    ),
    SolverOutcome: (
        ("rounds", "rounds"), ("converged", "converged"), ("final", "final"), ("history", "history"),
        ("communication", None), ("timing", "timing"), ("removed_for_acyclicity", "removed_for_acyclicity"),
        ("solver_issues", "solver_issues"), ("warnings", "warnings"), (METHOD_SECTION, "method_entry"),
        ("standardize", "standardize"),
    ),
    LocalOutcome: (
        ("rounds", "rounds"), ("converged", "converged"), ("local", "per_participant"), ("communication", None),
        ("timing", "timing"), ("warnings", "warnings"),
    ),
}
_OPTIONAL = frozenset({METHOD_SECTION, "standardize"})


def build_report(plan: RunPlan, spec, run: RunRecord) -> dict:
    """``report.json`` of a finished run, in file order: the head (:func:`_head`); the pre-round
    stage's record (``standardize``, with its bytes); the outcome's entries in their order, with
    ``communication`` and each ADMM round's bytes from the meter and the run's warnings after the
    driver's; ``numerics``; the statistics' record of a method whose sites standardised on their own;
    the prior knowledge used (when given); the graph (``None`` for local-notears: its graphs are in
    ``local``); the privacy account with the weak participants; the caller's ``input`` and
    ``network``. Without ``--trace`` the per-round records are summarised. Emits the warnings of the
    knowledge and privacy parts."""
    outcome, units = run.outcome, run.units
    report = _head(plan)
    # the weight threshold the finished graph went through (None: a score decided its edges)
    report["options"]["threshold_applied"] = outcome.threshold_applied
    if run.stats is not None:
        report["standardize"] = _statistics(_exchange_statistics(run.stats, run.traffic), units, local=False)
    placed = run.stats is not None
    timing = None
    layout = next(keys for kind, keys in _LAYOUT.items() if isinstance(outcome, kind))
    for key, attr in layout:
        value = None if attr is None else getattr(outcome, attr)
        if key in _OPTIONAL and value is None:
            continue
        if key is METHOD_SECTION:
            key = type(value).REPORT_KEY
        if key == "communication":
            report[key] = communication_report(spec, outcome, run.traffic, run.stats is not None)
        elif key == "history":
            if spec.rounds is Rounds.ADMM:
                # the round loop names round r's exchange r (1, 2, …)
                report[key] = [_round(h, run.traffic.totals([r]), plan.trace) for r, h in enumerate(value, start=1)]
            else:
                report[key] = [_record(h) for h in value]
        elif key == "timing":
            timing = report[key] = {**_record(value), "workers": run.workers}
        elif key == "warnings":
            report[key] = [*value, *units.warnings]
        elif key == "local":
            report[key] = [{**_record(fit), "graph": graph_to_json(W, plan.names)} for fit, W in zip(value, outcome.local)]
        elif key == "standardize":
            report[key] = _statistics(_record(value), units, local=False)
            placed = True
        else:
            report[key] = _json(value)
    if run.numerics is not None:
        report["numerics"] = _record(run.numerics)
    if units.rescaled and not placed:  # the sites standardised on their own (notears, local-notears)
        report["standardize"] = _statistics(None, units, local=outcome.local is not None)
    if plan.knowledge is not None:
        report["knowledge"] = knowledge_report(plan, outcome, report["warnings"])
    report["graph"] = None if outcome.local is not None else graph_to_json(outcome.W, plan.names)
    if run.confidence is not None:
        report["confidence"] = _record(run.confidence)
    report["privacy"] = None if plan.privacy is None else privacy_report(spec, plan, outcome.summaries, report["warnings"])
    weak, weak_text = run.weak
    if weak:
        report["privacy"]["weak_participants"] = weak
        report["warnings"].append(weak_text)
    if not plan.trace:
        summarise(report)
    if run.input is not None:
        report["input"] = {**run.input.read.to_dict(), "dropped_rows": list(run.input.dropped_rows)}
    if run.network is not None:
        report["network"] = network_report(plan, run.network)
    if run.columns is not None:
        report["columns"] = run.columns.to_dict()
    timing["wall_s"] = time.perf_counter() - run.started
    return report


def _head(plan: RunPlan) -> dict:
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
        # the registry's name (what --method takes), and the label runs are shown with
        "method": plan.method,
        "method_label": plan.method + (" (dp)" if plan.private else ""),
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


def _record(entry) -> dict:
    """A typed entry as the report writes it: its fields in order (typed entries inside it too),
    leaving out the fields its ``OMIT_IF_NONE`` names when they are ``None``."""
    omit = getattr(entry, "OMIT_IF_NONE", frozenset())
    out = {}
    for f in fields(entry):
        value = getattr(entry, f.name)
        if value is None and f.name in omit:
            continue
        out[f.name] = _json(value)
    return out


def _json(value):
    """A report value: a typed entry as its record, a list of them as a list of records, else as it is."""
    if is_dataclass(value) and not isinstance(value, type):
        return _record(value)
    if isinstance(value, list) and value and is_dataclass(value[0]):
        return [_json(v) for v in value]
    return value


def _round(entry: AdmmRound, totals: dict, trace: bool) -> dict:
    """An ADMM round's record with the bytes of its exchange before its timings (where the round
    loop wrote them before the fleet counted them); its support only with ``trace``."""
    out = {}
    for key, value in _record(entry).items():
        if key == "support" and not trace:
            continue
        if key == "local_s":
            out.update(totals)
        out[key] = value
    return out


def _exchange_statistics(stats: ColumnStats, traffic: Traffic) -> dict:
    """The column-statistics exchange's record with its bytes (the fleet's, under the stage
    :data:`~bnsl_cli.federated.traffic.STANDARDIZE`)."""
    return {
        "applied": stats.applied,
        "source": stats.source,
        **traffic.totals([STANDARDIZE]),
        "per_participant_up": [u for u, _ in traffic.per_participant([STANDARDIZE])],
        "per_participant_down": [d for _, d in traffic.per_participant([STANDARDIZE])],
        "mean": stats.mean,
        "sd": stats.sd,
    }


def _statistics(entry: Optional[dict], units: UnitsRecord, local: bool) -> dict:
    """The report's ``standardize``: the statistics' record (``None``: the sites standardised on their
    own), with — when the weights were mapped back to original units — how, and the standard
    deviations that did it (the record's own, when it has them; each participant's for local-notears)."""
    if not units.rescaled:
        return entry
    entry = {"applied": True} if entry is None else entry
    entry["applied"] = True
    entry["weights"] = STANDARDIZED_WEIGHTS
    if local:
        entry["sd"] = units.sd
    else:
        entry.setdefault("sd", units.sd)
    return entry


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


def network_report(plan: RunPlan, net: NetworkRecord) -> dict:
    """The report's ``network`` (``bnsl serve``): the transport, the secure sum, who the parties were."""
    return {
        "listen": net.listen,
        "transport": net.carrier[0] if net.carrier else
        "gRPC, mutual TLS" if net.mutual_tls else "gRPC, plaintext on loopback (--insecure)",
        "secure_sum": net.secure_sum_bits is not None,
        "secure_sum_bits": net.secure_sum_bits,
        "peer_identity": net.carrier[1] if net.carrier else
        "site certificates (mutual TLS): one certificate identity per participant"
        if net.mutual_tls else "none: plaintext (--insecure), the sites are not authenticated",
        "coordinator_certificate_sha256": net.coordinator_certificate_sha256,
        "allow_sites": net.allow_sites,
        "sites": [_record(site) for site in net.sites],
        # a private site sends no compute time (it depends on its rows and is no release)
        "participant_timing": "reply times observed by the coordinator (network included)" if plan.private
        else "compute times reported by the sites",
    }


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
    """Without ``trace``: a participant's privacy events of one release that come as many records
    (one per round and row when the clip levels follow ρ₂) become one entry: the summed ``count``
    and ``rho``, the smallest ``noise_multiplier``, the sensitivity range and the number of
    ``records``. Single records stay as they are. (The history's rounds leave out their support
    without ``trace``: :func:`build_report`.)"""
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
    (``n_p · δ > WEAK_N_DELTA``), warned now in one short line. The default δ never crosses the rule
    (:func:`~bnsl_cli.privacy.defaults.default_delta`), so only a δ the user gave can warn."""
    if plan.privacy is None:
        return [], None
    delta = plan.privacy.delta
    weak = [(k + 1, p) for k, p in enumerate(plan.participants) if p.rows * delta > WEAK_N_DELTA]
    if not weak:
        return [], None
    shown = weak[:3]
    listed = ", ".join(f"{p.label} (participant {k}, {p.rows} rows)" for k, p in shown)
    if len(weak) > len(shown):
        listed += f" and {len(weak) - len(shown)} more"
    # the δ below which every participant's n_p·δ is at most WEAK_N_DELTA, on a 1-2-5 step
    need = WEAK_N_DELTA / max(p.rows for _, p in weak)
    step = 10.0 ** math.floor(math.log10(need))
    fix = next(f * step for f in (5.0, 2.0, 1.0) if f * step <= need)
    cause = f"δ = {delta:.3g} was given" if plan.privacy.delta_given else f"δ = {delta:.3g}"
    text = f"weak privacy guarantee: n_p·δ > {WEAK_N_DELTA:g} for {listed} ({cause}); give --delta {fix:.0e} or smaller"
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
    if pv.epsilon > EPSILON_WARN:
        warn([f"ε = {pv.epsilon:g} is above {EPSILON_WARN:g}: a guarantee this weak protects no row in practice "
              f"(one row may change the odds of any outcome up to e^{pv.epsilon:.3g}-fold); the run is a private one "
              "in name only"], PrivacyWarning, warn_list, stacklevel=4)
    return privacy
