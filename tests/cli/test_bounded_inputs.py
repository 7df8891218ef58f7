"""Bounded time and one readable line for any input (issue 43, item 6): a huge ε is refused before any
calibration (it used to hang in a one-ulp-at-a-time loop: learn, privacy-budget and a site's plan check),
a release too cheap to account is a data error, and out-of-range options are usage errors (exit 2), with
nothing left behind."""

from __future__ import annotations

import time

import numpy as np
import pytest
from typer.testing import CliRunner

from bnsl_cli.cli.app import app
from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.privacy.accountant import rho_for_epsilon
from bnsl_cli.privacy.limits import MAX_EPSILON

runner = CliRunner()
#: a relative path, as a user types it at the checkout's root (where the suite runs): examples/tiny's shards
TINY_SHARDS = "examples/tiny/shards"


def _run(*args):
    t0 = time.monotonic()
    res = runner.invoke(app, list(args))
    return res, time.monotonic() - t0


@pytest.mark.parametrize("args", [
    ["learn", TINY_SHARDS, "--dp", "--epsilon", "1e308", "-q"],
    ["privacy-budget", "--epsilon", "1e308", "--samples", "1000,1000", "--nodes", "5", "-q"],
    ["privacy-budget", "--epsilon", "2e6", "--samples", "1000", "--nodes", "5", "-q"],
])
def test_a_huge_epsilon_is_one_line_at_once(args):
    res, took = _run(*args)
    assert res.exit_code == 5, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "above the largest a private run takes" in lines[0]
    assert took < 30  # it hung before (a loop of one ulp per step from 1e308); now it is refused before calibrating


def test_the_largest_epsilon_still_calibrates_and_the_next_is_refused():
    assert rho_for_epsilon(MAX_EPSILON, 1e-5) > 0
    with pytest.raises(PrivacyBudgetError):
        rho_for_epsilon(MAX_EPSILON * 1.0001, 1e-5)


def test_a_site_refuses_a_plan_with_a_huge_epsilon_without_calibrating():
    from bnsl_cli.errors import BnslError
    from bnsl_cli.io.table import Table
    from bnsl_cli.net.policy import SiteLimits, check_plan
    from bnsl_cli.plan.options import DPConfig, LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import ParticipantShape, Shapes

    X = np.random.default_rng(0).normal(size=(400, 3))
    table = Table(X, ("a", "b", "c"), "s1")
    shapes = Shapes(("a", "b", "c"), (ParticipantShape("s1", 400), ParticipantShape("s2", 400)))
    plan = RunPlan.resolve(LearnConfig(dp=DPConfig(epsilon=5.0)), shapes)
    body = plan.to_dict()
    body["privacy"] = {**body["privacy"], "epsilon": 1e308}
    t0 = time.monotonic()
    with pytest.raises(BnslError, match="above the largest"):
        check_plan({"plan": body, "index": 0}, table, SiteLimits(max_epsilon=1e308, accept_split_noise=True), "s1")
    assert time.monotonic() - t0 < 30


def test_a_release_too_cheap_to_account_is_a_data_error(tmp_path):
    import json

    res = runner.invoke(app, ["learn", TINY_SHARDS, "--dp", "--epsilon", "5", "--seed", "1", "--out", str(tmp_path / "run"), "-q"])
    assert res.exit_code == 0, res.output
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    for r in rep["privacy"]["plan"]["releases"]:
        r["noise_multiplier"] = 1e-200
    for p in rep["privacy"]["participants"]:
        for e in p["events"]:
            e["noise_multiplier"] = 1e-200
    bad = tmp_path / "tiny-noise.json"
    bad.write_text(json.dumps(rep))
    res, _ = _run("privacy-budget", "--releases", str(bad), "-q")
    assert res.exit_code == 3, res.output
    assert "noise multiplier of at least" in res.stderr and str(bad) in res.stderr


@pytest.mark.parametrize("args, says", [
    (["privacy-budget", "--epsilon", "5", "--nodes", "0", "--samples", "100"], "--nodes must be at least 2"),
    (["join", "127.0.0.1:1", f"{TINY_SHARDS}/participant-01.csv", "--insecure", "--max-epsilon", "5", "--max-delta", "inf"],
     "--max-delta must be > 0 and < 1"),
    (["join", "127.0.0.1:1", f"{TINY_SHARDS}/participant-01.csv", "--insecure", "--max-epsilon", "5", "--timeout", "nan"],
     "--timeout must be a finite number"),
    (["serve", "-P", "2", "--insecure", "--listen", "127.0.0.1:99999"], "port from 0 to 65535"),
])
def test_out_of_range_options_are_usage_errors(args, says):
    pytest.importorskip("grpc")
    res, _ = _run(*args)
    assert res.exit_code == 2, res.output
    assert says in res.stderr


@pytest.mark.parametrize("extra, says", [
    (["--days", "1e308"], "--days must be > 0 and at most 36525"),
    (["--parties", "coordinator,site1,site1"], "must be distinct"),
    (["--parties", "coordinator,site\n1"], "not a valid party name"),
])
def test_bad_certs_options_are_usage_errors_and_leave_no_folder(tmp_path, extra, says):
    pytest.importorskip("grpc")
    out = tmp_path / "certs"
    args = ["certs", str(out), *(extra if "--parties" in extra else ["--parties", "coordinator,site1", *extra])]
    res, _ = _run(*args)
    assert res.exit_code == 2, res.output
    assert says in res.stderr
    assert not out.exists()


def test_an_error_quoting_a_huge_cell_stays_readable(tmp_path):
    csv = tmp_path / "big.csv"
    rows = "".join(f"{i},{i % 3},{(i * 7) % 5}\n" for i in range(20))
    csv.write_text("a,b,c\n1,2," + "9" * 70_000 + "\n" + rows)
    res, _ = _run("learn", str(csv), str(csv), "-q")
    assert res.exit_code == 3, res.output
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert line.startswith("error:") and str(csv) in line and len(line) <= 1300


@pytest.mark.parametrize("cell", ["2024-01-03", "03/01/2024", "3.1.2024", "12:30", "2024-01-03T12:30:00Z"])
def test_a_date_column_error_names_drop(tmp_path, cell):
    csv = tmp_path / "dates.csv"
    csv.write_text("a,b,when\n" + "".join(f"{i},{i * 2 % 7},{cell}\n" for i in range(6)))
    res, _ = _run("learn", str(csv), str(csv), "-q")
    assert res.exit_code == 3, res.output
    assert "a date or time? leave the column out with --drop when" in res.stderr


def test_a_random_id_column_is_warned_about(tmp_path):
    rng = np.random.default_rng(5)
    ids = rng.choice(10**6, size=240, replace=False)
    X = rng.normal(size=(240, 3))
    paths = []
    for k in range(2):
        p = tmp_path / f"s{k}.csv"
        rows = range(k * 120, (k + 1) * 120)
        p.write_text("patient_id,a,b,c\n" + "".join(f"{ids[i]},{X[i, 0]:.5f},{X[i, 1]:.5f},{X[i, 2]:.5f}\n" for i in rows))
        paths.append(str(p))
    res, _ = _run("learn", *paths, "-q")  # (the id's spread may then stop the run: the warning comes first)
    assert "column 'patient_id' looks like a row identifier" in res.stderr and "--index-col patient_id" in res.stderr
    # integer measurements repeat a value: no warning
    counts = rng.poisson(20, size=240)
    for k, p in enumerate(paths):
        rows = range(k * 120, (k + 1) * 120)
        open(p, "w").write("count,a,b,c\n" + "".join(f"{counts[i]},{X[i, 0]:.5f},{X[i, 1]:.5f},{X[i, 2]:.5f}\n" for i in rows))
    res, _ = _run("learn", *paths, "-q")
    assert res.exit_code == 0 and "row identifier" not in res.stderr, res.output


def test_a_bootstrap_runs_timing_covers_its_replicates(tmp_path):
    import json

    res = runner.invoke(app, ["learn", TINY_SHARDS, "--bootstrap", "4", "--workers", "1", "--seed", "1",
                              "--out", str(tmp_path / "b"), "-q"])
    assert res.exit_code == 0, res.output
    boot = json.loads((tmp_path / "b" / "report.json").read_text())["timing"]["wall_s"]
    res = runner.invoke(app, ["learn", TINY_SHARDS, "--seed", "1", "--out", str(tmp_path / "p"), "-q"])
    plain = json.loads((tmp_path / "p" / "report.json").read_text())["timing"]["wall_s"]
    assert boot > 2.5 * plain  # four replicates and the run, not the run alone
