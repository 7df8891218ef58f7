"""Bytes are counted once, at the fleet seam (bnsl_cli/federated/traffic.py), and the report's
``communication`` is built from that count alone (bnsl_cli/report.py).

Every participant here is wrapped in a recorder that notes the length of every message it is
handed and of every reply it gives (in worker processes too: the notes come back in its summary).
Whatever the driver does, the report's numbers must equal what the participants saw."""

from __future__ import annotations

import ast
from pathlib import Path

import warnings

import pytest

from bnsl_cli.federated.fleet import LocalFleet, make_fleet
from bnsl_cli.federated.messages import MomentRequest
from bnsl_cli.federated.methods.registry import make_participant, method_spec
from bnsl_cli.federated.secure_local import SecureLocalFleet
from bnsl_cli.federated.traffic import FINAL, POLISH, STANDARDIZE, Traffic
from bnsl_cli.errors import ConvergenceWarning, NoisyReleaseWarning, ReproducibleNoiseWarning
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import Shapes
from bnsl_cli.privacy.split_noise import split_of
from bnsl_cli.report import communication_report
from bnsl_cli.run import participant_rngs, run
from tests._sim import simulated_tables

pytestmark = pytest.mark.filterwarnings("ignore::bnsl_cli.errors.ConvergenceWarning",
                                        "ignore::bnsl_cli.errors.PrivacyWarning",
                                        "ignore::bnsl_cli.errors.ReproducibleNoiseWarning")

DP = DPConfig(epsilon=8, value_bound=10.0)
CONFIGS = {
    "fed-sparse": LearnConfig(rounds=3, seed=1),
    "fed-sparse-standardize": LearnConfig(rounds=3, standardize=True, seed=1),
    "fed-sparse-dp": LearnConfig(method="fed-sparse", rounds=3, steps=10, dp=DP, seed=1),
    "fed-bnsl": LearnConfig(method="fed-bnsl", rounds=3, seed=1),
    "fed-bnsl-dp": LearnConfig(method="fed-bnsl", rounds=3, dp=DP, seed=1),
    "fed-moments": LearnConfig(method="fed-moments", seed=1),
    "fed-moments-dp": LearnConfig(method="fed-moments", dp=DP, seed=1),
    "fed-suffstats": LearnConfig(method="fed-suffstats", seed=1),
    "fed-suffstats-dp": LearnConfig(method="fed-suffstats", dp=DPConfig(epsilon=8), seed=1),
    "local-notears": LearnConfig(method="local-notears", seed=1),
}


class Recorder:
    """A participant that notes ``(len(message), len(reply))`` of everything it answers."""

    def __init__(self, inner):
        self.inner = inner
        self.seen: list = []

    def handle(self, data: bytes):
        reply = self.inner.handle(data)
        self.seen.append((len(data), 0 if reply is None else len(reply)))
        return reply

    def summary(self) -> dict:
        return {**self.inner.summary(), "seen": list(self.seen)}


class Keeping:
    """A fleet around another that keeps the summaries it hands the driver (and counts nothing:
    its meter is the inner fleet's)."""

    def __init__(self, inner):
        self.inner = inner
        self.workers = inner.workers
        self.secure_sum = inner.secure_sum
        self.traffic = inner.traffic
        self.summaries = None

    def __len__(self) -> int:
        return len(self.inner)

    def exchange(self, msg: bytes):
        return self.inner.exchange(msg)

    def finish(self):
        self.summaries = self.inner.finish()
        return self.summaries

    def close(self) -> None:
        self.inner.close()


@pytest.fixture(scope="module")
def tables():
    return simulated_tables(5, 3, 300, 2)[1]


def _fleet(plan, tables, workers):
    rngs = participant_rngs(plan) if plan.private else [None] * plan.P
    parts = [Recorder(make_participant(plan, k, t.X, rngs[k])) for k, t in enumerate(tables)]
    fleet = make_fleet(parts, workers)
    if split_of(plan) > 1 and method_spec(plan.method).distributed_noise:
        fleet = SecureLocalFleet(fleet, plan.P)  # the masked replies cross, as over the network
    return Keeping(fleet)


def _learn(name, tables, workers):
    plan = RunPlan.resolve(CONFIGS[name], Shapes.of_tables(tables))
    fleet = _fleet(plan, tables, workers)
    try:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            result = run(plan, fleet)
    finally:
        fleet.close()
    # the warnings these runs may give (the short runs' ConvergenceWarning aside): a private run drawn
    # from --seed says so, and one whose noise left no edge says that
    expected = {ReproducibleNoiseWarning} if plan.private and plan.seed is not None else set()
    if plan.private and not result.W.any():
        expected.add(NoisyReleaseWarning)
    assert {w.category for w in rec} - {ConvergenceWarning} == expected
    return plan, fleet, result


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_report_counts_exactly_what_crossed(tables, name, workers):
    plan, fleet, result = _learn(name, tables, workers)
    assert fleet.workers == min(workers, plan.P)
    if name == "fed-suffstats-dp":
        assert isinstance(fleet.inner, SecureLocalFleet)  # distributed noise: the replies cross masked
    rep = result.report
    comm = rep["communication"]
    # what every participant was handed and answered (from its worker process with workers=2)
    seen = [s["seen"] for s in fleet.summaries]
    up = [sum(r for _, r in s) for s in seen]
    down = [sum(m for m, _ in s) for s in seen]
    assert (fleet.traffic.up(), fleet.traffic.down()) == (sum(up), sum(down))
    assert (comm["bytes_up"], comm["bytes_down"]) == (sum(up), sum(down))
    assert comm["bytes_total"] == sum(up) + sum(down)
    if not method_spec(plan.method).federated:
        assert sum(up) == sum(down) == 0
        return
    assert sum(up) > 0 and sum(down) > 0
    assert [len(s) for s in seen] == [fleet.traffic.exchanges()] * plan.P
    if "per_participant" in comm:  # the ADMM methods
        assert [(e["bytes_up"], e["bytes_down"]) for e in comm["per_participant"]] == list(zip(up, down))
        stage = comm["standardize"]
        assert sum(r["bytes_up"] for r in comm["per_round"]) + stage["bytes_up"] == comm["bytes_up"]
        assert sum(r["bytes_down"] for r in comm["per_round"]) + stage["bytes_down"] == comm["bytes_down"]
        # each round's record carries its exchange's bytes
        rounds = comm["per_round"][: rep["rounds"]]
        assert [r["round"] for r in rounds] == list(range(1, rep["rounds"] + 1))
        assert [(h["bytes_up"], h["bytes_down"]) for h in rep["history"]] == [(r["bytes_up"], r["bytes_down"]) for r in rounds]
        assert comm["per_round"][-1]["round"] == FINAL and comm["per_round"][-1]["bytes_up"] == 0
        assert comm["polish"] == fleet.traffic.totals([POLISH])
        assert rep["standardize"]["bytes_up"] == stage["bytes_up"] == sum(rep["standardize"]["per_participant_up"])
        assert rep["standardize"]["bytes_down"] == stage["bytes_down"] == sum(rep["standardize"]["per_participant_down"])
    else:
        assert comm["exchanges"] == len(seen[0])


def test_one_worker_and_two_report_the_same_bytes(tables):
    for name in ("fed-sparse-standardize", "fed-moments", "fed-suffstats-dp"):
        a = _learn(name, tables, 1)[2].report
        b = _learn(name, tables, 2)[2].report
        assert a["communication"] == b["communication"], name
        assert a.get("standardize") == b.get("standardize"), name


def test_the_report_reads_the_meter_not_the_driver(tables):
    """Whatever a driver hands back, the bytes in the report are the meter's: an exchange the
    driver made shows up, and nothing the outcome holds is a byte count."""
    plan = RunPlan.resolve(CONFIGS["fed-moments"], Shapes.of_tables(tables))
    spec = method_spec(plan.method)
    fleet = _fleet(plan, tables, 1)
    outcome = spec.drive(spec, plan, fleet)
    assert not [k for k in vars(outcome) if "bytes" in k]
    before = communication_report(spec, outcome, fleet.traffic, False)
    msg = MomentRequest(9, plan.d).encode()
    fleet.traffic.enter("extra")
    fleet.traffic.count(msg, [None] * plan.P)  # one more message to every site, as a fleet counts it
    after = communication_report(spec, outcome, fleet.traffic, False)
    assert after["exchanges"] == before["exchanges"] + 1
    assert after["bytes_down"] == before["bytes_down"] + plan.P * len(msg)
    assert after["bytes_up"] == before["bytes_up"]


def test_the_meter_counts_a_broadcast_once_per_participant_and_no_reply_as_zero():
    t = Traffic(3)
    t.enter(1)
    t.count(b"x" * 10, [b"ab", None, b"abcd"])
    t.enter(FINAL)
    t.count(b"y" * 4, [None, None, None])
    assert t.stages() == [1, FINAL]
    assert t.totals() == {"bytes_up": 6, "bytes_down": 42}
    assert t.totals([1]) == {"bytes_up": 6, "bytes_down": 30}
    assert t.per_participant() == [(2, 14), (0, 14), (4, 14)]
    assert t.exchanges([FINAL]) == 1 and t.since(1).totals() == {"bytes_up": 0, "bytes_down": 12}


def test_a_local_fleet_counts_under_the_stage_entered():
    fleet = LocalFleet([lambda m: m[:3], lambda m: None])
    fleet.traffic.enter(STANDARDIZE)
    with pytest.raises(Exception):  # noqa: B017 - not a protocol message: refused after it crossed
        fleet.exchange(b"\x00" * 40)
    assert fleet.traffic.crossings[0].stage == STANDARDIZE
    assert fleet.traffic.totals() == {"bytes_up": 3, "bytes_down": 80}


#: The report's byte entries (a site's own transcript, ``bytes_sent``, is no report entry).
REPORT_BYTE_KEYS = {"bytes_up", "bytes_down", "bytes_total", "per_participant_up", "per_participant_down"}


def test_no_module_but_the_report_builder_and_the_meter_names_a_byte_count():
    """``bytes_up`` / ``bytes_down`` are written by the report builder (and the meter's totals)
    only: no driver, stage or fleet writes them; the CLI and ``show`` only read them."""
    package = Path(__file__).resolve().parents[2] / "bnsl_cli"
    allowed = {"report.py", "federated/traffic.py"}
    readers = {"cli/output.py", "io/showrun.py"}
    offenders = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel in allowed or rel in readers:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in REPORT_BYTE_KEYS:
                offenders.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not offenders, "\n".join(offenders)
