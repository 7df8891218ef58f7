"""The coordinator validates every reply at the fleet seam (issue 20 item 3): finite values below
the limit, shapes, index ranges; a bad reply stops the run with exit code 6 naming the participant,
for in-process, worker-process and networked fleets alike; reports are strict JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bnsl_cli.errors import InvalidReplyError
from bnsl_cli.federated.fleet import LocalFleet, make_fleet
from bnsl_cli.federated.messages import (
    HEADER,
    CentreBroadcast,
    ConsensusBroadcast,
    DenseUpdate,
    GramReply,
    GramRequest,
    MessageKind,
    ShareReply,
    SparseEntries,
    SparseUpdate,
    StatsRequest,
    read_header,
    validate_reply,
)
from bnsl_cli.federated.methods.registry import make_participant, method_spec
from bnsl_cli.io.table import Table
from bnsl_cli.plan.options import LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import Shapes
from bnsl_cli.run import participant_rngs, run
from tests._sim import simulated_tables

D = 5
BAD = [math.nan, math.inf, -math.inf, 1e308]


def _bcast(r=3):
    return ConsensusBroadcast(r, D, np.zeros((D, D)), 1.0).encode()


def _sparse(values, rows=None, cols=None, objective=0.5):
    k = len(values)
    rows = np.arange(k, dtype=np.int32) % D if rows is None else np.asarray(rows, np.int32)
    cols = (np.arange(k, dtype=np.int32) + 1) % D if cols is None else np.asarray(cols, np.int32)
    return SparseUpdate(3, 1, D, SparseEntries(rows, cols, np.asarray(values, float)), objective).encode()


@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf", "1e308"])
def test_every_value_of_every_reply_kind_is_checked(bad):
    assert validate_reply(_bcast(), _sparse([0.1, 0.2]), 1) is None
    assert validate_reply(_bcast(), _sparse([0.1, bad]), 1) is not None
    assert validate_reply(_bcast(), _sparse([0.1], objective=bad), 1) is not None
    B = np.zeros((D, D))
    B[1, 2] = bad
    assert validate_reply(_bcast(), DenseUpdate(3, 1, D, np.zeros((D, D)), None).encode(), 1) is None
    assert validate_reply(_bcast(), DenseUpdate(3, 1, D, B, None).encode(), 1) is not None
    req = GramRequest(4, D, np.array([1, 7], np.int64)).encode()
    assert validate_reply(req, GramReply(4, 0, D, np.array([0.5, 0.25])).encode(), 0) is None
    assert validate_reply(req, GramReply(4, 0, D, np.array([0.5, bad])).encode(), 0) is not None
    sreq = StatsRequest(0, D).encode()
    share = np.zeros(D)
    assert validate_reply(sreq, ShareReply(0, 2, D, share).encode(), 2) is None
    share[3] = bad
    why = validate_reply(sreq, ShareReply(0, 2, D, share).encode(), 2)
    assert why is not None and "share" in why


def test_indices_and_shapes_are_checked():
    # an entry outside the d × d matrix (flat index d², and a negative one), an entry named twice
    assert "outside" in validate_reply(_bcast(), _sparse([1.0], rows=[D], cols=[0]), 1)
    raw = bytearray(_sparse([1.0]))
    raw[-12:-8] = np.array([-1], "<i4").tobytes()
    assert "outside" in validate_reply(_bcast(), bytes(raw), 1)
    assert "twice" in validate_reply(_bcast(), _sparse([1.0, 2.0], rows=[1, 1], cols=[2, 2]), 1)
    # wrong shapes: a dense update of another d, a share of the wrong length, a truncated reply
    assert validate_reply(_bcast(), DenseUpdate(3, 1, D + 1, np.zeros((D + 1, D + 1))).encode(), 1) is not None
    full = CentreBroadcast(1, D, np.zeros(D), full=True).encode()
    assert "malformed" in validate_reply(full, ShareReply(1, 0, D, np.zeros(D)).encode(), 0)
    # a share of the pooled variances is never negative (a share of the full moment matrix may be,
    # under DP: its noise is symmetric)
    var = CentreBroadcast(1, D, np.zeros(D)).encode()
    assert validate_reply(var, ShareReply(1, 0, D, np.full(D, 0.5)).encode(), 0) is None
    assert "negative variance share" in validate_reply(var, ShareReply(1, 0, D, np.full(D, -0.5)).encode(), 0)
    assert validate_reply(full, ShareReply(1, 0, D, -np.ones(D * (D + 1) // 2)).encode(), 0) is None
    assert "malformed" in validate_reply(_bcast(), _sparse([1.0, 2.0])[:-3], 1)
    # the header: its kind, round and sender
    assert "signed as participant" in validate_reply(_bcast(), _sparse([1.0]), 0)
    assert "round" in validate_reply(_bcast(4), _sparse([1.0]), 1)
    assert read_header(_sparse([1.0])).kind == MessageKind.SPARSE_UPDATE


# -- at the fleet seam: a run with one corrupt participant -----------------------------------------


@pytest.fixture(scope="module")
def tables():
    _, t = simulated_tables(D, 3, 300, 4)
    return [Table(x.X, x.names, f"site{k}") for k, x in enumerate(t)]


class Corrupt:
    """Participant ``inner`` whose reply to the ``nth`` message of ``kind`` is replaced by ``bad(reply)``."""

    def __init__(self, inner, kind, bad, nth=1):
        self.inner, self.kind, self.bad, self.nth, self.seen = inner, kind, bad, nth, 0
        self.pid = inner.pid

    def handle(self, data):
        reply = self.inner.handle(data)
        if data[0] == self.kind:
            self.seen += 1
            if self.seen == self.nth:
                return self.bad(reply)
        return reply

    def summary(self):
        return self.inner.summary()


def _set_values(reply, value):
    """``reply`` (a sparse update, dense update or share) with its first value replaced by ``value``."""
    head = read_header(reply)
    if head.kind == MessageKind.SPARSE_UPDATE:
        u = SparseUpdate.decode(reply)
        if len(u.entries) == 0:  # nothing changed this round: name one entry
            e = SparseEntries(np.array([0], np.int32), np.array([1], np.int32), np.array([value]))
        else:
            vals = u.entries.values.copy()
            vals[0] = value
            e = SparseEntries(u.entries.rows, u.entries.cols, vals)
        return SparseUpdate(u.round, u.sender, u.d, e, u.objective).encode()
    if head.kind == MessageKind.DENSE_UPDATE:
        u = DenseUpdate.decode(reply)
        B = u.B.copy()
        B[0, 1] = value
        return DenseUpdate(u.round, u.sender, u.d, B, u.objective).encode()
    s = ShareReply.decode(reply)
    v = s.values.copy()
    v[0] = value
    return ShareReply(s.round, s.sender, s.d, v).encode()


def _out_of_range(reply):
    u = SparseUpdate.decode(reply)
    e = SparseEntries(np.array([u.d], np.int32), np.array([0], np.int32), np.array([0.5]))
    return SparseUpdate(u.round, u.sender, u.d, e, u.objective).encode()


def _wrong_shape(reply):
    return reply[:HEADER.size] + reply[HEADER.size:-8]


CASES = [
    ("fed-sparse", MessageKind.BROADCAST, lambda r: _set_values(r, math.nan), "non-finite"),
    ("fed-sparse", MessageKind.BROADCAST, lambda r: _set_values(r, math.inf), "non-finite"),
    ("fed-sparse", MessageKind.BROADCAST, lambda r: _set_values(r, 1e308), "magnitude 1e+308"),
    ("fed-sparse", MessageKind.BROADCAST, _out_of_range, "outside the d × d matrix"),
    ("fed-bnsl", MessageKind.BROADCAST, _wrong_shape, "malformed"),
    ("fed-bnsl", MessageKind.BROADCAST, lambda r: _set_values(r, -math.inf), "non-finite"),
    ("fed-sparse", MessageKind.STATS_REQUEST, lambda r: _set_values(r, math.nan), "non-finite value (nan) in its share"),
    ("fed-moments", MessageKind.MOMENT_REQUEST, lambda r: _set_values(r, math.nan), "non-finite value (nan) in its share"),
]


def _participants(plan, tables, corrupt_at, kind, bad):
    rngs = participant_rngs(plan) if plan.private else [None] * plan.P
    parts = [make_participant(plan, k, t.X, rngs[k]) for k, t in enumerate(tables)]
    parts[corrupt_at] = Corrupt(parts[corrupt_at], kind, bad, nth=2 if kind == MessageKind.BROADCAST else 1)
    return parts


@pytest.mark.parametrize("method, kind, bad, says", CASES, ids=[f"{c[0]}-{c[3][:20]}" for c in CASES])
def test_a_bad_reply_stops_the_run_naming_its_participant(tables, method, kind, bad, says):
    rounds = {"rounds": 6} if "--rounds" in method_spec(method).options else {}  # refused where not taken
    plan = RunPlan.resolve(LearnConfig(method=method, **rounds), Shapes.of_tables(tables))
    fleet = LocalFleet(_participants(plan, tables, 1, kind, bad))
    with pytest.raises(InvalidReplyError) as info:
        run(plan, fleet)
    msg = str(info.value)
    assert info.value.exit_code == 6 and msg.startswith("participant 2 ") and says in msg, msg
    assert "\n" not in msg


def test_worker_processes_validate_too(tables):
    plan = RunPlan.resolve(LearnConfig(rounds=6), Shapes.of_tables(tables))
    fleet = make_fleet(_participants(plan, tables, 2, MessageKind.BROADCAST, lambda r: _set_values(r, math.nan)), 2)
    try:
        assert fleet.workers == 2
        with pytest.raises(InvalidReplyError, match="^participant 3 sent a non-finite value"):
            run(plan, fleet)
    finally:
        fleet.close()


def test_a_nan_mean_share_names_the_site_that_sent_it(tables):
    """Site 3 sends a NaN mean share: the run stops at that exchange naming site 3 (not one of the
    honest sites that would have refused the NaN centre broadcast next)."""
    plan = RunPlan.resolve(LearnConfig(rounds=6), Shapes.of_tables(tables))
    fleet = LocalFleet(_participants(plan, tables, 2, MessageKind.STATS_REQUEST, lambda r: _set_values(r, math.nan)))
    with pytest.raises(InvalidReplyError, match="^participant 3 sent a non-finite value"):
        run(plan, fleet)


# -- strict JSON -----------------------------------------------------------------------------------


def _strict(text):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_json_text_writes_non_finite_numbers_as_null():
    from bnsl_cli.cli.common import json_text

    obj = {"h": math.inf, "gap": np.float64("nan"), "a": np.array([1.0, -np.inf]), "t": (1, 2.5), "ok": 0.1}
    got = _strict(json_text(obj))
    assert got == {"h": None, "gap": None, "a": [1.0, None], "t": [1, 2.5], "ok": 0.1}


def test_learn_report_and_json_output_are_strict_json(tmp_path):
    from typer.testing import CliRunner

    from bnsl_cli.cli.app import app

    sim, tabs = simulated_tables(D, 2, 200, 5)
    shards = tmp_path / "shards"
    shards.mkdir()
    for k, t in enumerate(tabs):
        np.savetxt(shards / f"p{k}.csv", t.X, delimiter=",", header=",".join(sim.names), comments="")
    res = CliRunner().invoke(app, ["learn", str(shards), "--out", str(tmp_path / "o"), "--rounds", "3", "-q", "--json"])
    assert res.exit_code == 0, res.output
    _strict((tmp_path / "o" / "report.json").read_text())
    _strict(res.stdout)
