"""The one coordinator session (bnsl_cli.net.session): what the coordinator's log says the sites accepted,
and its progress lines."""

from __future__ import annotations

from bnsl_cli.net.session import ExchangeProgress, plan_summary
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import ParticipantShape, Shapes

SHAPES = Shapes(tuple("abcdef"), (ParticipantShape("s1", 2000), ParticipantShape("s2", 2000)))


def test_the_log_names_what_the_plan_runs():
    assert plan_summary(RunPlan.resolve(LearnConfig(method="fed-sparse", rounds=30), SHAPES)) == "fed-sparse, at most 30 rounds"
    # a 4-stage private plan is not "at most 80 rounds"
    private = RunPlan.resolve(LearnConfig(dp=DPConfig(epsilon=5.0)), SHAPES)
    assert plan_summary(private) == "fed-suffstats, 4 stages"
    assert "rounds" not in plan_summary(RunPlan.resolve(LearnConfig(method="fed-moments"), SHAPES))


def test_progress_lines_say_the_exchange_and_its_time():
    lines = []
    p = ExchangeProgress(lines.append, every=10)
    for r in range(1, 25):
        p({"round": r, "h": 0.0, "edges": r})
    assert [ln.split(":")[0] for ln in lines] == ["exchange 1", "exchange 10", "exchange 20"]
    assert lines[0].endswith(" s, 1 edges")
