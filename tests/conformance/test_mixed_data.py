"""The conformance suite on mixed data (issue 42): fed-suffstats with categorical columns sends one more
message kind (the table request of the second phase), which its site guard, its reply rules, the
refusal of undeclared kinds and the transports are held to like every other. The suite's checks run on
its tiny tables; here they run on mixed ones (same sites, rows, seed), without ``--standardize`` (a run
with categorical columns refuses it: its score is unit-free)."""

from __future__ import annotations

import numpy as np
import pytest

from bnsl_cli.federated.messages import MessageKind
from bnsl_cli.federated.methods.registry import method_spec
from bnsl_cli.io.kinds import encode
from bnsl_cli.io.table import Table
from bnsl_cli.plan.options import LearnConfig
from bnsl_cli.simulate_mixed import simulate_mixed
from tests.conformance import check_method as cm


def _mixed_tables() -> list:
    sim = simulate_mixed(6, 6, share=0.5, levels=(2, 3), participants=cm.SITES, samples=cm.ROWS * 2, seed=cm.SEED)
    cat = list(sim.levels)
    cont = [n for n in sim.names if n not in cat]
    tables = [Table(np.column_stack([s[n] for n in cont]), tuple(cont), f"site{k}", extra={n: s[n] for n in cat})
              for k, s in enumerate(sim.shards)]
    return encode(tables, cat, order=list(sim.names))[0]


@pytest.fixture
def mixed(monkeypatch):
    tables = _mixed_tables()
    monkeypatch.setattr(cm, "tiny_tables", lambda: list(tables))
    monkeypatch.setattr(cm, "method_config", lambda spec, private, **dp: LearnConfig(
        method=spec.name, seed=cm.SEED, workers=1))
    return tables


SPEC = method_spec("fed-suffstats")


def test_the_mixed_run_sends_the_table_request(mixed):
    rec = cm.Recorder(cm.in_process_fleet(cm.method_plan(SPEC, False, mixed), mixed))
    cm.run_through(cm.method_plan(SPEC, False, mixed), rec)
    assert MessageKind.TABLE_REQUEST in rec.first_of_each_kind()


def test_site_guard(mixed):
    cm.check_site_guard(SPEC, False)


def test_reply_limits(mixed):
    outcome = cm.check_reply_limits(SPEC, False)
    assert outcome.get(MessageKind.TABLE_REQUEST) == "refused"


def test_undeclared_kinds(mixed):
    cm.check_undeclared_kinds_at_site(SPEC, False)
    cm.check_undeclared_kinds_at_coordinator(SPEC, False)


def test_transports_agree(mixed):
    transports = ("in-process", "processes") + (("grpc",) if cm.can_run_networked(SPEC) else ())
    graphs = cm.check_transports_agree(SPEC, False, transports=transports)
    assert len(graphs) >= 2
