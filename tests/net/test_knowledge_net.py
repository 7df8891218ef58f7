"""Prior knowledge in a networked run: part of the plan the sites receive, the same graph as learn."""

import json
import warnings

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.federated.methods.registry import make_participant  # noqa: E402
from bnsl_cli.knowledge import KnowledgeSource  # noqa: E402
from bnsl_cli.learn import LearnConfig, learn  # noqa: E402
from bnsl_cli.plan.run_plan import RunPlan  # noqa: E402
from bnsl_cli.plan.shapes import Shapes  # noqa: E402
from tests._sim import simulated_tables  # noqa: E402
from tests.net.conftest import networked  # noqa: E402


def test_sites_build_their_participants_from_the_knowledge_in_the_plan():
    sim, tables = simulated_tables(6, 3, 300, 4)
    n = sim.names
    i, j = np.unravel_index(np.argmax(np.abs(sim.W)), sim.W.shape)
    src = KnowledgeSource.from_options(forbid=[f"{n[i]}->{n[j]}", f"{n[j]}->{n[i]}"])
    cfg = LearnConfig(seed=1, rounds=20, knowledge=src)
    plan = RunPlan.resolve(cfg, Shapes.of_tables(tables))
    seen = []

    def site_side(plan_here, k, X, rng):
        # what a remote site does: the plan from its JSON body, knowledge included
        received = RunPlan.from_dict(json.loads(json.dumps(plan_here.to_dict())))
        seen.append(received.knowledge.to_dict())
        return make_participant(received, k, X, rng)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, _, errors = networked(plan, tables, secure=False, part_for=site_side)
        local = learn(tables, cfg)
    assert not errors, errors
    assert len(seen) == 3
    for k in seen:
        assert k["required"] == [] and k["tiers"] == []
        assert sorted(k["forbidden"]) == sorted([[n[i], n[j]], [n[j], n[i]]])
    assert got.W[i, j] == 0 and got.W[j, i] == 0
    np.testing.assert_array_equal(got.W, local.W)
    assert got.report["knowledge"]["forbidden_count"] == 2
