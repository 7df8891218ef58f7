"""The typed contracts (bnsl_cli/federated/contracts.py): every fleet and every participant the run
builds satisfies its Protocol, and sets up all of its attributes in its constructor (a run adds none)."""

from __future__ import annotations

import warnings

import pytest

from bnsl_cli.federated.contracts import Fleet, Participant
from bnsl_cli.federated.fleet import LocalFleet, ProcessFleet
from bnsl_cli.federated.methods.registry import make_participant
from bnsl_cli.errors import ConvergenceWarning, NoisyReleaseWarning, ReproducibleNoiseWarning
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import Shapes
from bnsl_cli.run import participant_rngs, run
from tests._sim import simulated_tables

pytestmark = pytest.mark.filterwarnings("ignore::bnsl_cli.errors.ConvergenceWarning")

CONFIGS = {
    "fed-sparse": LearnConfig(rounds=4, personal=True),
    "fed-sparse-standardize": LearnConfig(rounds=4, standardize=True),
    "fed-sparse-dp": LearnConfig(method="fed-sparse", rounds=3, steps=10, dp=DPConfig(epsilon=8, value_bound=10.0)),
    "fed-bnsl": LearnConfig(method="fed-bnsl", rounds=4, personal=True),
    "fed-bnsl-dp": LearnConfig(method="fed-bnsl", rounds=4, dp=DPConfig(epsilon=8, value_bound=10.0)),
    "fed-moments": LearnConfig(method="fed-moments"),
    "fed-moments-dp": LearnConfig(method="fed-moments", dp=DPConfig(epsilon=8, value_bound=10.0)),
}


@pytest.fixture(scope="module")
def tables():
    return simulated_tables(5, 3, 300, 2)[1]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_fleets_and_participants_keep_their_constructor_attributes(tables, name):
    plan = RunPlan.resolve(CONFIGS[name], Shapes.of_tables(tables))
    rngs = participant_rngs(plan) if plan.private else [None] * plan.P
    parts = [make_participant(plan, k, t.X, rngs[k]) for k, t in enumerate(tables)]
    fleet = LocalFleet(parts)
    assert isinstance(fleet, Fleet) and all(isinstance(p, Participant) for p in parts)
    before = [set(vars(p)) for p in parts], set(vars(fleet))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        result = run(plan, fleet)
    # the warnings these runs may give (the short runs' ConvergenceWarning aside): a private run drawn
    # from --seed says so, and one whose noise left no edge says that
    expected = {ReproducibleNoiseWarning} if plan.private and plan.seed is not None else set()
    if plan.private and not result.W.any():
        expected.add(NoisyReleaseWarning)
    assert {w.category for w in rec} - {ConvergenceWarning} == expected
    assert ([set(vars(p)) for p in parts], set(vars(fleet))) == before
    # the plan's personal flag reached the participants through their constructors
    assert (result.personal is not None) == plan.personal


def test_process_fleet_is_a_fleet(tables):
    plan = RunPlan.resolve(LearnConfig(rounds=2), Shapes.of_tables(tables))
    fleet = ProcessFleet([make_participant(plan, k, t.X) for k, t in enumerate(tables)], 2)
    try:
        assert isinstance(fleet, Fleet) and fleet.workers == 2 and fleet.secure_sum is False
    finally:
        fleet.close()


def test_network_fleet_and_guarded_participant_satisfy_the_contracts(tables):
    pytest.importorskip("grpc")
    from bnsl_cli.net.fleet import NetworkFleet
    from bnsl_cli.net.policy import SpendGuard

    fleet = NetworkFleet("127.0.0.1:0", 2, timeout=5, secure_sum=True, scale_bits=30)
    try:
        assert isinstance(fleet, Fleet) and fleet.secure_sum and fleet.scale_bits == 30 and fleet.workers == 2
    finally:
        fleet.close()
    plan = RunPlan.resolve(LearnConfig(rounds=2), Shapes.of_tables(tables))
    assert isinstance(SpendGuard(make_participant(plan, 0, tables[0].X), plan), Participant)


def test_personal_is_a_constructor_argument(tables):
    """``report_B`` comes in through the constructor (make_participant sets nothing afterwards)."""
    from bnsl_cli.federated.methods.admm.site import DenseParticipant, SparseParticipant

    X = tables[0].X
    assert SparseParticipant(0, X, 900, 0.01, 5, report_B=True).summary()["B"] is not None
    assert DenseParticipant(0, X, 900).summary()["B"] is None
