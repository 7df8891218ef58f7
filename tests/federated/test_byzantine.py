"""Byzantine sites (issue 28): a site whose replies pass the blanket range (finite, below 1e100) but
go beyond what its rows can give is named — stopped when the protocol's limits or the descent bound
rule it out, warned about when it only stands far outside the other sites — and never an honest site.

Every test wraps one honest participant in :class:`Poisoned`, which rewrites its replies."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bnsl_cli.errors import ByzantineWarning, InvalidReplyError
from bnsl_cli.federated.fleet import LocalFleet
from bnsl_cli.federated.messages import (
    REPLY_VALUE_LIMIT,
    DenseUpdate,
    GramReply,
    GramRequest,
    MessageKind,
    ShareReply,
    SparseEntries,
    SparseUpdate,
    read_header,
)
from bnsl_cli.federated.methods.registry import make_participant, method_spec
from bnsl_cli.federated.secure_local import SecureLocalFleet
from bnsl_cli.io.table import Table
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import Shapes
from bnsl_cli.run import participant_rngs, run
from tests._sim import simulated_tables

D, P, ROWS = 6, 3, 400
#: the poisoned site (0-based): participant 3
BAD = 2


@pytest.fixture(scope="module")
def tables():
    _, t = simulated_tables(D, P, ROWS, 1)
    return [Table(x.X, x.names, f"site{k}") for k, x in enumerate(t)]


class Poisoned:
    """Participant ``inner`` whose reply to every message of kind ``kind`` is rewritten by ``change``
    (``change(reply bytes, request bytes) -> bytes``)."""

    def __init__(self, inner, kind, change):
        self.inner, self.kind, self.change = inner, kind, change
        self.pid = inner.pid

    def handle(self, data):
        reply = self.inner.handle(data)
        if reply is not None and data[0] == self.kind:
            return self.change(reply, data)
        return reply

    def summary(self):
        return self.inner.summary()


def every_value(value):
    """A ``change`` that sets every value of a reply to ``value`` (an update: every off-diagonal entry)."""

    def change(reply, _request):
        kind = read_header(reply).kind
        if kind == MessageKind.SPARSE_UPDATE:
            u = SparseUpdate.decode(reply)
            r, c = np.nonzero(~np.eye(u.d, dtype=bool))
            e = SparseEntries(r.astype(np.int32), c.astype(np.int32), np.full(r.size, value))
            return SparseUpdate(u.round, u.sender, u.d, e, u.objective).encode()
        if kind == MessageKind.DENSE_UPDATE:
            u = DenseUpdate.decode(reply)
            B = np.full((u.d, u.d), value)
            np.fill_diagonal(B, 0.0)
            return DenseUpdate(u.round, u.sender, u.d, B, u.objective).encode()
        if kind == MessageKind.GRAM_REPLY:
            g = GramReply.decode(reply)
            return GramReply(g.round, g.sender, g.d, np.full(g.values.size, value)).encode()
        s = ShareReply.decode(reply)
        return ShareReply(s.round, s.sender, s.d, np.full(s.values.size, value)).encode()

    return change


def first_value(value):
    """A ``change`` that sets the first value of a share (or second-moment reply) to ``value``."""

    def change(reply, _request):
        if read_header(reply).kind == MessageKind.GRAM_REPLY:
            g = GramReply.decode(reply)
            v = g.values.copy()
            v[0] = value
            return GramReply(g.round, g.sender, g.d, v).encode()
        s = ShareReply.decode(reply)
        v = s.values.copy()
        v[0] = value
        return ShareReply(s.round, s.sender, s.d, v).encode()

    return change


def _plan(tables, method, **kw):
    spec = method_spec(method)
    if "--rounds" in spec.options:
        kw.setdefault("rounds", 8)
    return RunPlan.resolve(LearnConfig(method=method, **kw), Shapes.of_tables(tables))


def _parts(plan, tables, kind, change):
    rngs = participant_rngs(plan) if plan.private else [None] * plan.P
    parts = [make_participant(plan, k, t.X, rngs[k]) for k, t in enumerate(tables)]
    parts[BAD] = Poisoned(parts[BAD], kind, change)
    return parts


def _run(plan, fleet):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run(plan, fleet)
    return res, caught


def _stopped(plan, fleet) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InvalidReplyError) as info:
            run(plan, fleet)
    assert info.value.exit_code == 6
    return str(info.value)


# -- a poisoned share of the column means is blamed on its sender ----------------------------------------


@pytest.mark.parametrize("method, kind", [
    ("fed-sparse", MessageKind.STATS_REQUEST),
    ("fed-moments", MessageKind.MOMENT_REQUEST),
    ("fed-suffstats", MessageKind.FIRST_REQUEST),
])
def test_a_poisoned_mean_share_names_its_sender_not_an_honest_site(tables, method, kind):
    """1e99 passes the blanket limit; before, the pooled mean overflowed the honest sites' second
    moments and the run blamed participant 1 ("3.33e+197")."""
    plan = _plan(tables, method)
    msg = _stopped(plan, LocalFleet(_parts(plan, tables, kind, first_value(1e99))))
    assert msg.startswith("participant 3 sent a value of magnitude 1e+99 in its share of the column means"), msg
    assert f"more than its {ROWS} rows can give" in msg


def test_a_mean_share_inconsistent_with_the_same_sites_variance_share_is_refused(tables):
    """A site that moves its mean share within the limit (1e47 < n_p/n · 1e48) but answers the centre
    broadcast from its real rows sent a share of squares smaller than its claimed mean implies: the
    run stops naming it (the honest sites' shares about the dragged centre pass their limits)."""
    plan = _plan(tables, "fed-sparse")
    msg = _stopped(plan, LocalFleet(_parts(plan, tables, MessageKind.STATS_REQUEST, first_value(1e47))))
    assert msg.startswith("participant 3 sent a share of the pooled variances"), msg
    assert "below what its own column means imply" in msg


def test_a_poisoned_variance_share_is_named_in_a_warning(tables):
    """A share of squares of 1e60 is within what values below 1e48 can give, but it makes the pooled
    spread that site's: a ByzantineWarning names it (the scale warning alone named only the column)."""
    plan = _plan(tables, "fed-sparse")
    res, caught = _run(plan, LocalFleet(_parts(plan, tables, MessageKind.CENTRE, first_value(1e60))))
    named = [str(w.message) for w in caught if issubclass(w.category, ByzantineWarning)]
    assert len(named) == 1 and named[0].startswith("participant 3's rows spread"), named
    assert named[0] in res.report["warnings"]


# -- updates beyond what the rows allow (--no-polish) ----------------------------------------------------


@pytest.mark.parametrize("method, value", [("fed-sparse", 1e99), ("fed-sparse", 1e6), ("fed-bnsl", 1e99)])
def test_updates_beyond_what_the_rows_allow_stop_the_run_naming_the_site(tables, method, value):
    """Before: exit 0, no warning, every edge of the same weight. A local step never raises the site's
    objective; its second moments are bounded by its share of the pooled variances."""
    extra = {"polish": False} if method_spec(method).polishable else {}
    plan = _plan(tables, method, **extra)
    msg = _stopped(plan, LocalFleet(_parts(plan, tables, MessageKind.BROADCAST, every_value(value))))
    assert msg.startswith("participant 3 sent an update in round 1 with ‖B_p − W‖ ="), msg
    assert "more than its rows allow" in msg


@pytest.mark.parametrize("method", ["fed-sparse", "fed-bnsl"])
def test_a_private_site_far_outside_the_others_is_named_in_a_warning(tables, method):
    """Private updates are noisy (no descent bound): a site whose updates stand far outside the other
    sites' is named in a ByzantineWarning, listed in the report; the honest sites are not."""
    extra = {"polish": False} if method_spec(method).polishable else {}
    plan = _plan(tables, method, dp=DPConfig(epsilon=5.0), seed=1, **extra)
    res, caught = _run(plan, LocalFleet(_parts(plan, tables, MessageKind.BROADCAST, every_value(1e99))))
    named = [str(w.message) for w in caught if issubclass(w.category, ByzantineWarning)]
    assert len(named) == 1 and named[0].startswith("participant 3's updates were far outside the other sites'"), named
    assert named[0] in res.report["warnings"]


# -- the polish's second moments ---------------------------------------------------------------------------


def test_the_polish_second_moments_are_checked_against_the_sites_variances(tables):
    plan = _plan(tables, "fed-sparse")
    msg = _stopped(plan, LocalFleet(_parts(plan, tables, MessageKind.GRAM_REQUEST, every_value(1e99))))
    assert msg.startswith("participant 3 sent a value of magnitude 1e+99 in its second moments (polish)"), msg


def test_second_moments_no_rows_can_have_are_refused(tables):
    """Every value within its limit, but not positive semi-definite: a smaller S_aa makes
    |S_ab| > √(S_aa S_bb), which no site's own rows can give."""

    def skew(reply, request):
        g, pairs = GramReply.decode(reply), GramRequest.decode(request).pairs
        v = g.values.copy()
        a, b = pairs // g.d, pairs % g.d
        k = int(np.flatnonzero(a != b)[0])
        aa, bb = pairs == a[k] * g.d + a[k], pairs == b[k] * g.d + b[k]
        v[aa] = 0.5 * v[k] ** 2 / v[bb]
        return GramReply(g.round, g.sender, g.d, v).encode()

    plan = _plan(tables, "fed-sparse")
    msg = _stopped(plan, LocalFleet(_parts(plan, tables, MessageKind.GRAM_REQUEST, skew)))
    assert msg.startswith("participant 3 sent second moments that no rows can have"), msg


# -- private plans: the limits from the clip and the noise tail ------------------------------------------


@pytest.mark.parametrize("method, kind, what", [
    ("fed-sparse", MessageKind.STATS_REQUEST, "share of the column means"),
    ("fed-sparse", MessageKind.GRAM_REQUEST, "second moments (polish)"),
    ("fed-moments", MessageKind.CENTRE, "share of the pooled moments"),
    ("fed-suffstats", MessageKind.FIRST_REQUEST, "scale histograms"),
])
def test_a_private_reply_beyond_the_derived_limit_is_refused_naming_its_sender(tables, method, kind, what):
    """1e30 is far below the blanket 1e100, but beyond what n_p rows clipped at the release's clip plus
    40 noise stds of that release can give."""
    assert 1e30 < REPLY_VALUE_LIMIT
    noise = {"noise": "per-site"} if "--noise" in method_spec(method).options else {}  # in process: no secure sum
    plan = _plan(tables, method, dp=DPConfig(epsilon=5.0, **noise), seed=1)
    msg = _stopped(plan, LocalFleet(_parts(plan, tables, kind, first_value(1e30))))
    assert msg.startswith(f"participant 3 sent a value of magnitude 1e+30 in its {what}"), msg
    assert f"more than its {ROWS} rows can give" in msg and "noise std" in msg


def test_private_histograms_must_add_up_to_the_declared_rows(tables):
    """Each column's histogram counts every row once: a share whose counts add up to far more than the
    site's rows (each bin within its own limit) is refused."""

    def inflate(reply, _request):
        s = ShareReply.decode(reply)
        return ShareReply(s.round, s.sender, s.d, s.values + 0.2 * ROWS / (P * ROWS)).encode()

    plan = _plan(tables, "fed-suffstats", dp=DPConfig(epsilon=5.0, noise="per-site"), seed=1)
    msg = _stopped(plan, LocalFleet(_parts(plan, tables, MessageKind.FIRST_REQUEST, inflate)))
    assert msg.startswith("participant 3 sent scale histograms whose column ") and " adds up to " in msg, msg


# -- under a secure sum: the sum is checked, no site can be named ----------------------------------------


def test_a_securely_summed_share_beyond_the_sites_limits_stops_the_run_naming_no_site(tables):
    """Distributed noise in process: the coordinator sees only the sum of the masked shares; a sum beyond
    the sum of the sites' limits stops the run, and the message says no site can be named."""
    plan = _plan(tables, "fed-suffstats", dp=DPConfig(epsilon=5.0, noise="distributed"), seed=1)
    fleet = SecureLocalFleet(LocalFleet(_parts(plan, tables, MessageKind.FIRST_REQUEST, first_value(1e5))), plan.P)
    msg = _stopped(plan, fleet)
    assert msg.startswith("the sites' securely summed scale histograms holds a value of magnitude 1e+05"), msg
    assert "a secure sum cannot tell which site sent it" in msg
