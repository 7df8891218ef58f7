"""docs/architecture.md's recipe for a new method, followed by a test: a trivial method ("toy-empty":
one sum-shaped exchange of the column means, then the empty graph) declared with a site role, a
driver, a message sequence and reply rules, and registered with one registry entry. Nothing else
changes — the run pipeline, the fleet, the reply limits and a site's guard read what it declares.
"""

from __future__ import annotations

import numpy as np
import pytest

from bnsl_cli.dag import finish_graph
from bnsl_cli.errors import GuardRefusedError
from bnsl_cli.federated.messages import MessageKind, MomentRequest, ShareReply, StatsRequest
from bnsl_cli.federated.method_spec import MethodSpec, Rounds, Statistics
from bnsl_cli.federated.methods import registry
from bnsl_cli.federated.outcome import SolverFinal, SolverOutcome, SolverTiming
from bnsl_cli.federated.reply_limits import MeanShares
from bnsl_cli.federated.site_sequence import OnceBeforeRounds
from bnsl_cli.learn import learn
from bnsl_cli.net.policy import SpendGuard
from bnsl_cli.plan.options import LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import Shapes
from bnsl_cli.stats import sum_shares
from tests._sim import simulated_tables


class ToySite:
    """1. The site role: answers the request with its share of the column means, once."""

    report_B = False

    def __init__(self, pid, X, n_total):
        self.pid, self._X, self.n_total = int(pid), np.asarray(X, float), int(n_total)
        self.answered = False

    def handle(self, data: bytes):
        req = MomentRequest.decode(data)
        self.answered = True
        return ShareReply(req.round, self.pid, req.d, self._X.sum(axis=0) / self.n_total).encode()

    def summary(self) -> dict:
        return {"participant": self.pid + 1, "rows": int(self._X.shape[0]), "B": None, "compute_s": 0.0,
                "events": [], "notes": {}}


def toy_drive(spec, plan, fleet, progress=None):
    """2. The driver: one exchange, the pooled means, the empty graph (no rows, no byte counting)."""
    fleet.traffic.enter("means")
    raw = fleet.exchange(MomentRequest(1, plan.d).encode())
    mean = sum_shares(ShareReply.decode(r).values for r in raw)
    assert np.all(np.isfinite(mean))
    W = np.zeros((plan.d, plan.d))
    Wf, removed = finish_graph(W, 0.0, spec.name, plan.names, plan.knowledge)
    return SolverOutcome(W, Wf, fleet.finish(), rounds=1, converged=True, timing=SolverTiming(compute_s=0.0),
                         messages="one sum-shaped exchange of the column means", warnings=[],
                         final=SolverFinal(0.0))


#: 3. The message sequence: the request, once.
TOY_SEQUENCE = OnceBeforeRounds({MessageKind.MOMENT_REQUEST: lambda data: "toy request"})

TOY = MethodSpec(
    "toy-empty", "the empty graph after one exchange (a test of the recipe)",
    participant=lambda plan, pid, X, rng: ToySite(pid, X, plan.n_total), drive=toy_drive,
    rounds=Rounds.SOLVER, statistics=Statistics.SITE, default_lambda=0.0,
    site_sequence=lambda plan: (TOY_SEQUENCE,),
    reply_rules=lambda plan: {MessageKind.MOMENT_REQUEST: MeanShares()},
)


@pytest.fixture
def toy():
    # 4. one registry entry (the recipe adds it to the registry's list; here for the test's length)
    with registry.registered(TOY):
        yield TOY


def test_a_new_method_runs_through_the_one_pipeline(toy):
    _, tables = simulated_tables(4, 3, 200, 1)
    res = learn(tables, LearnConfig(method="toy-empty"))
    assert not np.any(res.W) and res.report["method"] == "toy-empty"
    comm = res.report["communication"]  # the fleet's meter counted its one exchange: 3 requests, 3 replies
    assert comm["exchanges"] == 1 and comm["bytes_down"] == 3 * 18 and comm["bytes_up"] == 3 * (18 + 8 * 4)


def test_a_new_methods_site_is_held_to_its_declared_sequence(toy):
    _, tables = simulated_tables(4, 3, 200, 2)
    plan = RunPlan.resolve(LearnConfig(method="toy-empty"), Shapes.of_tables(tables))
    site = ToySite(0, tables[0].X, plan.n_total)
    guard = SpendGuard(site, plan)
    assert guard.handle(MomentRequest(1, plan.d).encode()) is not None
    with pytest.raises(GuardRefusedError, match="a second toy request"):
        guard.handle(MomentRequest(1, plan.d).encode())
    guard = SpendGuard(ToySite(0, tables[0].X, plan.n_total), plan)
    with pytest.raises(GuardRefusedError, match="kind 20, which a toy-empty site does not take"):
        guard.handle(StatsRequest(0, plan.d).encode())
    assert not guard.inner.answered  # refused before the participant saw it
