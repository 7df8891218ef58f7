"""Participants in worker processes give exactly the run of participants in this process."""

import warnings

import numpy as np
import pytest

from bnsl_cli.federated.fleet import LocalFleet, ProcessFleet, make_fleet
from bnsl_cli.learn import LearnConfig, learn
from bnsl_cli.learn import DPConfig
from tests._sim import simulated_tables


def _tables():
    return simulated_tables(8, 3, 500, seed=2)[1]


def test_process_fleet_matches_local_fleet_bit_for_bit():
    tables = _tables()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = learn(tables, LearnConfig(rounds=15, workers=1, personal=True))
        b = learn(tables, LearnConfig(rounds=15, workers=2, personal=True))
    assert a.report["timing"]["workers"] == 1 and b.report["timing"]["workers"] == 2
    assert np.array_equal(a.W_raw, b.W_raw)
    assert all(np.array_equal(x, y) for x, y in zip(a.personal, b.personal))
    assert a.report["communication"]["bytes_total"] == b.report["communication"]["bytes_total"]


def test_dp_ledger_comes_back_from_the_workers():
    tables = _tables()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = learn(tables, LearnConfig(method="fed-sparse", rounds=4, workers=1, seed=5, dp=DPConfig(epsilon=20.0, delta=1e-5)))
        b = learn(tables, LearnConfig(method="fed-sparse", rounds=4, workers=3, seed=5, dp=DPConfig(epsilon=20.0, delta=1e-5)))
    assert a.report["privacy"] == b.report["privacy"]
    assert np.array_equal(a.W_raw, b.W_raw)
    steps = a.report["options"]["steps"]
    for part in a.report["privacy"]["participants"]:
        sel = [e for e in part["events"] if e["release"] == "coordinate-selection"]
        assert sum(e["count"] for e in sel) == 4 * steps


def test_make_fleet_choice():
    parts = [lambda m: m, lambda m: m]
    assert isinstance(make_fleet(parts, 1), LocalFleet)
    assert isinstance(make_fleet(parts, 0), LocalFleet)
    assert not isinstance(make_fleet([parts[0]], 4), ProcessFleet)


@pytest.mark.parametrize("workers", [1, 2])
def test_finish_hands_back_json_summaries(workers):
    """What a participant hands back crosses a transport as JSON: B_p, timings, ledger events as dicts."""
    import json

    from bnsl_cli.federated.methods.registry import method_spec
    from bnsl_cli.federated.methods.admm import drive_admm
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import Shapes
    from bnsl_cli.run import local_fleet

    tables = _tables()
    plan = RunPlan.resolve(LearnConfig(method="fed-sparse", rounds=2, workers=workers, personal=True, seed=1,
                                       dp=DPConfig(epsilon=20.0, delta=1e-5)), Shapes.of_tables(tables))
    fleet = local_fleet(plan, tables)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = drive_admm(method_spec(plan.method), plan, fleet)
    finally:
        fleet.close()
    again = json.loads(json.dumps(out.summaries))
    assert again == out.summaries and len(again) == len(tables)
    assert [s["participant"] for s in again] == list(range(1, len(tables) + 1))
    assert all(len(s["B"]) == plan.d and s["events"] for s in again)


def test_a_participant_error_in_a_worker_is_raised_by_the_coordinator():
    from bnsl_cli.errors import PrivacyBudgetError

    class Refuses:
        def handle(self, msg):
            raise PrivacyBudgetError("participant 2: no budget for that")

        def summary(self):
            return {}

    class Echo:
        def handle(self, msg):
            return msg

        def summary(self):
            return {}

    fleet = ProcessFleet([Echo(), Refuses()], 2)
    try:
        with pytest.raises(PrivacyBudgetError, match="no budget"):
            fleet.exchange(b"x" * 20)
    finally:
        fleet.close()
