"""``check_method(spec)``: the conformance suite every method of the registry passes and a new method
must pass (issue 44 item 4; like scikit-learn's ``check_estimator``).

A method is a :class:`~bnsl_cli.federated.method_spec.MethodSpec`: a site role, a driver, the message
sequence its site answers (``site_sequence``), what its replies may hold (``reply_rules``), its
releases (``release_builder``) and its entries in the CLI help and the docs. The central code (the
site guard, reply validation, the run pipeline, the fleets) loops over these declarations; the checks
here hold a method to them, on tiny data (:data:`SITES` sites × :data:`ROWS` rows × :data:`COLUMNS`
columns from :func:`bnsl_cli.simulate.simulate`, few rounds), each for one variant (non-private, or
private where the method has a private variant):

1. :func:`check_site_guard` — its sites answer its driver's messages behind the site guard
   (:class:`~bnsl_cli.net.policy.SpendGuard`), and a replay of any of them is refused (naming the site)
   before its participant sees it; :func:`check_reply_limits` — a reply outside the declared limits, to
   any message its driver sends, stops the run naming the sender (where the method declares no reply
   rule for a kind, a warning naming the sender will do: the private ADMM updates).
2. :func:`check_ledger_matches_plan` — the releases every site records equal the planned ones (kinds,
   counts, noise multipliers, splits); a non-private run records none.
3. :func:`check_undeclared_kinds_at_site` — a site refuses every message kind its method's sequence
   does not declare; :func:`check_undeclared_kinds_at_coordinator` — every request its driver sends has
   a declared reply shape, and the coordinator's reply validation refuses a reply of any kind not
   declared to answer it (and any reply to a request kind with no declared reply), naming the sender.
4. :func:`check_transports_agree` — the learned graph is byte-identical in process, in worker
   processes and over gRPC on loopback.
5. :func:`check_audit_cases` — every release its private plan lists has audit cases (a worst-case pair
   and a planted extreme row); :func:`check_help_and_docs` — a ``--method`` help line and docs entries.

Each check raises ``AssertionError`` saying what the method declares too little of (or does beyond
it). :func:`check_method` runs them all. A method that is not (yet) in the registry is checked too:
every check runs with the spec as the registry's entry of its name (:func:`registered`).
"""

from __future__ import annotations

import functools
import re
import struct
import warnings
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from bnsl_cli.errors import BnslError, GuardRefusedError, InvalidReplyError
from bnsl_cli.federated.fleet import LocalFleet, checked_replies
from bnsl_cli.federated.messages import (
    HEADER,
    REPLY_VALUE_LIMIT,
    StatsRequest,
    read_header,
)
from bnsl_cli.federated.messages.wire import reply_reader, reply_shape
from bnsl_cli.federated.method_spec import MethodSpec
from bnsl_cli.federated.methods import registry
from bnsl_cli.federated.secure_local import SecureLocalFleet
from bnsl_cli.federated.site_sequence import steps_by_kind
from bnsl_cli.io.table import Table
from bnsl_cli.net.policy import SpendGuard
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import ParticipantShape, Shapes
from bnsl_cli.privacy.ledger import PrivacyEvent
from bnsl_cli.privacy.split_noise import split_of
from bnsl_cli.run import LearnResult, local_fleet, participant_rngs, run
from bnsl_cli.simulate import simulate

__all__ = [
    "SITES", "ROWS", "COLUMNS", "OUT_OF_LIMITS", "EVERY_KIND", "TRANSPORTS",
    "variants", "registered", "tiny_tables", "method_plan", "clear_plan", "quiet", "Recorder", "Seen",
    "in_process_fleet", "recorded_run", "value_offsets", "with_values", "audit_case_names", "can_run_networked",
    "check_site_guard", "check_reply_limits", "check_ledger_matches_plan", "check_undeclared_kinds_at_site",
    "check_undeclared_kinds_at_coordinator", "check_transports_agree", "check_audit_cases", "check_help_and_docs",
    "RUN_CHECKS", "check_method",
]

#: the tiny data every check runs on
SITES, ROWS, COLUMNS, SEED = 3, 60, 4, 11
#: ADMM rounds (a method that takes ``--rounds``) and the privacy target of a private variant
ROUNDS, EPSILON = 3, 20.0
#: A value beyond every limit a plan's public facts give a reply (the largest, a non-private share of
#: second moments about a pooled centre, is below ``(2·ROW_VALUE_LIMIT)² = 4e96``), yet below the blanket
#: limit every reply is held to (``REPLY_VALUE_LIMIT``): only the method's own limits can refuse it.
OUT_OF_LIMITS = 1e99
assert OUT_OF_LIMITS < REPLY_VALUE_LIMIT
#: every kind byte a message can carry
EVERY_KIND = range(256)

DOCS = Path(__file__).resolve().parents[2] / "docs"


# ------------------------------------------------------------------------------------------------
# set-up: the variants, the registry entry, the data, the plan, the fleets
# ------------------------------------------------------------------------------------------------


def variants(names=None) -> list[tuple[str, bool]]:
    """``(method, private)`` for every registered method (``names``: these), its private variant too
    where it has one."""
    names = registry.METHODS if names is None else names
    return [(m, p) for m in names for p in ((False, True) if registry.method_spec(m).private else (False,))]


def label(spec: MethodSpec, private: bool) -> str:
    return f"{spec.name}{' --dp' if private else ''}"


#: While a block runs, a spec is the registry's entry of its name (the registry's own context manager).
registered = registry.registered


@functools.lru_cache(maxsize=None)
def _tiny() -> tuple:
    sim = simulate(COLUMNS, COLUMNS, participants=SITES, samples=ROWS, seed=SEED)
    return tuple(Table(X, tuple(sim.names), f"site{k}") for k, X in enumerate(sim.shards))


def tiny_tables() -> list:
    """:data:`SITES` tables of :data:`ROWS` rows and :data:`COLUMNS` columns (a simulated DAG)."""
    return list(_tiny())


def method_config(spec: MethodSpec, private: bool, **dp) -> LearnConfig:
    """The options of a check's run: the method's defaults, few rounds where it takes ``--rounds``,
    the standardisation where it takes ``--standardize`` (so that its broadcast is exercised), a seed;
    private: ε = :data:`EPSILON` (``dp``: more privacy options)."""
    kw: dict = {"method": spec.name, "seed": SEED, "workers": 1}
    if "--rounds" in spec.options:
        kw["rounds"] = ROUNDS
    if "--standardize" in spec.options:
        kw["standardize"] = True
    return LearnConfig(dp=DPConfig(epsilon=EPSILON, **dp) if private else None, **kw)


def method_plan(spec: MethodSpec, private: bool, tables, **dp) -> RunPlan:
    return RunPlan.resolve(method_config(spec, private, **dp), Shapes.of_tables(tables))


def clear_plan(spec: MethodSpec, private: bool, tables) -> RunPlan:
    """The plan of a check that reads single replies: the method's own, or, when its noise is
    distributed over securely summed sites (whose replies the coordinator only sees as their sum), the
    same with each site adding its own noise (``--noise per-site``)."""
    plan = method_plan(spec, private, tables)
    if split_of(plan) > 1:
        plan = method_plan(spec, private, tables, noise="per-site")
    return plan


def quiet(fn: Callable, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kw)


def in_process_fleet(plan: RunPlan, tables, wrap: Optional[Callable] = None):
    """The run's own in-process fleet (:func:`bnsl_cli.run.local_fleet`: its participants, and the
    secure sum when the plan splits noise) with each participant ``p`` at index ``k`` replaced by
    ``wrap(k, p)``."""
    base = local_fleet(replace(plan, workers=1), tables)
    if wrap is None:
        return base
    inner = base.inner if base.secure_sum else base
    fleet = LocalFleet([wrap(k, p) for k, p in enumerate(inner.participants)])
    return SecureLocalFleet(fleet, len(fleet)) if base.secure_sum else fleet


class Recorder:
    """A fleet that hands everything to ``inner`` and records each exchange (``exchanges``:
    ``(request, replies handed to the coordinator)``) and the participants' summaries."""

    def __init__(self, inner):
        self.inner = inner
        self.exchanges: list = []
        self.summaries: Optional[list] = None

    workers = property(lambda self: self.inner.workers)
    secure_sum = property(lambda self: self.inner.secure_sum)
    traffic = property(lambda self: self.inner.traffic)
    limits = property(lambda self: self.inner.limits, lambda self, v: setattr(self.inner, "limits", v))

    def __len__(self) -> int:
        return len(self.inner)

    def exchange(self, msg: bytes):
        self.exchanges.append((msg, None))
        out = self.inner.exchange(msg)
        self.exchanges[-1] = (msg, list(out))
        return out

    def finish(self):
        self.summaries = self.inner.finish()
        return self.summaries

    def close(self) -> None:
        self.inner.close()

    @property
    def requests(self) -> list:
        return [m for m, _ in self.exchanges]

    def first_of_each_kind(self) -> dict:
        """``{kind: index of its first exchange}``."""
        out: dict = {}
        for i, msg in enumerate(self.requests):
            out.setdefault(msg[0], i)
        return out


def run_through(plan: RunPlan, fleet) -> LearnResult:
    """``run(plan, fleet)`` without warnings in the log; the fleet is closed."""
    try:
        return quiet(run, plan, fleet)
    finally:
        fleet.close()


def recorded_run(plan: RunPlan, tables, wrap: Optional[Callable] = None) -> tuple[LearnResult, Recorder]:
    """An honest run of ``plan`` in process, recorded (a run that fails: ``AssertionError``)."""
    rec = Recorder(in_process_fleet(plan, tables, wrap))
    try:
        return run_through(plan, rec), rec
    except BnslError as exc:
        raise AssertionError(f"{plan.method}: its honest run failed ({type(exc).__name__}): {exc}") from None


class Seen:
    """A participant that counts the messages it was handed (everything else is the inner one's)."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = 0

    def __getattr__(self, name):
        if name == "inner":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def handle(self, data: bytes):
        self.calls += 1
        return self.inner.handle(data)

    def summary(self) -> dict:
        return self.inner.summary()


def fresh_site(plan: RunPlan, tables, k: int) -> Seen:
    """Participant ``k`` of ``plan`` as the run builds it (its own noise source), counting its messages."""
    rng = participant_rngs(plan)[k] if plan.private else None
    return Seen(registry.make_participant(plan, k, tables[k].X, rng))


def accepted_rho(plan: RunPlan) -> Optional[float]:
    """The zCDP budget a site accepts with ``plan`` (the plan's spend; ``None``: not private), computed
    once for the many guards of a check (a guard computes it from the release list otherwise)."""
    return float(plan.privacy.spend()[1]) if plan.private else None


def declared_kinds(spec: MethodSpec, plan: RunPlan) -> set:
    """The message kinds the method's site sequence declares for ``plan``."""
    return set(steps_by_kind(spec.site_sequence(plan)))


# ------------------------------------------------------------------------------------------------
# the values of a reply, as reply validation reads them
# ------------------------------------------------------------------------------------------------


def value_offsets(request: bytes, reply: bytes) -> np.ndarray:
    """The byte offsets in ``reply`` of the float64 values reply validation reads (the reply kind's
    declared payload reader, :func:`bnsl_cli.federated.messages.wire.reply_reader`), empty when it
    reads none."""
    head, asked = read_header(reply), read_header(request)
    reader = reply_reader(head.kind)
    if reader is None:
        return np.zeros(0, dtype=np.int64)
    shape = reply_shape(asked.kind)
    due = None if shape is None or shape.due is None else shape.due(head.d, asked.count)
    got = reader.payload(reply, head.d, head.count, due)
    if isinstance(got, str):
        raise AssertionError(f"an honest reply of kind {head.kind} is malformed: {got}")
    values = np.asarray(got[0])
    if values.size == 0:
        return np.zeros(0, dtype=np.int64)
    base = np.frombuffer(reply, dtype=np.uint8).__array_interface__["data"][0]
    start = values.__array_interface__["data"][0] - base
    offsets = start + np.arange(values.size, dtype=np.int64) * values.strides[0]
    if values.dtype.itemsize != 8 or offsets.min() < 0 or offsets.max() + 8 > len(reply):
        raise AssertionError(f"the payload reader of reply kind {head.kind} does not read its values from the reply")
    return offsets


def with_values(request: bytes, reply: bytes, value: float) -> bytes:
    """``reply`` with every value reply validation reads set to ``value`` (a well-formed reply)."""
    out = bytearray(reply)
    for off in value_offsets(request, reply):
        struct.pack_into("<d", out, int(off), value)
    return bytes(out)


class Corrupting(Seen):
    """A participant whose reply to the ``nth`` message of ``kind`` has every value set to ``value``."""

    def __init__(self, inner, kind: int, nth: int, value: float):
        super().__init__(inner)
        self.kind, self.nth, self.value, self.of_kind = kind, nth, value, 0

    def handle(self, data: bytes):
        reply = super().handle(data)
        if data and data[0] == self.kind:
            self.of_kind += 1
            if self.of_kind == self.nth and reply is not None:
                return with_values(data, reply, self.value)
        return reply


# ------------------------------------------------------------------------------------------------
# 1. the site guard and the reply limits
# ------------------------------------------------------------------------------------------------


def check_site_guard(spec: MethodSpec, private: bool = False, *, guard: Callable = SpendGuard) -> None:
    """Every site of a run stands behind its guard (``guard(participant, plan, rho)``, the site's
    :class:`~bnsl_cli.net.policy.SpendGuard`) and the run completes: the driver sends only what the
    method's sequence declares, when the sequence admits it. Then, for each kind the driver sent, a
    site fed the run's messages up to the first of that kind refuses it a second time (a replay),
    naming itself, before its participant sees it."""
    what = label(spec, private)
    with registered(spec):
        tables = tiny_tables()
        plan = method_plan(spec, private, tables)
        declared = declared_kinds(spec, plan)
        rho = accepted_rho(plan)
        rec = Recorder(in_process_fleet(plan, tables, wrap=lambda k, p: guard(p, plan, rho)))
        try:
            run_through(plan, rec)
        except GuardRefusedError as exc:
            raise AssertionError(f"{what}: a site's guard refused a message of the method's own driver (its "
                                 f"site_sequence declares or admits too little): {exc}") from None
        except BnslError as exc:
            raise AssertionError(f"{what}: its guarded run failed ({type(exc).__name__}): {exc}") from None
        sent = set(rec.first_of_each_kind())
        assert sent <= declared, f"{what}: the driver sent kinds {sorted(sent - declared)} its sequence does not declare"
        if spec.federated:
            assert sent, f"{what}: a federated method whose driver sends no message"
        k = plan.P - 1
        for kind, i in sorted(rec.first_of_each_kind().items()):
            site = fresh_site(plan, tables, k)
            g = guard(site, plan, rho)
            for msg in rec.requests[: i + 1]:
                g.handle(msg)
            seen = site.calls
            try:
                g.handle(rec.requests[i])
            except GuardRefusedError as exc:
                assert f"participant {k + 1}" in str(exc), f"{what}: the refusal of a replay names no site: {exc}"
            except Exception as exc:  # noqa: BLE001 - not the guard's refusal
                raise AssertionError(f"{what}: a replayed message of kind {kind} reached the site's participant, "
                                     f"which failed on it ({type(exc).__name__}: {exc})") from None
            else:
                raise AssertionError(f"{what}: a site answered a replayed message of kind {kind} "
                                     f"(message {i + 1} of the run) a second time")
            assert site.calls == seen, f"{what}: the participant saw the replayed kind-{kind} message"


def check_reply_limits(spec: MethodSpec, private: bool = False) -> dict:
    """For every request kind the driver sends whose replies carry values, a run in which the last
    participant's first such reply holds :data:`OUT_OF_LIMITS` in every value (beyond every limit the
    plan's public facts give, below the blanket one) stops with ``InvalidReplyError`` naming that
    participant — refused by the method's declared ``reply_rules`` or by its driver. Only for a kind
    the method declares no rule for may the run instead go on with a warning naming that participant
    (the ADMM updates of a private run: no descent bound holds for noisy steps, the coordinator's
    robust comparison flags the site). The replies arrive in the clear (:func:`clear_plan`). Returns
    ``{request kind: "refused" or "flagged"}``."""
    what = label(spec, private)
    with registered(spec):
        tables = tiny_tables()
        plan = clear_plan(spec, private, tables)
        rules = set(spec.reply_rules(plan)) if spec.reply_rules is not None else set()
        honest, rec = recorded_run(plan, tables)
        k = plan.P - 1
        targets: dict = {}
        seen: Counter = Counter()
        for i, (msg, replies) in enumerate(rec.exchanges):
            seen[msg[0]] += 1
            if msg[0] not in targets and replies[k] is not None and value_offsets(msg, replies[k]).size:
                targets[msg[0]] = (seen[msg[0]], i)
        if spec.federated:
            assert targets, f"{what}: no reply of a federated method carries a value"
        outcome: dict = {}
        for kind, (nth, i) in sorted(targets.items()):
            fleet = Recorder(in_process_fleet(plan, tables, wrap=lambda j, p, kind=kind, nth=nth: (
                Corrupting(p, kind, nth, OUT_OF_LIMITS) if j == k else p)))
            try:
                res = run_through(plan, fleet)
            except InvalidReplyError as exc:
                late = len(fleet.exchanges) - 1 - i
                assert f"participant {k + 1}" in str(exc) and late == 0, (
                    f"{what}: participant {k + 1}'s reply to a kind-{kind} request holding {OUT_OF_LIMITS:g} was "
                    f"accepted and the run stopped {late} exchange(s) later" +
                    ("" if f"participant {k + 1}" in str(exc) else " blaming another") + f": {exc}")
                outcome[kind] = "refused"
                continue
            except Exception as exc:  # noqa: BLE001 - the check reports what stopped the run instead
                raise AssertionError(f"{what}: a reply to a kind-{kind} request holding {OUT_OF_LIMITS:g} stopped the "
                                     f"run with {type(exc).__name__}, not as a refused reply: {exc}") from None
            before = set(honest.report.get("warnings") or ())
            flagged = [w for w in res.report.get("warnings") or () if f"participant {k + 1}" in w and w not in before]
            if kind in rules or not flagged:
                raise AssertionError(f"{what}: participant {k + 1}'s reply to a kind-{kind} request holding "
                                     f"{OUT_OF_LIMITS:g} (beyond what any rows can give, below the blanket limit) "
                                     "was accepted" + (" although its reply_rules bound it" if kind in rules else
                                                       " without a word: declare its limits (reply_rules)"))
            outcome[kind] = "flagged"
        return outcome


# ------------------------------------------------------------------------------------------------
# 2. the ledger equals the plan
# ------------------------------------------------------------------------------------------------


def _release_key(kind, multiplier: float, split: int) -> tuple:
    return (str(getattr(kind, "value", kind)), float(f"{float(multiplier):.9g}"), int(split))


def planned_releases(plan: RunPlan) -> Counter:
    """``{(release kind, noise multiplier to 9 digits, split): count}`` of one site's planned releases."""
    out: Counter = Counter()
    for r in (plan.privacy.releases if plan.private else ()):
        out[_release_key(r.kind, r.multiplier, r.split)] += r.count
    return out


def recorded_releases(summary: dict) -> Counter:
    """The same of the release events one site recorded (its summary's ``events``)."""
    out: Counter = Counter()
    for d in summary.get("events") or ():
        ev = PrivacyEvent.from_dict(d)
        out[_release_key(ev.release, ev.noise_multiplier, ev.split)] += ev.count
    return out


def check_ledger_matches_plan(spec: MethodSpec, private: bool = True) -> None:
    """In a run of the plan (the run's own fleet: a secure sum when it splits noise), every site's
    recorded release events equal the plan's release list — kinds, counts, noise multipliers and
    splits; a non-private run records none."""
    what = label(spec, private)
    with registered(spec):
        tables = tiny_tables()
        plan = method_plan(spec, private, tables)
        _, rec = recorded_run(plan, tables)
        want = planned_releases(plan)
        assert rec.summaries, f"{what}: the participants handed back no summary"
        for k, summary in enumerate(rec.summaries):
            got = recorded_releases(summary)
            if got != want:
                raise AssertionError(
                    f"{what}: participant {k + 1}'s ledger differs from the plan: recorded but not planned "
                    f"{dict(got - want)}, planned but not recorded {dict(want - got)}")


# ------------------------------------------------------------------------------------------------
# 3. undeclared message kinds, at both ends
# ------------------------------------------------------------------------------------------------


def check_undeclared_kinds_at_site(spec: MethodSpec, private: bool = False, *, guard: Callable = SpendGuard) -> None:
    """A site refuses a message of every kind byte its method's sequence does not declare
    (``GuardRefusedError`` naming the kind and the site), before its participant sees it. ``guard``:
    as in :func:`check_site_guard`."""
    what = label(spec, private)
    with registered(spec):
        tables = tiny_tables()
        plan = method_plan(spec, private, tables)
        declared = declared_kinds(spec, plan)
        k = plan.P - 1
        rho = accepted_rho(plan)
        site = fresh_site(plan, tables, k)
        header_only = StatsRequest(0, plan.d).encode()  # a message of no payload; its kind byte is replaced
        for kind in EVERY_KIND:
            if kind in declared:
                continue
            try:
                guard(site, plan, rho).handle(bytes([kind]) + header_only[1:])
            except GuardRefusedError as exc:
                assert f"kind {kind}" in str(exc) and f"participant {k + 1}" in str(exc), (
                    f"{what}: the refusal of a kind-{kind} message names neither its kind nor the site: {exc}")
            except Exception as exc:  # noqa: BLE001 - not the guard's refusal: reported below
                raise AssertionError(f"{what}: a message of undeclared kind {kind} reached the site's participant, "
                                     f"which failed on it ({type(exc).__name__}: {exc})") from None
            else:
                raise AssertionError(f"{what}: a site answered a message of kind {kind}, which its sequence does not declare")
            assert site.calls == 0, f"{what}: the participant saw a message of undeclared kind {kind}"


def check_undeclared_kinds_at_coordinator(spec: MethodSpec, private: bool = False) -> None:
    """Every request the driver sends has a declared reply shape; for each request kind it sends, a
    reply of any kind byte not declared to answer it (none for a request that needs no reply) is
    refused (``InvalidReplyError`` naming the sender); and a reply to a request of a kind with no
    declared reply shape is refused too."""
    what = label(spec, private)
    with registered(spec):
        tables = tiny_tables()
        plan = clear_plan(spec, private, tables)
        _, rec = recorded_run(plan, tables)
        k = plan.P - 1
        undeclared_requests = [kind for kind in EVERY_KIND if reply_shape(kind) is None]
        for kind, i in sorted(rec.first_of_each_kind().items()):
            msg, replies = rec.exchanges[i]
            shape = reply_shape(kind)
            assert shape is not None, (f"{what}: the driver sends kind-{kind} requests, whose replies no message class "
                                       "declares (wire.declare): reply validation cannot check them")
            checked_replies(msg, replies)  # the honest replies pass
            asked = read_header(msg)
            base = replies[k]
            if base is None:  # a request that needs no reply: a header-only reply from participant k
                base = HEADER.pack(kind, asked.version, asked.round, k, asked.d, 0)
            answers = set(shape.answered_by) if shape.needs_reply(msg) else set()
            for other in EVERY_KIND:
                if other in answers:
                    continue
                bad = bytes([other]) + base[1:]
                _refused(what, f"a kind-{other} reply to a kind-{kind} request", msg, replies[:k] + [bad], k)
            # the same replies, to a request of a kind whose replies nobody declares: the first is refused
            if all(r is not None for r in replies):
                for other in undeclared_requests:
                    req = bytes([other]) + msg[1:]
                    _refused(what, f"a reply to a request of undeclared kind {other}", req, replies, 0)


def _refused(what: str, which: str, msg: bytes, replies: list, k: int) -> None:
    try:
        checked_replies(msg, replies)
    except InvalidReplyError as exc:
        assert f"participant {k + 1}" in str(exc), f"{what}: the refusal of {which} names no sender: {exc}"
    else:
        raise AssertionError(f"{what}: reply validation accepted {which}")


# ------------------------------------------------------------------------------------------------
# 4. the same graph over every transport
# ------------------------------------------------------------------------------------------------

TRANSPORTS = ("in-process", "processes", "grpc")


def graph_bytes(res: LearnResult) -> bytes:
    """The learned graph's bytes: ``W``, the consensus before the threshold, each site's own graph."""
    parts = [np.ascontiguousarray(res.W, dtype="<f8").tobytes()]
    if res.W_raw is not None:
        parts.append(np.ascontiguousarray(res.W_raw, dtype="<f8").tobytes())
    for W in res.local or ():
        parts.append(np.ascontiguousarray(W, dtype="<f8").tobytes())
    return b"|".join(parts)


def can_run_networked(spec: MethodSpec) -> bool:
    """A method whose sites exchange messages can run over the network (``net.session.check_choices``)."""
    return spec.federated and not spec.pooled


def learned_over(spec: MethodSpec, plan: RunPlan, tables, transport: str) -> LearnResult:
    if transport == "in-process":
        return run_through(plan, in_process_fleet(plan, tables))
    if transport == "processes":
        spread = replace(plan, workers=plan.P)
        return run_through(spread, local_fleet(spread, tables))
    if transport == "grpc":
        from tests.net.conftest import networked

        got, _, errors = networked(plan, tables, secure=split_of(plan) > 1)
        assert not errors, f"{spec.name}: sites failed over gRPC: {errors}"
        assert isinstance(got, LearnResult), f"{spec.name}: the networked run stopped: {got}"
        return got
    raise ValueError(f"unknown transport {transport!r}")


def check_transports_agree(spec: MethodSpec, private: bool = False, transports=TRANSPORTS) -> dict:
    """The learned graph (``W``, the consensus before the threshold, each site's own graph) is byte for
    byte the same in process, in worker processes and over gRPC on loopback (the run's own secure sum
    when the plan splits noise). Returns ``{transport: graph bytes}`` (gRPC left out for a method that
    cannot run over the network)."""
    what = label(spec, private)
    with registered(spec):
        tables = tiny_tables()
        plan = method_plan(spec, private, tables)
        graphs = {t: graph_bytes(learned_over(spec, plan, tables, t)) for t in transports
                  if t != "grpc" or can_run_networked(spec)}
    first, ref = next(iter(graphs.items()))
    for t, g in graphs.items():
        assert g == ref, f"{what}: the graph learned {t} differs from the one learned {first}"
    return graphs


# ------------------------------------------------------------------------------------------------
# 5. audit cases, help and docs
# ------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def audit_case_names() -> tuple:
    """The names of the registry's audit cases (:func:`~bnsl_cli.federated.methods.registry.audit_cases`,
    with the plan their site cases run on: the ``--dp`` default's, d = 5, as ``tests/privacy/test_audit.py``)."""
    shapes = Shapes(tuple(f"x{j}" for j in range(5)), tuple(ParticipantShape(f"site-{k}.csv", 50, None) for k in range(2)))
    plan = RunPlan.resolve(LearnConfig(method=registry.DP_DEFAULT_METHOD, dp=DPConfig(epsilon=5, noise="per-site")), shapes)
    return tuple(c.name for c in registry.audit_cases(np.random.default_rng(0), plan))


def check_audit_cases(spec: MethodSpec, private: bool = True, cases: Optional[tuple] = None) -> None:
    """Every release kind its private plan lists has an audit case (named by the kind) and one with a
    planted extreme row. ``cases``: the case names (default: the registry's)."""
    if not private:
        return
    what = label(spec, private)
    names = audit_case_names() if cases is None else tuple(cases)
    with registered(spec):
        plan = method_plan(spec, True, tiny_tables())
    for kind in sorted({r.kind.value for r in plan.privacy.releases}):
        of_kind = [n for n in names if n.startswith(kind)]
        assert any("extreme row" not in n for n in of_kind), f"{what}: no audit case of its {kind} release"
        assert any("extreme row" in n for n in of_kind), f"{what}: no audit case of its {kind} release with an extreme row"


def method_help(command: str) -> str:
    """The help text of ``bnsl COMMAND``'s ``--method`` option."""
    import typer

    from bnsl_cli.cli.app import build_app

    group = typer.main.get_command(build_app({command}))
    option = next(p for p in group.commands[command].params if "--method" in getattr(p, "opts", ()))
    return option.help or ""


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def check_help_and_docs(spec: MethodSpec, private: bool = False) -> None:
    """``learn --method``'s help names the method, docs/cli.md's method table has its row and
    docs/method.md describes it; its private variant is named by ``privacy-budget --method``'s help and
    in docs/privacy.md."""
    what = label(spec, private)
    name = spec.name
    assert _mentions(method_help("learn"), name), f"{what}: `bnsl learn --method`'s help does not name it"
    cli = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert re.search(rf"^\| `{re.escape(name)}`", cli, flags=re.M), f"{what}: no row in docs/cli.md's --method table"
    method_doc = (DOCS / "method.md").read_text(encoding="utf-8")
    assert _mentions(method_doc, name), f"{what}: docs/method.md does not mention it"
    if private:
        assert _mentions(method_help("privacy-budget"), name), (
            f"{what}: `bnsl privacy-budget --method`'s help does not name it")
        privacy_doc = (DOCS / "privacy.md").read_text(encoding="utf-8")
        assert _mentions(privacy_doc, name), f"{what}: docs/privacy.md does not mention it"


# ------------------------------------------------------------------------------------------------
# all of them
# ------------------------------------------------------------------------------------------------

#: the checks of one variant, in the order :func:`check_method` runs them (the transports apart)
RUN_CHECKS = (
    check_site_guard,
    check_reply_limits,
    check_ledger_matches_plan,
    check_undeclared_kinds_at_site,
    check_undeclared_kinds_at_coordinator,
    check_audit_cases,
    check_help_and_docs,
)


def check_method(spec: MethodSpec, *, private: Optional[bool] = None, transports=TRANSPORTS) -> None:
    """Every check of this module for ``spec``: non-private and, when it has one, its private variant
    (``private``: only that one). ``transports``: those whose graphs must agree (gRPC needs the
    ``net`` extra)."""
    for p in ((False, True) if spec.private else (False,)) if private is None else (private,):
        for check in RUN_CHECKS:
            check(spec, p)
        check_transports_agree(spec, p, transports)
