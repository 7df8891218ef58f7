"""`bnsl privacy-budget` driven through the real command (CliRunner, and once as a subprocess)."""

import json
import math
import subprocess
import sys

import pytest

from bnsl_cli.privacy.accountant import epsilon_from_rho, rho_for_epsilon
from bnsl_cli.privacy.defaults import DP_ROUNDS, POLISH_SHARE, dp_steps
from tests._cli import run

#: the noise plans here are DP-Fed-Sparse-BNSL's, so ``--method fed-sparse`` where a test names no method
#: (the default, fed-suffstats, is tested in tests/test_method_options.py)
FED_SPARSE = ("--method", "fed-sparse")


def run_json(*args, env=None):
    """``privacy-budget *args --json``: it succeeds and its JSON is returned."""
    res = run("privacy-budget", *args, "--json", env=env)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


# ---------------------------------------------------------------------------------------------
# mode (a): noise plan
# ---------------------------------------------------------------------------------------------


def test_plan_json_keys_and_values():
    out = run_json(*FED_SPARSE, "--epsilon", 2, "--delta", 1e-6, "--rounds", 30, "--steps", 40)
    for key in ("epsilon", "delta", "rho", "gumbel_multiplier", "sigma_multiplier", "moment_multiplier",
                "mean_multiplier", "rho_selection_per_step", "rho_update_per_step", "rho_per_step",
                "selection_share", "moment_share", "mean_share", "polish_share", "rho_polish", "polish_multiplier",
                "rounds", "steps", "conversion", "neighbouring_relation", "events"):
        assert key in out, key
    from bnsl_cli.plan.options import DPConfig
    from bnsl_cli.plan.privacy_plan import resolve_privacy
    from bnsl_cli.privacy.releases import ReleaseKind

    # learn --dp's default split, resolved by the function learn uses
    plan = resolve_privacy("fed-sparse", DPConfig(epsilon=2.0, delta=1e-6, polish_share=POLISH_SHARE),
                           delta=1e-6, rounds=30, steps=40, polish=True)
    assert out["epsilon"] == 2.0 and out["delta"] == 1e-6
    assert out["rho"] == pytest.approx(plan.rho_target, rel=1e-12)
    assert out["gumbel_multiplier"] == pytest.approx(plan.multiplier(ReleaseKind.SELECTION), rel=1e-12)
    assert out["sigma_multiplier"] == pytest.approx(plan.multiplier(ReleaseKind.UPDATE), rel=1e-12)
    assert out["epsilon_spent"] == pytest.approx(2.0, rel=1e-9)
    assert out["rounds"] == 30 and out["steps"] == 40
    assert out["conversion"] == "tight"
    assert out["neighbouring_relation"] == "replace-one row of one participant"
    assert sum(e["rho"] for e in out["events"]) == pytest.approx(out["rho"], rel=1e-12)


@pytest.mark.parametrize("d", [5, 20, 64])
def test_nodes_set_steps_and_rounds_default(d):
    out = run_json(*FED_SPARSE, "--epsilon", 1, "--delta", 1e-8, "--nodes", d)
    assert out["steps"] == dp_steps(d) == max(20, d // 2)
    assert out["rounds"] == DP_ROUNDS == 50
    # a = 1/2: both multipliers equal sqrt(K T / (rho* - rho_M - rho_mean - rho_pol))
    expected = math.sqrt(
        50 * max(20, d // 2) / (out["rho"] - out["rho_moments"] - out["rho_means"] - out["rho_polish"])
    )
    assert out["gumbel_multiplier"] == pytest.approx(expected, rel=1e-12)
    assert out["sigma_multiplier"] == pytest.approx(expected, rel=1e-12)


def test_samples_sets_delta():
    out = run_json(*FED_SPARSE, "--epsilon", 1, "--samples", 5000, "--steps", 20)
    assert out["delta"] == pytest.approx(1 / 5000**2, rel=1e-15)


def test_public_means_and_shares():
    out = run_json(*FED_SPARSE, "--epsilon", 1, "--delta", 1e-8, "--steps", 20, "--public-means")
    assert out["mean_multiplier"] is None and out["mean_share"] == 0.0 and out["rho_means"] == 0.0
    assert "column-means" not in [e["release"] for e in out["events"]]
    out = run_json(*FED_SPARSE, "--epsilon", 1, "--delta", 1e-8, "--steps", 20, "--selection-share", 0.25)
    assert out["rho_selection_per_step"] == pytest.approx(0.25 * out["rho_per_step"], rel=1e-12)
    assert out["gumbel_multiplier"] > out["sigma_multiplier"]


def test_simple_conversion_option():
    # the conversion is the zCDP accountant's (the PLD accountant reads the ledger without one)
    tight = run_json(*FED_SPARSE, "--epsilon", 1, "--delta", 1e-8, "--steps", 20, "--accountant", "zcdp")
    simple = run_json(*FED_SPARSE, "--epsilon", 1, "--delta", 1e-8, "--steps", 20, "--conversion", "simple",
                      "--accountant", "zcdp")
    assert simple["conversion"] == "simple"
    assert simple["rho"] == pytest.approx(rho_for_epsilon(1.0, 1e-8, "simple"), rel=1e-12)
    assert simple["sigma_multiplier"] > tight["sigma_multiplier"]  # the simple conversion is looser


def test_env_var_epsilon():
    out = run_json(*FED_SPARSE, "--delta", 1e-8, "--steps", 20, env={"BNSL_EPSILON": "3"})
    assert out["epsilon"] == 3.0


# ---------------------------------------------------------------------------------------------
# mode (b) and agreement with (a)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--public-means"], ["--selection-share", "0.3"],
                                   ["--conversion", "simple"]])
@pytest.mark.parametrize("eps, delta, K, T", [(1.0, 1e-8, 50, 20), (10.0, 4e-8, 12, 200), (0.5, 1e-5, 3, 7)])
def test_plan_then_spend_gives_epsilon_back(eps, delta, K, T, extra):
    plan = run_json(*FED_SPARSE, "--epsilon", eps, "--delta", delta, "--rounds", K, "--steps", T, *extra)
    args = ["--gumbel-multiplier", repr(plan["gumbel_multiplier"]),
            "--sigma-multiplier", repr(plan["sigma_multiplier"]),
            "--moment-multiplier", repr(plan["moment_multiplier"]),
            "--rounds", K, "--steps", T, "--delta", repr(delta)]
    if plan["mean_multiplier"] is not None:
        args += ["--mean-multiplier", repr(plan["mean_multiplier"])]
    if plan["polish_multiplier"] is not None:
        args += ["--polish-multiplier", repr(plan["polish_multiplier"])]
    if "--conversion" in extra:
        args += ["--conversion", "simple"]
    spent = run_json(*FED_SPARSE, *args)
    assert spent["mode"] == "spend"
    assert spent["accountant"] == plan["accountant"] == "pld"
    # the PLD accountant's ε moves in tiny steps with the scale (its grid), so the calibration lands
    # within 1e-7 below the target rather than 1e-9 (zCDP: tests/privacy/test_release_plan.py)
    assert spent["epsilon"] <= eps and spent["epsilon"] == pytest.approx(eps, rel=1e-7)
    assert spent["rho"] == pytest.approx(plan["rho"], rel=1e-9)
    for key in ("epsilon", "delta", "rho", "gumbel_multiplier", "sigma_multiplier",
                "rho_selection_per_step", "rho_update_per_step"):
        assert key in spent


def test_spend_without_one_off_releases_counts_less():
    plan = run_json(*FED_SPARSE, "--epsilon", 1, "--delta", 1e-8, "--steps", 20)
    spent = run_json(*FED_SPARSE, "--gumbel-multiplier", repr(plan["gumbel_multiplier"]),
                     "--sigma-multiplier", repr(plan["sigma_multiplier"]), "--steps", 20, "--delta", 1e-8)
    assert spent["epsilon"] < 1.0
    assert spent["rho"] == pytest.approx(plan["rho_iterations"], rel=1e-9)


@pytest.mark.parametrize("polish", [True, False])
def test_fed_sparse_plan_matches_learn_dp(polish):
    """For the same settings, privacy-budget prints the plan learn --dp uses (with or without the polish)."""
    import warnings

    from bnsl_cli.learn import LearnConfig, learn
    from bnsl_cli.learn import DPConfig
    from tests._sim import simulated_tables

    _, tables = simulated_tables(6, 2, 1000, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = learn(tables, LearnConfig(method="fed-sparse", seed=0, rounds=3, polish=polish, dp=DPConfig(epsilon=4.0))).report
    used = rep["privacy"]["plan"]
    out = run_json(*FED_SPARSE, "--epsilon", 4, "--samples", 1000, "--rounds", 3, "--nodes", 6,
                   *(() if polish else ("--polish-share", 0)))
    for key in ("rho", "gumbel_multiplier", "sigma_multiplier", "moment_multiplier", "mean_multiplier",
                "polish_multiplier", "rho_polish", "rho_per_step"):
        assert out[key] == (None if used[key] is None else pytest.approx(used[key], rel=1e-12)), key
    assert (used["polish_multiplier"] is None) is (not polish)
    spent = run_json(*FED_SPARSE, "--gumbel-multiplier", repr(out["gumbel_multiplier"]),
                     "--sigma-multiplier", repr(out["sigma_multiplier"]),
                     "--moment-multiplier", repr(out["moment_multiplier"]),
                     "--mean-multiplier", repr(out["mean_multiplier"]),
                     *(("--polish-multiplier", repr(out["polish_multiplier"])) if polish else ()),
                     "--rounds", 3, "--nodes", 6, "--samples", 1000)
    assert spent["epsilon"] == pytest.approx(4.0, rel=1e-9)


@pytest.mark.parametrize("public", [True, False])
def test_fed_bnsl_plan_matches_learn_and_spend_agrees(public):
    """privacy-budget prints the release list learn --dp --method fed-bnsl runs with; spend mode
    with those multipliers (value ranges included, as learn makes them) gives ε back."""
    import warnings

    from bnsl_cli.learn import DPConfig, LearnConfig, learn
    from tests._sim import simulated_tables

    extra = ("--public-means",) if public else ()
    plan = run_json("--epsilon", 5, "--delta", 1e-8, "--method", "fed-bnsl", *extra)
    _, tables = simulated_tables(5, 2, 400, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = learn(tables, LearnConfig(method="fed-bnsl", seed=0, rounds=2,
                                        dp=DPConfig(epsilon=5.0, delta=1e-8, public_means=public))).report
    used = rep["privacy"]["plan"]
    assert plan["releases"] == used["releases"]
    releases = [e["release"] for e in plan["releases"]]
    assert ("column-means" in releases) is (not public)
    assert "second-moments" in releases and "value-range (centred)" in releases
    # every noise actually used in the run is the plan's multiplier of that release
    mult = {e["release"]: e["noise_multiplier"] for e in plan["releases"]}
    for part in rep["privacy"]["participants"]:
        for ev in part["events"]:
            assert ev["noise_multiplier"] == pytest.approx(mult[ev["release"]], rel=1e-12)
    args = ["--sigma-multiplier", repr(plan["sigma_multiplier"]), "--moment-multiplier", repr(plan["moment_multiplier"])]
    if not public:
        args += ["--mean-multiplier", repr(plan["mean_multiplier"])]
    spent = run_json(*args, "--delta", 1e-8, "--method", "fed-bnsl")
    assert spent["epsilon"] == pytest.approx(5.0, rel=1e-9)
    assert spent["releases"] == plan["releases"]


def test_spend_mode_counts_the_value_range_releases():
    """Issue 12.5: spend mode counted only the one-off releases themselves, not the value-range
    histograms before them, and reported less than a run spends."""
    plan = run_json(*FED_SPARSE, "--epsilon", 5, "--delta", 1e-8, "--rounds", 10, "--steps", 20)
    args = ["--gumbel-multiplier", repr(plan["gumbel_multiplier"]), "--sigma-multiplier", repr(plan["sigma_multiplier"]),
            "--moment-multiplier", repr(plan["moment_multiplier"]), "--mean-multiplier", repr(plan["mean_multiplier"]),
            "--polish-multiplier", repr(plan["polish_multiplier"]), "--rounds", 10, "--steps", 20, "--delta", 1e-8]
    spent = run_json(*FED_SPARSE, *args)
    assert spent["epsilon"] == pytest.approx(5.0, rel=1e-9)
    kinds = [e["release"] for e in spent["releases"]]
    assert "value-range (raw)" in kinds and "value-range (centred)" in kinds
    bounded = run_json(*FED_SPARSE, *args, "--value-bound", 3)  # a public bound: no range releases
    assert bounded["epsilon"] < 5.0
    assert "value-range (raw)" not in [e["release"] for e in bounded["releases"]]


def test_json_table_and_learn_print_the_same_multipliers():
    """Issue 12.4: --json, the table and learn's report show one set of numbers."""
    out = run_json(*FED_SPARSE, "--epsilon", 4, "--samples", 1000, "--rounds", 3, "--nodes", 6)
    res = run("privacy-budget", *FED_SPARSE, "--epsilon", 4, "--samples", 1000, "--rounds", 3, "--nodes", 6)
    for e in out["releases"]:
        assert f"{e['noise_multiplier']:.6g}" in res.stdout, e
    assert out["moment_multiplier"] == pytest.approx(1.0 / math.sqrt(2 * 0.5 * 0.05 * out["rho"]), rel=1e-12)


# ---------------------------------------------------------------------------------------------
# mode (c) and --max-rho
# ---------------------------------------------------------------------------------------------


def test_rho_to_epsilon():
    out = run_json(*FED_SPARSE, "--rho", 0.1, "--delta", 1e-5)
    assert set(("epsilon", "delta", "rho")) <= set(out)
    assert out["epsilon"] == pytest.approx(1.914239, abs=1e-5)
    assert out["epsilon_simple"] == pytest.approx(0.1 + 2 * math.sqrt(0.1 * math.log(1e5)), rel=1e-12)


@pytest.mark.parametrize("extra", [["--max-rho"], [], ["--max-rho", "--steps", "20"]])
def test_max_rho(extra):
    out = run_json(*FED_SPARSE, "--epsilon", 1, "--delta", 1e-5, *extra)
    assert out["mode"] == "max-rho"
    assert out["rho"] == pytest.approx(rho_for_epsilon(1.0, 1e-5), rel=1e-12)
    assert epsilon_from_rho(out["rho"], 1e-5) == pytest.approx(1.0, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# human output
# ---------------------------------------------------------------------------------------------


def test_human_table_goes_to_stdout_and_the_assumptions_to_stderr():
    """Issue 21.6: the result table is the result (stdout, as evaluate's); the assumptions are context
    (stderr; -q leaves them out). In a pipe the table keeps its natural width: no line ends in spaces."""
    res = run("privacy-budget", *FED_SPARSE, "--epsilon", 1, "--delta", 1e-8, "--rounds", 50, "--steps", 20)
    assert res.exit_code == 0, res.output
    for text in ("replace-one row of one participant", "Canonne", "rounds K", "steps T"):
        assert text in res.stderr and text not in res.stdout, text
    for text in ("selection", "Gumbel multiplier", "sigma multiplier", "278.38", "rho polish"):
        assert text in res.stdout, text
    lines = res.stdout.splitlines()
    assert lines and all(ln == ln.rstrip() for ln in lines)
    assert max(map(len, lines)) < 134
    quiet = run("privacy-budget", *FED_SPARSE, "--epsilon", 1, "--delta", 1e-8, "--rounds", 50, "--steps", 20, "-q")
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == res.stdout


def test_human_spend_and_convert_tables():
    res = run("privacy-budget", *FED_SPARSE, "--rho", 0.1, "--delta", 1e-5)
    assert res.exit_code == 0 and "1.91424" in res.stdout
    res = run("privacy-budget", *FED_SPARSE, "--gumbel-multiplier", 50, "--sigma-multiplier", 50, "--steps", 20,
              "--delta", 1e-5)
    assert res.exit_code == 0
    assert "none counted" in res.stdout + res.stderr  # says that the one-off releases were not included


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------


def _one_clean_line(res):
    assert "Traceback" not in res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr


@pytest.mark.parametrize(
    "args, match",
    [
        (["--epsilon", "0", "--delta", "1e-5", "--steps", "20"], "epsilon"),
        (["--epsilon", "-1", "--delta", "1e-5", "--steps", "20"], "epsilon"),
        (["--epsilon", "1", "--delta", "0", "--steps", "20"], "delta"),
        (["--epsilon", "1", "--delta", "1.5", "--steps", "20"], "delta"),
        (["--epsilon", "1", "--delta", "-0.1", "--max-rho"], "delta"),
        (["--rho", "0.1", "--delta", "1"], "delta"),
        (["--epsilon", "1", "--delta", "1e-5", "--steps", "20", "--moment-share", "0.6", "--mean-share",
          "0.5"], "whole budget"),
        (["--epsilon", "1", "--delta", "1e-5", "--steps", "20", "--moment-share", "1.0",
          "--public-means"], "share"),
        (["--epsilon", "1", "--delta", "1e-5", "--steps", "20", "--selection-share", "1"], "selection-share"),
        (["--gumbel-multiplier", "0", "--sigma-multiplier", "3", "--steps", "5", "--delta", "1e-5"],
         "multiplier"),
    ],
)
def test_budget_problems_exit_5(args, match):
    res = run("privacy-budget", *FED_SPARSE, *args)
    assert res.exit_code == 5, res.output
    _one_clean_line(res)
    assert match in res.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--epsilon", "1", "--rounds", "50", "--steps", "20"],
        ["--epsilon", "1", "--max-rho"],
        ["--rho", "0.5"],
        ["--gumbel-multiplier", "10", "--sigma-multiplier", "10", "--steps", "20"],
    ],
)
def test_missing_delta_is_a_usage_error(args):
    res = run("privacy-budget", *FED_SPARSE, *args)
    assert res.exit_code == 2, res.output
    _one_clean_line(res)
    for text in ("delta", "1/n_p", "--delta", "--samples"):
        assert text in res.stderr


@pytest.mark.parametrize(
    "args",
    [
        [],  # nothing to compute
        ["--delta", "1e-5", "--rounds", "10"],  # no epsilon
        ["--epsilon", "1", "--delta", "1e-5", "--rounds", "10"],  # no steps / nodes
        ["--epsilon", "1", "--delta", "1e-5", "--samples", "100", "--steps", "3"],  # both delta sources
        ["--gumbel-multiplier", "10", "--delta", "1e-5", "--steps", "3"],  # sigma missing
        ["--rho", "0.1", "--delta", "1e-5", "--max-rho"],
        ["--epsilon", "1", "--delta", "1e-5", "--steps", "0"],  # as in learn: --steps must be >= 1
    ],
)
def test_other_usage_errors_exit_2(args):
    res = run("privacy-budget", *FED_SPARSE, *args)
    assert res.exit_code == 2, res.output
    _one_clean_line(res)


# ---------------------------------------------------------------------------------------------
# the real process
# ---------------------------------------------------------------------------------------------


def test_subprocess_json_on_stdout_nothing_on_stderr():
    proc = subprocess.run(
        [sys.executable, "-m", "bnsl_cli", "privacy-budget", "--method", "fed-sparse", "--epsilon", "1", "--delta", "1e-8",
         "--nodes", "20", "--json"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    out = json.loads(proc.stdout)
    assert out["epsilon"] == 1.0 and out["steps"] == 20 and out["rounds"] == 50


def test_command_module_imports_no_numerics():
    """`bnsl --help` stays fast: the command module imports the privacy library lazily."""
    code = ("import sys, bnsl_cli.cli.privacy_budget; "
            "bad = [m for m in ('numpy', 'scipy', 'bnsl_cli.privacy.release_plan', 'bnsl_cli.plan') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_spend_of_a_runs_release_list(tmp_path):
    """Issue 12.5: spend mode takes the same release list as learn — straight from its report."""
    import warnings

    from bnsl_cli.learn import DPConfig, LearnConfig, learn
    from tests._sim import simulated_tables

    _, tables = simulated_tables(5, 2, 1000, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = learn(tables, LearnConfig(method="fed-sparse", seed=0, rounds=3, dp=DPConfig(epsilon=3.0))).report
    path = tmp_path / "report.json"
    path.write_text(json.dumps(rep, default=str))
    out = run_json(*FED_SPARSE, "--releases", path)
    assert out["epsilon"] == pytest.approx(3.0, rel=1e-9) and out["delta"] == rep["privacy"]["delta"]
    assert out["releases"] == rep["privacy"]["plan"]["releases"]
    assert run_json(*FED_SPARSE, "--releases", path, "--delta", 1e-3)["epsilon"] < 3.0  # a larger δ, a smaller ε
    plan = tmp_path / "plan.json"
    plan.write_text(run("privacy-budget", *FED_SPARSE, "--epsilon", 2, "--delta", 1e-7, "--steps", 20, "--json").stdout)
    assert run_json(*FED_SPARSE, "--releases", plan)["epsilon"] == pytest.approx(2.0, rel=1e-9)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    res = run("privacy-budget", *FED_SPARSE, "--releases", bad)
    assert res.exit_code == 3 and "no release list" in res.stderr
    assert run("privacy-budget", *FED_SPARSE, "--releases", path, "--epsilon", 1).exit_code == 2


def test_spend_of_a_split_noise_release_list_says_what_it_rests_on(tmp_path):
    """A release list with split noise (serve --split-noise) costs what the unsplit list costs, and
    the table and the JSON events say that the cost rests on the secure sum and on no collusion."""
    from bnsl_cli.privacy.ledger import SPLIT_ASSUMPTION

    plain = tmp_path / "plan.json"
    plain.write_text(run("privacy-budget", "--method", "fed-moments", "--epsilon", 2, "--delta", 1e-7, "--json").stdout)
    doc = json.loads(plain.read_text())
    kinds = [r["release"] for r in doc["releases"]]
    assert "moment-matrix" in kinds
    for r in doc["releases"]:
        if r["release"] == "moment-matrix":
            r["split"] = 3
    split = tmp_path / "split.json"
    split.write_text(json.dumps(doc))
    a, b = run_json(*FED_SPARSE, "--releases", plain), run_json(*FED_SPARSE, "--releases", split)
    assert b["epsilon"] == pytest.approx(a["epsilon"], rel=1e-12)
    marked = [e for e in b["events"] if e.get("split")]
    assert marked and all(e["split"] == 3 and e["assumption"] == SPLIT_ASSUMPTION for e in marked)
    assert not any(e.get("split") for e in a["events"])
    res = run("privacy-budget", *FED_SPARSE, "--releases", split)
    assert res.exit_code == 0
    text = " ".join((res.stdout + res.stderr).split())
    assert "noise split over 3 sites" in text and "no other site colludes" in text
    other = run("privacy-budget", *FED_SPARSE, "--releases", plain)
    assert "noise split" not in " ".join((other.stdout + other.stderr).split())
    # -q: the result only (issue 21.6: --releases … -q printed the assumptions)
    quiet = run("privacy-budget", *FED_SPARSE, "--releases", split, "-q")
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == res.stdout



@pytest.mark.parametrize("method, what", [("notears", "has no private variant"), ("fed-nope", "is not a method")])
def test_method_without_a_private_variant_is_a_one_line_usage_error(method, what):
    """--method is checked against the registry: only methods with a private variant, named on error."""
    from bnsl_cli.federated.methods.registry import PRIVATE_METHODS

    res = run("privacy-budget", "--method", method, "--epsilon", 1, "--samples", 100)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and what in lines[0], res.stderr
    assert all(name in lines[0] for name in PRIVATE_METHODS)
    assert res.stdout == ""


# ---------------------------------------------------------------------------------------------
# every private method: the plan learn --dp resolves (no data needed: the plan reads shapes only)
# ---------------------------------------------------------------------------------------------


def _learn_plan(method, rows, d, sites=1, **dp):
    from bnsl_cli.plan.options import DPConfig, LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import ParticipantShape, Shapes

    shapes = Shapes(tuple(f"x{j}" for j in range(d)), tuple(ParticipantShape(f"p{i}", rows) for i in range(sites)))
    return RunPlan.resolve(LearnConfig(method=method, dp=DPConfig(**dp)), shapes)


@pytest.mark.parametrize("extra", [(), ("--public-means",), ("--value-bound", 3.0), ("--accountant", "zcdp")])
def test_every_private_method_plans_what_learn_plans(extra):
    """For every method it offers, privacy-budget prints the privacy plan learn --dp resolves for the
    same options and data shape: the same release list and every summary field."""
    from bnsl_cli.federated.methods.registry import PRIVATE_METHODS

    options = dict(zip(extra[::2], extra[1::2])) if len(extra) > 1 else {}
    dp = {"epsilon": 3.0, "public_means": "--public-means" in extra,
          "value_bound": options.get("--value-bound"), "accountant": options.get("--accountant", "pld")}
    from bnsl_cli.federated.method_options import BUDGET_OPTIONS
    from bnsl_cli.federated.methods.registry import method_spec

    for method in PRIVATE_METHODS:
        if any(f in BUDGET_OPTIONS and f not in method_spec(method).budget_options for f in extra):
            # an option of another method's releases is refused, as learn --dp refuses it
            res = run("privacy-budget", "--method", method, "--epsilon", 3, "--samples", 3000, "--nodes", 12, *extra)
            assert res.exit_code == 2 and f"does not apply to --method {method}" in res.stderr, res.output
            continue
        # 3,000 rows: enough for every method at ε = 3 (learn refuses a fed-suffstats plan at 500 before any noise)
        out = run_json("--method", method, "--epsilon", 3, "--samples", 3000, "--nodes", 12, *extra)
        summary = _learn_plan(method, 3000, 12, **dp).privacy.summary()
        assert out["releases"] == summary["releases"], method
        for key, value in summary.items():
            assert out[key] == value, (method, key)


def test_fed_suffstats_distributed_calibration_is_learns_split():
    """--sites P --collusion-tolerance T: each site's share is σ/√(split) with the split learn
    --noise distributed plans for P sites tolerating T colluders."""
    from bnsl_cli.federated.methods.registry import PRIVATE_METHODS, method_spec
    from bnsl_cli.privacy.split_noise import distribute_noise

    (method,) = [m for m in PRIVATE_METHODS if method_spec(m).distributed_noise]
    out = run_json("--method", method, "--epsilon", 3, "--samples", 500, "--nodes", 12, "--sites", 8,
                   "--collusion-tolerance", 3)
    plan = _learn_plan(method, 500, 12, sites=8, epsilon=3.0, noise="distributed", collusion_tolerance=3)
    assert [r.split for r in plan.privacy.releases] == [5] * len(out["calibrations"])
    unsplit = distribute_noise(plan.privacy, method, True, 8, "per-site").releases
    assert [r.multiplier for r in unsplit] == [c["noise_multiplier"] for c in out["calibrations"]]
    for c, r in zip(out["calibrations"], plan.privacy.releases):
        assert c["distributed"]["each_site_std"] == pytest.approx(c["sigma"] / math.sqrt(r.split), rel=1e-15)
        assert c["per_site"]["pooled_sum_std"] == pytest.approx(c["sigma"] * math.sqrt(8), rel=1e-15)


def test_spend_mode_by_multipliers_refuses_a_method_without_such_releases():
    """fed-suffstats makes no coordinate selections or updates: spend mode by multipliers is a usage
    error naming --releases, not a DP-PGCD table under its name."""
    from bnsl_cli.federated.methods.registry import PRIVATE_METHODS, method_spec

    for method in PRIVATE_METHODS:
        if method_spec(method).distributed_noise:
            res = run("privacy-budget", "--method", method, "--gumbel-multiplier", 3, "--sigma-multiplier", 2,
                      "--steps", 20, "--delta", 1e-6)
            assert res.exit_code == 2 and "--releases" in res.stderr and res.stdout == "", res.output


@pytest.mark.parametrize("bound", [(), ("--value-bound", 3)])
def test_spend_mode_rebuilds_the_calibrated_release_list(bound):
    """Fed the multipliers of a calibrated plan, spend mode makes the same release list (kinds,
    mechanisms, counts and order; the value-range multipliers derived from the releases' own), for
    DP-PGCD and the one-matrix methods."""
    from bnsl_cli.federated.methods.registry import PRIVATE_METHODS, method_spec

    for method in PRIVATE_METHODS:
        spec = method_spec(method)
        if spec.distributed_noise:
            continue
        kt = ["--rounds", 6, "--steps", 9] if "--rounds" in spec.budget_options else []  # DP-PGCD's K × T
        plan = run_json("--method", method, "--epsilon", 2, "--delta", 1e-7, *kt, *bound)
        args = ["--method", method, "--sigma-multiplier", repr(plan["sigma_multiplier"]),
                "--moment-multiplier", repr(plan["moment_multiplier"]), "--mean-multiplier", repr(plan["mean_multiplier"]),
                *kt, "--delta", 1e-7, *bound]
        if not spec.one_matrix:
            args += ["--gumbel-multiplier", repr(plan["gumbel_multiplier"]),
                     "--polish-multiplier", repr(plan["polish_multiplier"])]
        spent = run_json(*args)
        shape = [(r["release"], r["mechanism"], r["count"]) for r in plan["releases"]]
        assert [(r["release"], r["mechanism"], r["count"]) for r in spent["releases"]] == shape, method
        for mine, planned in zip(spent["releases"], plan["releases"]):
            assert mine["noise_multiplier"] == pytest.approx(planned["noise_multiplier"], rel=1e-12), (method, mine["release"])
        assert spent["epsilon"] == pytest.approx(2.0, rel=1e-7)
