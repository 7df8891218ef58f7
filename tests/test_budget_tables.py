"""privacy-budget's tables are computed by the library (each method's its ``MethodSpec.budget_table``,
``bnsl_cli.plan.budget.budget_table`` picks one); ``bnsl privacy-budget`` only renders them."""

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bnsl_cli.cli.app import app
from bnsl_cli.errors import OptionError
from bnsl_cli.federated.methods.registry import METHODS, PRIVATE_METHODS, method_spec
from bnsl_cli.plan.budget import budget_method, budget_table
from bnsl_cli.privacy.budget import COLUMNS, BudgetQuery, BudgetTable

CLI = Path(__file__).resolve().parents[1] / "bnsl_cli" / "cli" / "privacy_budget.py"


def _cli_json(*args):
    res = CliRunner().invoke(app, ["privacy-budget", *map(str, args), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_every_private_method_declares_its_table():
    for name in METHODS:
        spec = method_spec(name)
        assert (spec.budget_table is not None) is spec.private, name


@pytest.mark.parametrize("method", PRIVATE_METHODS)
def test_the_command_prints_the_library_s_table(method):
    spec = budget_method(method, "pld")
    table = budget_table(spec, BudgetQuery(epsilon=3.0, samples=500, nodes=12))
    assert isinstance(table, BudgetTable) and table.columns == COLUMNS
    assert all(len(row) == 3 for row in table.rows)
    assert list(table.notes)[-1] == "delta" and table.notes["delta"] == "1/N**2 with N = 500 rows"
    assert _cli_json("--method", method, "--epsilon", 3, "--samples", 500, "--nodes", 12) == json.loads(
        json.dumps(table.data))


def test_a_method_s_own_table_is_called_with_the_plan_learn_would_resolve():
    seen = {}

    def own(spec, query, delta, resolve):
        seen["plan"] = resolve(rounds=1, steps=1, polish=False)
        seen["delta"] = delta
        return BudgetTable("mine", {"note": "n"}, (("q", 1.0, "h"),), {"mode": "mine"})

    spec = replace(method_spec(PRIVATE_METHODS[0]), budget_table=own)
    table = budget_table(spec, BudgetQuery(epsilon=2.0, delta=1e-6, nodes=4))
    assert table.title == "mine" and table.notes == {"note": "n", "delta": "1e-06 (given)"}
    assert seen["delta"] == 1e-6 and seen["plan"].epsilon == 2.0 and seen["plan"].delta == 1e-6
    with pytest.raises(OptionError, match="say what to compute"):
        budget_table(spec, BudgetQuery(delta=1e-6))


def test_the_command_module_only_renders():
    """≤ 300 lines, and the only fact it reads of a method is its name (no branching on a method's facts)."""
    source = CLI.read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 300
    read = {node.attr for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "spec"}
    assert read == {"name"}, read
