"""``--acyclicity auto`` (the default): logdet for non-private fed-sparse, expm everywhere else
(benchmarks/RESULTS.md, "Acyclicity default"); the resolved function is in the plan and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bnsl_cli.cli.app import app
from bnsl_cli.errors import OptionError
from bnsl_cli.learn import DPConfig, LearnConfig, RunPlan, Shapes
from bnsl_cli.plan.run_plan import default_acyclicity
from bnsl_cli.plan.shapes import ParticipantShape

SHARDS = Path(__file__).resolve().parents[1] / "examples" / "tiny" / "shards"
SHAPES = Shapes(("a", "b", "c"), tuple(ParticipantShape(f"p{k}", 500) for k in range(3)))


def test_auto_is_the_default_and_resolves_per_method_and_mode():
    assert LearnConfig().acyclicity == "auto"
    assert RunPlan.resolve(LearnConfig(), SHAPES).acyclicity == "logdet"
    assert RunPlan.resolve(LearnConfig(method="fed-sparse", dp=DPConfig(epsilon=10)), SHAPES).acyclicity == "expm"
    for method in ("fed-bnsl", "fed-moments", "notears", "local-notears"):
        plan = RunPlan.resolve(LearnConfig(method=method), SHAPES)
        assert plan.acyclicity == "expm" and plan.options_dict()["acyclicity"] == "expm"
    # an explicit choice is kept as given
    assert RunPlan.resolve(LearnConfig(acyclicity="expm"), SHAPES).acyclicity == "expm"
    assert RunPlan.resolve(LearnConfig(method="fed-sparse", acyclicity="logdet", dp=DPConfig(epsilon=10)), SHAPES).acyclicity == "logdet"
    assert default_acyclicity("fed-sparse", False) == "logdet" and default_acyclicity("fed-sparse", True) == "expm"
    # the plan round-trips with the resolved value
    plan = RunPlan.resolve(LearnConfig(), SHAPES)
    assert RunPlan.from_dict(json.loads(json.dumps(plan.to_dict()))).acyclicity == "logdet"
    with pytest.raises(OptionError, match="choose auto, expm or logdet"):
        LearnConfig(acyclicity="trace").check()


@pytest.mark.parametrize(
    "extra, expected",
    [([], "logdet"), (["-m", "fed-sparse", "--dp", "--epsilon", "20", "--delta", "1e-6"], "expm"), (["--method", "fed-bnsl"], "expm"),
     (["--acyclicity", "expm"], "expm")],
)
def test_the_cli_default_never_refuses_and_reports_the_resolved_function(tmp_path, extra, expected):
    res = CliRunner().invoke(app, ["learn", str(SHARDS), "--seed", "0", "--rounds", "5", "--quiet",
                                   "--out", str(tmp_path / "o"), *extra])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["options"]["acyclicity"] == expected
