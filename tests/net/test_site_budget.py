"""A site's budget across runs (issue 43, item 2): its own ledger, composed by the plan's accountant,
checked at every plan, kept across restarts; a second full-budget run is refused by default — in the
library, under ``bnsl join`` and under Flower."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bnsl_cli.errors import RefusedError
from bnsl_cli.io.table import Table
from bnsl_cli.net.policy import SiteGuard, SiteLimits, check_plan
from bnsl_cli.net.site_budget import SiteBudget
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import ParticipantShape, Shapes
from bnsl_cli.privacy.release_plan import spend_of

NAMES = ("a", "b", "c")


def _table():
    return Table(np.random.default_rng(0).normal(size=(800, 3)), NAMES, "s1")


def _plan(epsilon=5.0, **dp) -> RunPlan:
    shapes = Shapes(NAMES, (ParticipantShape("s1", 800), ParticipantShape("s2", 800)))
    return RunPlan.resolve(LearnConfig(dp=DPConfig(epsilon=epsilon, noise="per-site", **dp)), shapes)


def _body(plan):
    return {"plan": plan.to_dict(), "index": 0, "secure_sum": None}


def test_a_second_full_budget_run_is_refused_by_default_across_a_restart(tmp_path):
    limits = SiteLimits(max_epsilon=5.0)
    ledger = tmp_path / "site.budget.jsonl"
    acc = check_plan(_body(_plan()), _table(), limits, "s1", budget=SiteBudget(ledger, limits.max_total_epsilon))
    assert acc.total["runs"] == 1 and acc.total["total_epsilon"] <= 5.0 * (1 + 1e-9)
    # a new process (a restarted site): a new SiteBudget on the same file
    with pytest.raises(RefusedError, match="total spend to ε = .* more than its --max-total-epsilon 5"):
        check_plan(_body(_plan()), _table(), limits, "s1", budget=SiteBudget(ledger, limits.max_total_epsilon))
    # a smaller run does not fit either: the budget is spent
    with pytest.raises(RefusedError, match="--max-total-epsilon"):
        check_plan(_body(_plan(2.0)), _table(), limits, "s1", budget=SiteBudget(ledger, 5.0))
    assert len(ledger.read_text().splitlines()) == 1  # a refused plan is not recorded


def test_runs_compose_by_the_plans_accountant_up_to_the_total(tmp_path):
    ledger = tmp_path / "budget.jsonl"
    budget = SiteBudget(ledger, 9.0)
    limits = SiteLimits(max_epsilon=5.0, max_total_epsilon=9.0)
    plans = [_plan(5.0), _plan(5.0)]
    totals = [check_plan(_body(p), _table(), limits, "s1", budget=budget).total for p in plans]
    both = [r for p in plans for r in p.privacy.releases]
    want = spend_of(both, plans[0].privacy.delta, plans[0].privacy.conversion, plans[0].privacy.accountant)[0]
    assert totals[1]["total_epsilon"] == pytest.approx(want, rel=1e-12)
    assert 5.0 < want < 10.0  # composing privacy-loss distributions is tighter than adding the ε's
    recs = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [r["epsilon"] for r in recs] == [5.0, 5.0] and recs[1]["total_epsilon"] == pytest.approx(want)
    # a third run of ε = 5 would pass 9 (composed: about 9.5)
    with pytest.raises(RefusedError, match="--max-total-epsilon 9"):
        check_plan(_body(_plan(5.0)), _table(), limits, "s1", budget=budget)


def test_non_private_runs_are_not_recorded_and_an_unreadable_ledger_refuses(tmp_path):
    ledger = tmp_path / "budget.jsonl"
    limits = SiteLimits(max_epsilon=5.0, allow_non_private=True)
    shapes = Shapes(NAMES, (ParticipantShape("s1", 800), ParticipantShape("s2", 800)))
    plain = RunPlan.resolve(LearnConfig(), shapes)
    check_plan(_body(plain), _table(), limits, "s1", budget=SiteBudget(ledger, 5.0))
    assert not ledger.exists()
    ledger.write_text("{not json\n")
    with pytest.raises(RefusedError, match="unreadable at line 1"):
        check_plan(_body(_plan()), _table(), limits, "s1", budget=SiteBudget(ledger, 5.0))


def test_the_site_guard_records_before_the_participant_is_built(tmp_path):
    ledger = tmp_path / "budget.jsonl"
    guard = SiteGuard(_table(), SiteLimits(max_epsilon=5.0), "s1", budget=SiteBudget(ledger, 5.0))
    g = guard.on_plan(_body(_plan()))
    assert g is not None and len(ledger.read_text().splitlines()) == 1
    assert SiteLimits(max_epsilon=5.0).to_dict()["max_total_epsilon"] == 5.0  # in the HELLO


# -- bnsl join: two runs, one ledger, two processes ------------------------------------------------


@pytest.mark.slow  # two bnsl join processes
def test_join_refuses_a_second_run_over_its_total_budget(tmp_path):
    pytest.importorskip("grpc")
    from tests.net.conftest import join_against

    csv = tmp_path / "site.csv"
    X = np.random.default_rng(3).normal(size=(800, 3))
    csv.write_text("a,b,c\n" + "".join(",".join(f"{v:.6f}" for v in row) + "\n" for row in X))
    ledger = tmp_path / "site.budget.jsonl"
    outcomes = []
    for k in range(2):
        hello, raised, code, err, records = join_against(
            csv, tmp_path / f"run{k}", ["--max-epsilon", "5", "--max-delta", "1e-4", "--budget-ledger", str(ledger)],
            lambda shapes: RunPlan.resolve(LearnConfig(dp=DPConfig(epsilon=5.0), method="fed-moments"), shapes))
        assert hello["limits"]["max_total_epsilon"] == 5.0
        outcomes.append((raised, code, err, records))
    first, second = outcomes
    assert first[0] is None
    accepted = [r for r in first[3] if r.get("event") == "plan" and r.get("decision") == "accepted"]
    assert accepted and accepted[0]["runs"] == 1 and accepted[0]["total_epsilon"] <= 5.0 * (1 + 1e-9)
    assert second[0] is not None and "--max-total-epsilon 5" in str(second[0])
    assert second[1] == 5, second[2]
    assert not any(r.get("event") == "sent" and r.get("frame") == "DATA" for r in second[3])


# -- Flower: two runs against the same SuperNodes ---------------------------------------------------


def test_flower_refuses_a_second_run_over_the_nodes_total_budget(tmp_path):
    pytest.importorskip("flwr")
    from tests.flower.conftest import flower_run, node_configs
    from bnsl_cli.errors import SiteRefusedError

    rng = np.random.default_rng(4)
    csvs = []
    for k in range(3):
        p = tmp_path / f"site{k + 1}.csv"
        p.write_text("a,b,c,d\n" + "".join(",".join(f"{v:.6f}" for v in r) + "\n" for r in rng.normal(size=(500, 4))))
        csvs.append(p)
    nodes = node_configs(csvs, tmp_path, max_epsilon=5.0, max_delta=1e-4)
    opts = "--dp --epsilon 5 -m fed-moments"
    result, _, _ = flower_run(csvs, tmp_path, opts, nodes=nodes, run_id=11)
    assert not isinstance(result, Exception), result
    result, _, _ = flower_run(csvs, tmp_path / "second", opts, nodes=nodes, run_id=12)
    assert isinstance(result, SiteRefusedError) and "--max-total-epsilon 5" in str(result)
    ledger = tmp_path / "state-1" / "budget.jsonl"
    assert len(ledger.read_text().splitlines()) == 1


def test_the_refusal_the_coordinator_hears_names_no_path(tmp_path):
    from bnsl_cli.errors import public_reason

    ledger = tmp_path / "private-folder" / "site.budget.jsonl"
    limits = SiteLimits(max_epsilon=5.0)
    check_plan(_body(_plan()), _table(), limits, "s1", budget=SiteBudget(ledger, 5.0))
    with pytest.raises(RefusedError) as info:
        check_plan(_body(_plan()), _table(), limits, "s1", budget=SiteBudget(ledger, 5.0))
    assert str(ledger) in str(info.value)  # the site's own message says where its ledger is
    said = public_reason(info.value)
    assert "--max-total-epsilon 5" in said and "private-folder" not in said
