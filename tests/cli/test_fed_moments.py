"""`bnsl learn --method fed-moments`, `--standardize`, the scale warning and error, through the CLI."""

import json
import math

import numpy as np

from tests._cli import run


def _rescaled(tmp_path, shards, factors, name="scaled"):
    dst = tmp_path / name
    dst.mkdir()
    for f in sorted(shards.glob("*.csv")):
        lines = f.read_text().splitlines()
        X = np.loadtxt(f, delimiter=",", skiprows=1) * np.asarray(factors)
        rows = [",".join(repr(float(v)) for v in row) for row in X]
        (dst / f.name).write_text("\n".join([lines[0], *rows]) + "\n")
    return dst


def test_fed_moments_equals_notears_edges(tmp_path, shards):
    a = run("learn", shards, "--method", "fed-moments", "-q", "--out", tmp_path / "a", "--json")
    b = run("learn", shards, "--method", "notears", "-q", "--out", tmp_path / "b")
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    assert (tmp_path / "a" / "adjacency.csv").read_text() == (tmp_path / "b" / "adjacency.csv").read_text()
    rep = json.loads(a.stdout)
    assert rep["method"] == "fed-moments"
    d, P = 8, 4
    # two shares per participant: of the means (d values), then of the moments (d(d+1)/2)
    assert rep["communication"]["bytes_up"] == P * (2 * 18 + 8 * d + 8 * d * (d + 1) // 2)


def test_fed_moments_dp_report(shards):
    res = run("learn", shards, "--method", "fed-moments", "--dp", "--epsilon", 5, "-q", "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    pv = rep["privacy"]
    assert "moment-matrix" in pv["released_values"]
    assert math.isclose(pv["epsilon"], 5.0, rel_tol=1e-9)
    assert rep["communication"]["bytes_total"] > 0


def test_standardize_report_and_original_units(shards, tmp_path):
    res = run("learn", shards, "--standardize", "--rounds", 30, "-q", "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    std = rep["standardize"]
    assert std["applied"] and "sd_j / sd_i" in std["weights"]
    assert rep["options"]["standardize"] is True
    assert rep["communication"]["standardize"]["bytes_up"] > 0


def test_scale_warning_is_one_line_naming_the_option(tmp_path, shards):
    scaled = _rescaled(tmp_path, shards, [1, 1, 1, 1, 1, 1, 1, 0.1])  # spreads 148-fold apart
    res = run("learn", scaled, "--method", "fed-moments", "-q")
    assert res.exit_code == 0, res.output
    lines = [l for l in res.stderr.splitlines() if "--standardize" in l]
    assert len(lines) == 1 and lines[0].startswith("warning:")
    res = run("learn", scaled, "--method", "fed-moments", "-q", "--standardize")
    assert res.exit_code == 0 and "--standardize" not in res.stderr


def test_extreme_scales_exit_with_one_clear_line_or_standardize(tmp_path, shards):
    scaled = _rescaled(tmp_path, shards, 10.0 ** np.linspace(-3, 12, 8))
    out = tmp_path / "out"
    res = run("learn", scaled, "--method", "notears", "-q", "--out", out)
    assert res.exit_code == 4, res.output
    print(res.stderr)
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert "--standardize" in lines[-1] and lines[-1].startswith("error")
    assert not any("encountered" in l or "RuntimeWarning" in l or "Traceback" in l for l in lines), res.stderr
    assert not (out / "adjacency.csv").exists()
    ok = run("learn", scaled, "--method", "notears", "-q", "--standardize")
    ref = run("learn", shards, "--method", "notears", "-q", "--standardize")
    assert ok.exit_code == 0 and "overflow" not in ok.output
    edges = lambda text: sorted(tuple(l.split(",")[:2]) for l in text.splitlines()[1:])
    assert edges(ok.stdout) == edges(ref.stdout)


def test_privacy_budget_fed_moments():
    res = run("privacy-budget", "--epsilon", "3", "--delta", "1e-6", "--method", "fed-moments", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    kinds = [r["release"] for r in data["releases"]]
    assert kinds[-1] == "moment-matrix" and "covariance" not in kinds
    assert math.isclose(data["epsilon_spent"], 3.0, rel_tol=1e-9)
