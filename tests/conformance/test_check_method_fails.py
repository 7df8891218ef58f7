"""The conformance checks can fail: for each rule, a deliberately broken toy method (a real spec with
one declaration replaced, ``dataclasses.replace``, or a small new method) or a broken guard or message
is caught — and a well-behaved new method, not in the registry, passes the run checks.
"""

from __future__ import annotations

import multiprocessing as mp
import struct
from dataclasses import replace

import numpy as np
import pytest

from bnsl_cli.dag import finish_graph
from bnsl_cli.errors import InvalidReplyError
from bnsl_cli.federated.messages import MomentRequest, ShareReply, read_header
from bnsl_cli.federated.messages.wire import reply_shape
from bnsl_cli.federated.method_spec import MethodSpec, Rounds, Statistics
from bnsl_cli.federated.methods.registry import method_spec
from bnsl_cli.federated.outcome import SolverFinal, SolverOutcome, SolverTiming
from bnsl_cli.federated.reply_limits import MeanShares
from bnsl_cli.federated.site_sequence import OnceBeforeRounds, Step
from bnsl_cli.learn import learn
from bnsl_cli.plan.options import LearnConfig
from bnsl_cli.privacy.releases import PlannedRelease, ReleaseKind
from bnsl_cli.stats import sum_shares
from tests.conformance.check_method import (
    Seen,
    audit_case_names,
    check_audit_cases,
    check_help_and_docs,
    check_ledger_matches_plan,
    check_method,
    check_reply_limits,
    check_site_guard,
    check_transports_agree,
    check_undeclared_kinds_at_coordinator,
    check_undeclared_kinds_at_site,
    quiet,
    registered,
    tiny_tables,
    value_offsets,
    with_values,
)
from tests.test_adding_a_method import TOY

#: the real method the toys are made from: sum-shaped exchanges, a private variant, a fast run
BASE = method_spec("fed-moments")


# -- 1. the site guard and the reply limits ------------------------------------------------------


def test_a_sequence_that_declares_too_little_is_caught():
    """No step for the driver's requests: the guarded sites refuse the method's own run."""
    toy = replace(BASE, site_sequence=lambda plan: ())
    with pytest.raises(AssertionError, match="guard refused a message of the method's own driver"):
        check_site_guard(toy)


class Forgetful(Step):
    """A step that handles ``inner``'s kinds and makes its releases but admits every message again
    (it never records what was answered)."""

    def __init__(self, inner: Step):
        self.inner, self.kinds = inner, inner.kinds

    def releases(self, plan, kind, rnd, data):
        return self.inner.releases(plan, kind, rnd, data)


class Repeating(Seen):
    """A participant that answers a message it already answered with its earlier answer."""

    def __init__(self, inner):
        super().__init__(inner)
        self.answered: dict = {}

    def handle(self, data):
        if data not in self.answered:
            self.answered[data] = super().handle(data)
        return self.answered[data]


def test_a_sequence_that_admits_a_replay_is_caught():
    toy = replace(BASE, site_sequence=lambda plan: tuple(Forgetful(s) for s in BASE.site_sequence(plan)))
    with pytest.raises(AssertionError, match="replayed message of kind 23 reached the site's participant"):
        check_site_guard(toy)
    # with a participant that answers a repeated message again, the replay is answered
    twice = replace(toy, participant=lambda plan, pid, X, rng: Repeating(BASE.participant(plan, pid, X, rng)))
    with pytest.raises(AssertionError, match="answered a replayed message of kind 23"):
        check_site_guard(twice)


def test_reply_rules_that_declare_too_little_are_caught():
    """No reply rules: a share of the column means holding 1e99 (no rows give it; the blanket limit is
    1e100) is accepted, and the run stops one exchange later blaming an honest site (its share of the
    variances about the poisoned mean exceeds the blanket limit)."""
    toy = replace(BASE, reply_rules=None)
    with pytest.raises(AssertionError, match=r"kind-23 request holding 1e\+99 was accepted and the run stopped "
                                             r"1 exchange\(s\) later blaming another: participant 1"):
        check_reply_limits(toy)
    # rules for the means only: the moment shares' 1e99 passes, and nothing is said
    means_only = replace(BASE, reply_rules=lambda plan: {23: BASE.reply_rules(plan)[23]})
    with pytest.raises(AssertionError, match="kind-26 request holding 1e[+]99 .* was accepted without a word"):
        check_reply_limits(means_only)


def test_a_reply_out_of_the_declared_limits_is_refused_naming_its_sender():
    """The message the check sends, on its own: every value of a real share set to 1e99, refused by the
    run naming participant 3; the same bytes are a well-formed share."""
    req = MomentRequest(0, 4).encode()
    honest = ShareReply(0, 2, 4, np.array([0.5, -1.0, 2.0, 0.25])).encode()
    bad = with_values(req, honest, 1e99)
    assert len(bad) == len(honest) and np.all(ShareReply.decode(bad).values == 1e99)
    assert value_offsets(req, honest).tolist() == [18, 26, 34, 42]
    assert check_reply_limits(BASE) == {23: "refused", 26: "refused"}


# -- 2. the ledger against the plan ---------------------------------------------------------------


def _less_noise(plan):
    """``plan`` with every planned noise multiplier halved (what a buggy site would calibrate from)."""
    rel = tuple(replace(r, multiplier=r.multiplier / 2) for r in plan.privacy.releases)
    return replace(plan, privacy=replace(plan.privacy, releases=rel))


def test_a_site_that_adds_less_noise_than_planned_is_caught():
    """(The run itself withholds its result: the recorded spend exceeds the plan's.)"""
    toy = replace(BASE, participant=lambda plan, pid, X, rng: BASE.participant(_less_noise(plan), pid, X, rng))
    with pytest.raises(AssertionError, match="honest run failed .*recorded a spend"):
        check_ledger_matches_plan(toy, True)


class Relabelled(Seen):
    """A site whose ledger records its moment-matrix release as a covariance release (the same cost)."""

    def summary(self):
        out = dict(self.inner.summary())
        out["events"] = [{**e, "release": ReleaseKind.COVARIANCE.value} if e["release"] == ReleaseKind.MOMENT_MATRIX.value
                         else e for e in out["events"]]
        return out


def test_a_site_recording_another_release_than_planned_is_caught():
    toy = replace(BASE, participant=lambda plan, pid, X, rng: Relabelled(BASE.participant(plan, pid, X, rng)))
    with pytest.raises(AssertionError, match="recorded but not planned {\\('covariance'.*planned but not recorded "
                                             "{\\('moment-matrix'"):
        check_ledger_matches_plan(toy, True)


def test_a_planned_release_no_site_makes_is_caught():
    extra = PlannedRelease(ReleaseKind.COVARIANCE, "gaussian", 50.0)

    def builder(**shape):
        inner = BASE.release_builder(**shape)
        return lambda rho: [*inner(rho), extra]

    toy = replace(BASE, release_builder=builder)
    with pytest.raises(AssertionError, match="planned but not recorded {\\('covariance'"):
        check_ledger_matches_plan(toy, True)


# -- 3. undeclared message kinds ------------------------------------------------------------------


class NoGuard:
    """A "guard" that hands every message to its participant."""

    def __init__(self, participant, plan, rho=None):
        self.inner = participant

    def handle(self, data):
        return self.inner.handle(data)

    def summary(self):
        return self.inner.summary()


def test_a_site_that_takes_an_undeclared_kind_is_caught():
    with pytest.raises(AssertionError, match="undeclared kind 0 reached the site's participant"):
        check_undeclared_kinds_at_site(BASE, guard=NoGuard)


#: a kind number no message class declares
UNDECLARED = 99
assert reply_shape(UNDECLARED) is None


class MeansSite:
    """Answers any request with its share of the column means."""

    report_B = False

    def __init__(self, pid, X, n_total):
        self.pid, self._X, self.n_total = int(pid), np.asarray(X, float), int(n_total)

    def handle(self, data: bytes):
        head = read_header(data)
        return ShareReply(head.round, self.pid, head.d, self._X.sum(axis=0) / self.n_total).encode()

    def summary(self) -> dict:
        return {"participant": self.pid + 1, "rows": int(self._X.shape[0]), "B": None, "compute_s": 0.0,
                "events": [], "notes": {}}


def undeclared_drive(spec, plan, fleet, progress=None):
    """One exchange whose request kind no message class declares (its class was never declared)."""
    fleet.traffic.enter("means")
    raw = fleet.exchange(bytes([UNDECLARED]) + MomentRequest(1, plan.d).encode()[1:])
    assert np.all(np.isfinite(sum_shares(ShareReply.decode(r).values for r in raw)))
    W = np.zeros((plan.d, plan.d))
    Wf, _ = finish_graph(W, 0.0, spec.name, plan.names, plan.knowledge)
    return SolverOutcome(W, Wf, fleet.finish(), rounds=1, converged=True, timing=SolverTiming(compute_s=0.0),
                         messages="one exchange", warnings=[], final=SolverFinal(0.0))


#: a new method whose request class was never declared (``wire.declare``)
UNDECLARED_TOY = MethodSpec(
    "toy-undeclared", "one exchange of an undeclared request kind",
    participant=lambda plan, pid, X, rng: MeansSite(pid, X, plan.n_total), drive=undeclared_drive,
    rounds=Rounds.SOLVER, statistics=Statistics.SITE, default_lambda=0.0,
    site_sequence=lambda plan: (OnceBeforeRounds({UNDECLARED: lambda data: "toy request"}),),
    reply_rules=lambda plan: {UNDECLARED: MeanShares()},
)


def test_a_run_whose_requests_are_undeclared_stops_at_the_first_reply():
    """Before issue 44's fix this run finished, every reply accepted unread."""
    with registered(UNDECLARED_TOY), pytest.raises(InvalidReplyError, match="^participant 1 answered a kind-99 message"):
        quiet(learn, tiny_tables(), LearnConfig(method=UNDECLARED_TOY.name))


def test_a_driver_sending_an_undeclared_request_kind_is_caught():
    with pytest.raises(AssertionError, match="kind-99 message, whose replies no message class declares"):
        check_undeclared_kinds_at_coordinator(UNDECLARED_TOY)


# -- 4. the same graph over every transport -------------------------------------------------------


class ProcessDependent(Seen):
    """A site whose replies move by one part in a million when it runs in a worker process."""

    def handle(self, data):
        reply = super().handle(data)
        if reply is None or mp.current_process().name == "MainProcess":
            return reply
        out = bytearray(reply)
        for off in value_offsets(data, reply):
            (v,) = struct.unpack_from("<d", out, int(off))
            struct.pack_into("<d", out, int(off), v * (1 + 1e-6))
        return bytes(out)


def test_a_method_whose_graph_depends_on_the_transport_is_caught():
    toy = replace(BASE, participant=lambda plan, pid, X, rng: ProcessDependent(BASE.participant(plan, pid, X, rng)))
    with pytest.raises(AssertionError, match="learned processes differs from the one learned in-process"):
        check_transports_agree(toy, False, ("in-process", "processes"))


# -- 5. audit cases, help and docs ----------------------------------------------------------------


def test_a_release_without_audit_cases_is_caught():
    cases = [n for n in audit_case_names() if not n.startswith(ReleaseKind.MOMENT_MATRIX.value)]
    with pytest.raises(AssertionError, match="no audit case of its moment-matrix release"):
        check_audit_cases(BASE, True, cases=cases)
    extreme_missing = [n for n in audit_case_names() if not (n.startswith("moment-matrix") and "extreme row" in n)]
    with pytest.raises(AssertionError, match="no audit case of its moment-matrix release with an extreme row"):
        check_audit_cases(BASE, True, cases=extreme_missing)


def test_a_method_without_help_or_docs_is_caught():
    with pytest.raises(AssertionError, match="`bnsl learn --method`'s help does not name it"):
        check_help_and_docs(replace(BASE, name="toy-moments"))


# -- a well-behaved new method -------------------------------------------------------------------


@pytest.mark.parametrize("check", [check_site_guard, check_reply_limits, check_ledger_matches_plan,
                                   check_undeclared_kinds_at_site, check_undeclared_kinds_at_coordinator],
                         ids=lambda c: c.__name__.removeprefix("check_"))
def test_a_new_method_not_in_the_registry_passes_the_run_checks(check):
    """docs/architecture.md's recipe method (``tests/test_adding_a_method.py``), checked before it is
    registered: its run checks pass; it has no help line or docs yet."""
    check(TOY, False)


def test_a_new_method_passes_the_transport_check_and_lacks_its_docs():
    assert len(set(check_transports_agree(TOY, False, ("in-process", "processes")).values())) == 1
    with pytest.raises(AssertionError, match="help does not name it"):
        check_help_and_docs(TOY)


def test_check_method_runs_them_all_and_stops_at_the_missing_docs():
    with pytest.raises(AssertionError, match="help does not name it"):
        check_method(TOY, transports=("in-process", "processes"))
