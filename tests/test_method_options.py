"""The default method (fed-sparse; fed-suffstats under --dp) as a registry fact, resolved once, and
the per-method options table: an option a method does not take is refused, one line, exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from bnsl_cli.cli.app import app
from bnsl_cli.errors import OptionError
from bnsl_cli.federated.method_options import BUDGET_OPTIONS, LEARN_OPTIONS
from bnsl_cli.federated.methods.registry import (
    DEFAULT_METHOD,
    DP_DEFAULT_METHOD,
    METHODS,
    PRIVATE_METHODS,
    default_method,
    method_spec,
)
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import ParticipantShape, Shapes

runner = CliRunner()
SHAPES = Shapes(("a", "b", "c"), tuple(ParticipantShape(f"p{k}", 1000) for k in range(3)))

#: a valid value other than the default for every option of the learn table
NON_DEFAULT = {
    "lam": 0.02, "threshold": 0.2, "rounds": 7, "steps": 9, "rho1": 2e-3, "rho2": 2e-3, "rho1_growth": 2.0,
    "rho2_growth": 1.5, "snap": 0.01, "acyclicity": "expm", "polish": False, "standardize": True, "personal": True,
    "clip": 2.0, "selection_share": 0.4, "polish_share": 0.2, "public_means": True, "value_bound": 5.0,
    "clip_levels": "static", "noise": "per-site", "collusion_tolerance": 1,
}


# ---------------------------------------------------------------------------------------------
# the default method
# ---------------------------------------------------------------------------------------------


def test_the_defaults_are_registry_facts():
    marked = [m for m in METHODS if method_spec(m).dp_default]
    assert marked == [DP_DEFAULT_METHOD]  # exactly one entry is the --dp default
    assert method_spec(DP_DEFAULT_METHOD).private
    assert default_method(True) == DP_DEFAULT_METHOD == "fed-suffstats"
    assert default_method(False) == DEFAULT_METHOD == METHODS[0] == "fed-sparse"


def test_learn_config_resolves_the_method_once():
    plain, private = LearnConfig(), LearnConfig(dp=DPConfig(epsilon=5))
    assert plain.method is None and private.method is None
    assert RunPlan.resolve(plain, SHAPES).method == DEFAULT_METHOD
    assert RunPlan.resolve(private, SHAPES).method == DP_DEFAULT_METHOD
    assert (plain.method, private.method) == (DEFAULT_METHOD, DP_DEFAULT_METHOD)  # filled in by check()
    chosen = LearnConfig(method="fed-sparse", dp=DPConfig(epsilon=5))
    assert RunPlan.resolve(chosen, SHAPES).method == "fed-sparse"


def test_the_help_texts_name_the_registry_defaults():
    from bnsl_cli.cli.learn import METHOD_HELP

    assert f"default: {default_method(False)}; {default_method(True)} with --dp]" in METHOD_HELP
    res = runner.invoke(app, ["privacy-budget", "--help"], env={"COLUMNS": "400"})
    assert f"default: {default_method(True)}, learn --dp's" in res.output


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim")
    res = runner.invoke(app, ["simulate", "--nodes", "5", "--edges", "5", "--participants", "3", "--samples", "400",
                              "--seed", "2", "--out", str(root / "sim"), "-q"])
    assert res.exit_code == 0, res.output
    return root / "sim" / "shards"


def _learn(shards, *args, env=None):
    return runner.invoke(app, ["learn", str(shards), "--seed", "1", "-q", "--json", *map(str, args)], env=env)


def test_learn_dp_uses_the_dp_default_and_the_report_says_so(shards):
    res = _learn(shards, "--dp", "--epsilon", 5)
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["method"] == DP_DEFAULT_METHOD and rep["method_label"] == f"{DP_DEFAULT_METHOD} (dp)"
    assert rep["options"]["method"] == DP_DEFAULT_METHOD
    res = _learn(shards, "--rounds", 3)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["method"] == DEFAULT_METHOD


def test_bnsl_method_still_chooses_the_method(shards):
    res = _learn(shards, "--dp", "--epsilon", 5, "--rounds", 2, env={"BNSL_METHOD": "fed-sparse"})
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["method"] == "fed-sparse" and rep["method_label"] == "fed-sparse (dp)" and rep["options"]["rounds"] == 2


def test_an_environment_value_the_method_does_not_take_is_left_out(shards):
    # BNSL_ROUNDS set for fed-sparse runs does not stop a --dp run of the default method ...
    res = _learn(shards, "--dp", "--epsilon", 5, env={"BNSL_ROUNDS": "3", "BNSL_LAMBDA": "0.02"})
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["method_label"] == f"{DP_DEFAULT_METHOD} (dp)"
    # ... and still counts where it applies
    res = _learn(shards, "--rounds", 2, env={"BNSL_LAMBDA": "0.02"})
    assert json.loads(res.stdout)["options"]["lam"] == 0.02
    # typed on the command line it is refused
    res = _learn(shards, "--dp", "--epsilon", 5, "--rounds", 3)
    assert res.exit_code == 2


def test_privacy_budget_defaults_to_the_dp_default():
    res = runner.invoke(app, ["privacy-budget", "--epsilon", "5", "--samples", "2000", "--nodes", "10", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["method"] == DP_DEFAULT_METHOD


def test_serve_resolves_the_method_up_front():
    pytest.importorskip("grpc")
    from bnsl_cli.cli.serve import run_options

    assert run_options({"dp": True, "epsilon": 5.0}).method == DP_DEFAULT_METHOD
    assert run_options({}).method == DEFAULT_METHOD
    assert run_options({"dp": True, "epsilon": 5.0, "method": "fed-bnsl"}).method == "fed-bnsl"
    with pytest.raises(OptionError, match="--value-bound does not apply to --method fed-suffstats"):
        run_options({"dp": True, "epsilon": 5.0, "value_bound": 3.0})


# ---------------------------------------------------------------------------------------------
# the options table
# ---------------------------------------------------------------------------------------------


def test_the_table_has_no_dead_entries():
    for table, attr in ((LEARN_OPTIONS, "options"), (BUDGET_OPTIONS, "budget_options")):
        taken = set()
        for m in METHODS:
            names = getattr(method_spec(m), attr)
            assert names <= set(table), (m, names - set(table))
            taken |= names
        assert taken == set(table)  # every option is taken by some method
    assert set(NON_DEFAULT) == {o.attr for o in LEARN_OPTIONS.values()}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("flag", sorted(LEARN_OPTIONS))
def test_every_learn_option_for_every_method(method, flag):
    opt = LEARN_OPTIONS[flag]
    spec = method_spec(method)
    if opt.private and not spec.private:
        pytest.skip("--dp itself is refused for this method")
    dp = DPConfig(epsilon=5) if (opt.private or spec.private) else None
    kw = {"method": method, "dp": dp}
    if opt.private:
        setattr(dp, opt.attr, NON_DEFAULT[opt.attr])
    else:
        kw[opt.attr] = NON_DEFAULT[opt.attr]
    cfg = LearnConfig(**kw)
    if flag in spec.options:
        cfg.check()  # taken: no refusal
        return
    with pytest.raises(OptionError) as err:
        cfg.check()
    msg = str(err.value)
    takers = [m for m in METHODS if flag in method_spec(m).options and (method_spec(m).private or not opt.private)]
    shown = "--no-polish" if flag == "--polish" else flag
    assert msg.startswith(f"{shown} does not apply to --method {method}: it applies to --method {', '.join(takers)}")
    assert f"add --method {takers[0]} or drop the option" in msg
    assert "\n" not in msg
    assert ("the --dp default is" in msg) == (dp is not None and method == DP_DEFAULT_METHOD)


@pytest.mark.parametrize("method", PRIVATE_METHODS)
@pytest.mark.parametrize("flag", sorted(BUDGET_OPTIONS))
def test_every_privacy_budget_option_for_every_method(method, flag):
    value = {"--public-means": None, "--sites": "4", "--collusion-tolerance": "1", "--rounds": "20",
             "--steps": "20"}.get(flag, "0.3")
    extra = [flag] if value is None else [flag, value]
    res = runner.invoke(app, ["privacy-budget", "--method", method, "--epsilon", "5", "--samples", "2000",
                              "--nodes", "10", *extra])
    refused = f"{flag} does not apply to --method {method}"
    if flag in method_spec(method).budget_options:
        assert refused not in res.output
    else:
        assert res.exit_code == 2 and refused in res.output, res.output
        assert len(res.output.strip().splitlines()) == 1


def test_the_refusals_on_the_command_line(shards, tmp_path):
    out = tmp_path / "out"
    res = _learn(shards, "--dp", "--epsilon", 5, "--value-bound", 3, "--out", out)
    assert res.exit_code == 2
    assert res.output.strip() == (
        "error: --value-bound does not apply to --method fed-suffstats: it applies to --method fed-sparse, fed-bnsl, "
        "fed-moments (the --dp default is fed-suffstats); add --method fed-sparse or drop the option"
    )
    assert not out.exists()  # refused before anything is read or written
    # options a method takes behave as before
    res = _learn(shards, "--dp", "--epsilon", 5, "-m", "fed-sparse", "--value-bound", 3, "--rounds", 2)
    assert res.exit_code == 0, res.output


def test_personal_with_fed_suffstats_is_refused_cleanly(shards, tmp_path):
    """It crashed with an IndexError: fed-suffstats has no per-participant B_p (its sites release
    statistics, not models); bnsl refit gives each site its own weights on the learned graph."""
    for args in (["--dp", "--epsilon", 5], ["-m", "fed-suffstats"], ["-m", "fed-moments"]):
        res = _learn(shards, *args, "--personal", "--out", tmp_path / "p")
        assert res.exit_code == 2, res.output
        assert "--personal does not apply to --method" in res.output and "bnsl refit" in res.output
        assert "internal error" not in res.output and not (tmp_path / "p").exists()
    res = _learn(shards, "-m", "fed-bnsl", "--personal", "--rounds", 3, "--out", tmp_path / "fb")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "fb" / "participant-01" / "personal-adjacency.csv").exists()
