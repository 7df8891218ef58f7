"""`bnsl privacy-budget --samples n1,n2,...`: each site's rows give the sites and δ as `learn` sets them,
and for fed-suffstats what a run would make of them (the last stage's τ, n_eff, the verdict of the rule a
refused run quotes, the smallest ε that works); one number keeps its output byte for byte."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from tests._cli import run

ROWS = (221, 133, 88)
D = 10


def budget(*args):
    res = run("privacy-budget", *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def sites_arg(rows=ROWS) -> str:
    return ",".join(map(str, rows))


def _one_clean_line(res):
    assert "Traceback" not in res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr


def learn_plan(rows, d, epsilon, **dp):
    """The run plan `bnsl learn --dp` resolves for shards of ``rows`` rows and ``d`` columns."""
    from bnsl_cli.plan.options import DPConfig, LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import ParticipantShape, Shapes

    shapes = Shapes(tuple(f"x{j}" for j in range(d)),
                    tuple(ParticipantShape(f"s{k}.csv", n) for k, n in enumerate(rows)))
    return RunPlan.resolve(LearnConfig(method="fed-suffstats", dp=DPConfig(epsilon=epsilon, **dp)), shapes)


# ---------------------------------------------------------------------------------------------
# sites and delta as learn sets them
# ---------------------------------------------------------------------------------------------


def test_site_rows_give_the_sites_and_delta_learn_would_use():
    out = budget("--epsilon", 8, "--samples", sites_arg(), "--nodes", D)
    plan = learn_plan(ROWS, D, 8.0)
    assert out["sites"] == plan.P == 3 and out["site_rows"] == list(ROWS)
    # learn's default δ: min(1/n_min², 0.01/n_max), here 0.01/221 (1/88² would make 221·δ > 0.01: a weak δ)
    assert out["delta"] == plan.privacy.delta == 0.01 / 221
    # the noise of the pooled sum over the 3 sites (per-site: σ·√3)
    stage = out["calibrations"][-1]
    assert stage["per_site"]["pooled_sum_std"] == pytest.approx(stage["sigma"] * np.sqrt(3), rel=1e-12)
    # learn --dp distributes fed-suffstats' noise by default: its plan's last stage gives the τ shown
    from bnsl_cli.federated.methods.suffstats import clipped_weight_fraction
    from bnsl_cli.federated.methods.suffstats.releases import offdiagonal_noise_std, stage_releases

    last = stage_releases(plan.privacy)[-1]
    assert last.split == 3
    u = out["utility"]
    tau = offdiagonal_noise_std(last, D, 3) / (clipped_weight_fraction(D) * sum(ROWS))
    assert u["distributed"]["tau"] == pytest.approx(tau, rel=1e-9)
    assert u["learn_default"] == "distributed" and u["rows"] == list(ROWS) and u["n_total"] == sum(ROWS)
    # n_eff by the package's definition (the run's effective rows), and the noise alone worth 1/τ²
    from bnsl_cli.federated.methods.admm.on_moments import effective_rows

    for key in ("per_site", "distributed"):
        v = u[key]
        assert v["noise_rows"] == pytest.approx(1.0 / v["tau"] ** 2, rel=1e-12)
        assert v["n_eff"] == pytest.approx(effective_rows(sum(ROWS), np.full((D, D), v["tau"]), np.eye(D)), rel=1e-12)
        assert v["n_eff"] < sum(ROWS)
    assert u["per_site"]["tau"] > u["distributed"]["tau"]


def test_the_table_shows_the_new_rows_and_delta_s_source():
    res = run("privacy-budget", "--epsilon", 5, "--samples", sites_arg(), "--nodes", D)
    assert res.exit_code == 0, res.output
    for text in ("last stage tau, distributed", "n_eff, distributed", "verdict, distributed",
                 "smallest epsilon that works, distributed", "n_eff = 1/(1/n + τ²)", "1/τ²", "221 + 133 + 88 = 442 rows"):
        assert text in res.stdout, text
    assert "0.01/n_p with n_p = 221 rows, the largest of the 3 sites'" in res.stderr


def test_a_given_delta_wins_over_the_rows_default():
    out = budget("--epsilon", 5, "--samples", sites_arg(), "--nodes", D, "--delta", 1e-7)
    assert out["delta"] == 1e-7 and out["sites"] == 3


def test_other_methods_take_the_rows_delta_and_no_utility():
    out = budget("--method", "fed-sparse", "--epsilon", 5, "--samples", sites_arg(), "--nodes", D)
    assert out["delta"] == 0.01 / 221 and out["site_rows"] == list(ROWS) and "utility" not in out
    out = budget("--epsilon", 5, "--samples", sites_arg(), "--max-rho")
    assert out["delta"] == 0.01 / 221


def test_without_nodes_the_table_says_what_is_missing():
    res = run("privacy-budget", "--epsilon", 5, "--samples", sites_arg())
    assert res.exit_code == 0, res.output
    assert "give --nodes d" in res.stderr and "verdict," not in res.stdout


def test_sites_that_agree_pass_and_that_disagree_are_a_usage_error():
    assert budget("--epsilon", 5, "--samples", sites_arg(), "--sites", 3, "--nodes", D)["sites"] == 3
    res = run("privacy-budget", "--epsilon", 5, "--samples", sites_arg(), "--sites", 4, "--nodes", D)
    assert res.exit_code == 2, res.output
    _one_clean_line(res)
    assert "--sites 4" in res.stderr and "3 sites" in res.stderr


@pytest.mark.parametrize("value", ["10,,3", "0,5", "a", "5,a", "221,133,", ",5", "3,-1", "1.5"])
def test_bad_samples_are_one_line_usage_errors(value):
    res = run("privacy-budget", "--epsilon", 5, "--samples", value, "--nodes", D)
    assert res.exit_code == 2, res.output
    _one_clean_line(res)
    assert "--samples" in res.stderr


# ---------------------------------------------------------------------------------------------
# the verdict and the smallest epsilon: learn's rule
# ---------------------------------------------------------------------------------------------


def test_the_smallest_epsilon_is_where_the_verdict_turns():
    """The smallest ε is the rule's threshold: the number a refused run of learn names (usable_at on
    learn's plan), where privacy-budget's own verdict turns, and found again by bisection on ε over
    that verdict (with the zCDP accountant, whose calibration is closed-form: quick)."""
    from bnsl_cli.errors import PrivacyBudgetError

    def utility(eps, *more):
        return budget("--epsilon", eps, "--samples", sites_arg(), "--nodes", D, *more)["utility"]["distributed"]

    u = utility(1)
    exact, shown = u["epsilon_min_exact"], u["epsilon_min"]
    assert u["verdict"] == "refused"
    assert float(f"{shown:.3g}") == shown and exact <= shown < exact * 1.01  # rounded up, 3 digits
    # learn refuses the same plan before any noise, naming the same smallest ε (one rule, one number)
    from bnsl_cli.plan.run_plan import check_verdict

    with pytest.raises(PrivacyBudgetError, match=f"ε ≥ {shown:g} at these rows"):
        check_verdict(learn_plan(ROWS, D, 1.0))
    check_verdict(learn_plan(ROWS, D, shown))  # ... and accepts it at that ε
    # just below it the plan is expected weak: it runs with a warning (refused only below half the thresholds)
    assert utility(shown)["verdict"] == "works" and utility(exact * 0.999)["verdict"] == "warns"

    zcdp = ("--accountant", "zcdp")
    target = utility(1, *zcdp)["epsilon_min_exact"]
    lo, hi = target / 4.0, target * 4.0
    assert utility(lo, *zcdp)["verdict"] == "refused" and utility(hi, *zcdp)["verdict"] == "works"
    while hi / lo > 1.001:
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if utility(mid, *zcdp)["verdict"] != "works" else (lo, mid)
    assert lo <= target <= hi


def _write_shards(tmp_path, rows, d, seed=5):
    """Simulated shards with ``rows`` rows each: `bnsl simulate` writes one data set of all the rows,
    split here by row into one file per site."""
    sim = tmp_path / "sim"
    res = run("simulate", "-d", d, "-e", d, "-p", 1, "-n", sum(rows), "--seed", seed, "--out", sim, "-q")
    assert res.exit_code == 0, res.output
    header, *body = (sim / "data.csv").read_text().splitlines()
    paths, start = [], 0
    for k, n in enumerate(rows):
        path = tmp_path / f"site{k + 1}.csv"
        path.write_text("\n".join([header, *body[start:start + n]]) + "\n")
        paths.append(path)
        start += n
    return paths


def test_learn_runs_above_the_smallest_epsilon_and_names_it_when_refused(tmp_path):
    shards = _write_shards(tmp_path, ROWS, D)
    u = budget("--epsilon", 1, "--samples", sites_arg(), "--nodes", D)["utility"]["distributed"]
    eps = u["epsilon_min"]
    # at 0.9 × the smallest ε privacy-budget says the run is expected weak (it runs, warned) ...
    below = budget("--epsilon", 0.9 * eps, "--samples", sites_arg(), "--nodes", D)["utility"]["distributed"]
    assert below["verdict"] == "warns"
    # ... at 1.05 × it says works, and learn runs
    above = budget("--epsilon", 1.05 * eps, "--samples", sites_arg(), "--nodes", D)["utility"]["distributed"]
    assert above["verdict"] == "works"
    res = run("learn", *shards, "--dp", "--epsilon", 1.05 * eps, "--seed", 1, "--out", tmp_path / "ok", "-q")
    assert res.exit_code == 0, res.output
    assert "lost in their noise" not in res.output
    # far below it the run is refused, naming the same smallest ε
    res = run("learn", *shards, "--dp", "--epsilon", 0.5, "--seed", 1, "--out", tmp_path / "refused", "-q")
    assert res.exit_code == 5, res.output
    assert "lost in their noise" in res.stderr and f"ε ≥ {u['epsilon_min']:g}" in res.stderr
    assert "refused before any noise was drawn" in res.stderr


# ---------------------------------------------------------------------------------------------
# one number: today's output, byte for byte
# ---------------------------------------------------------------------------------------------

#: sha256 of stdout and stderr of these commands as the code printed them before per-site counts were
#: added (CliRunner and a real process print the same bytes). A deliberate change of these tables
#: updates them (issue 27: the scale histograms' share 0.05 → 0.10 changed the fed-suffstats table's
#: multipliers and noise, nothing else).
BEFORE = [
    (["--epsilon", "5", "--samples", "600", "--nodes", "30", "--sites", "3"],
     "5f4b87821afc054e6c928df79ae6741891a825fc0b2a060e2db191f036076f0e",
     "67a5fac14ad069d586df93233c4bc301a25702f5a67a4e3505833d7ab46a98d9"),
    (["--epsilon", "5", "--samples", "600", "--method", "fed-sparse", "--nodes", "20"],
     "92fb4d853ed75378ee3c1d61dc32361551c7b74194d870c73afb8faaf6f85d87",
     "ecb6b63a9140db13e06192f4e8e536e9d1ac5e92ae2df4b0ba4b40552c286350"),
]


@pytest.mark.parametrize("args, out_sha, err_sha", BEFORE)
def test_one_number_prints_what_it_printed_before(args, out_sha, err_sha):
    res = run("privacy-budget", *args)
    assert res.exit_code == 0, res.output
    assert hashlib.sha256(res.stdout.encode()).hexdigest() == out_sha
    assert hashlib.sha256(res.stderr.encode()).hexdigest() == err_sha


#: The same table as JSON, recorded on a CPU without AVX-512. Its floats are printed with every digit,
#: and the last digits of a calibrated multiplier follow the CPU's vector exp/log (numpy picks a
#: different kernel on AVX-512 machines: one number differed in its 16th digit there). So the keys,
#: strings, integers and nulls must match exactly and every float to 1e-9 relative: ten times the
#: tolerance at which the accountant's noise-scale search stops (SEARCH_RTOL, 1e-10), so a search
#: that stops one step apart on another CPU still matches, and a changed table does not.
BEFORE_JSON = Path(__file__).parents[1] / "data" / "privacy_budget_e5_n600_d30_s3.json"


def _same(got, want, where="$"):
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        assert got == pytest.approx(want, rel=1e-9, abs=0.0), where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), where
        for key in want:
            _same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{i}]")
    else:
        assert type(got) is type(want) and got == want, where


def test_the_json_table_prints_what_it_printed_before():
    res = run("privacy-budget", "--epsilon", "5", "--samples", "600", "--nodes", "30", "--sites", "3", "--json")
    assert res.exit_code == 0, res.output
    assert res.stderr == ""
    _same(json.loads(res.stdout), json.loads(BEFORE_JSON.read_text()))


@pytest.mark.parametrize("value, message", [
    ("0", "error: --samples must be a positive row count, got 0"),
    ("a", "error: Invalid value for '--samples': Input should be a valid integer, unable to parse string as an "
          "integer (see 'bnsl privacy-budget --help')"),
])
def test_one_number_keeps_its_errors(value, message):
    res = run("privacy-budget", "--epsilon", 5, "--samples", value)
    assert res.exit_code == 2 and res.stderr.strip() == message, res.output


def test_one_number_has_no_site_fields():
    out = budget("--epsilon", 5, "--samples", 600, "--nodes", 30, "--sites", 3)
    assert "utility" not in out and "site_rows" not in out
