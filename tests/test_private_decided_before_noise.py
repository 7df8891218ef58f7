"""Private runs decided before any noise (issue 46, items 1 and 2): whether ``learn --dp`` works or is
refused is a function of public inputs only — rows per site, columns, ε, δ, sites, noise layout — and
``privacy-budget`` answers with the same rule; once a plan is accepted the run ends with a graph (the
empty one, with a warning, when no stage rises above the noise), never exit 5 on some draws; the
default δ never triggers the weak-δ warning."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from bnsl_cli.cli.app import app
from bnsl_cli.errors import PrivacyBudgetError, PrivacyWarning
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan, check_verdict
from bnsl_cli.plan.shapes import ParticipantShape, Shapes
from bnsl_cli.privacy.defaults import WEAK_N_DELTA, default_delta

runner = CliRunner()


def _learn_verdict(rows, d, eps, noise):
    from bnsl_cli.errors import NoisyReleaseWarning

    shapes = Shapes(tuple(f"x{j}" for j in range(d)), tuple(ParticipantShape(f"s{k}", n) for k, n in enumerate(rows)))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        try:
            check_verdict(RunPlan.resolve(LearnConfig(dp=DPConfig(epsilon=eps, noise=noise)), shapes))
        except PrivacyBudgetError:
            return "refused"
    return "warns" if any(issubclass(w.category, NoisyReleaseWarning) for w in rec) else "works"


def _budget_verdict(rows, d, eps, noise):
    res = runner.invoke(app, ["privacy-budget", "--samples", ",".join(map(str, rows)), "--nodes", str(d),
                              "--epsilon", str(eps), "--json", "-q"])
    assert res.exit_code == 0, res.output
    u = json.loads(res.stdout)["utility"]
    key = "per_site" if noise == "per-site" or len(rows) == 1 else "distributed"
    return u[key]["verdict"]


GRID = [
    (rows, d, eps, noise)
    for rows in ([221, 133, 88], [500, 500], [1000, 1000, 1000, 1000, 1000], [60, 60, 60], [2000, 1500], [300, 150])
    for d in (5, 11, 30)
    for eps in (1.0, 5.0, 20.0)
    for noise in ("per-site", "auto")
    if not (len(rows) == 1 and noise == "auto")
]
QUICK = [g for k, g in enumerate(GRID) if k % 9 == 0]


def _check(grid):
    verdicts = []
    for rows, d, eps, noise in grid:
        got, want = _learn_verdict(rows, d, eps, noise), _budget_verdict(rows, d, eps, noise)
        assert got == want, (rows, d, eps, noise, got, want)
        verdicts.append(got)
    return verdicts


def test_learn_and_privacy_budget_give_the_same_verdict_quick():
    _check(QUICK)


@pytest.mark.slow  # 90 shapes
def test_learn_and_privacy_budget_give_the_same_verdict_on_the_grid():
    assert len(GRID) >= 50
    verdicts = _check(GRID)
    assert {"works", "warns", "refused"} <= set(verdicts)  # the grid crosses both boundaries


def _shards(tmp_path, rows, d=11, seed=4):
    from bnsl_cli.simulate import simulate

    sim = simulate(d, d, participants=len(rows), samples=max(rows), seed=seed)
    paths = []
    for k, (X, n) in enumerate(zip(sim.shards, rows)):
        p = tmp_path / f"site{k + 1}.csv"
        np.savetxt(p, X[:n], delimiter=",", header=",".join(sim.names), comments="", fmt="%.8g")
        paths.append(str(p))
    return paths


@pytest.mark.slow  # 20 private runs
def test_the_same_unseeded_command_gives_the_same_exit_code_every_time(tmp_path):
    # the diabetes shape of issue 46 (3 sites of 221 / 133 / 88 rows, d = 11): exit 0 or 5 by the draw before
    paths = _shards(tmp_path, [221, 133, 88])
    codes = {runner.invoke(app, ["learn", *paths, "--dp", "--epsilon", "5", "--noise", "per-site", "-q"]).exit_code
             for _ in range(10)}
    assert codes == {5}
    # a shape just inside the rule: every run ends with a graph (empty when no stage rose above the noise)
    paths = _shards(tmp_path, [400, 400, 400])
    assert _learn_verdict([400, 400, 400], 11, 5.0, "per-site") == "works"
    codes = {runner.invoke(app, ["learn", *paths, "--dp", "--epsilon", "5", "--noise", "per-site", "-q"]).exit_code
             for _ in range(10)}
    assert codes == {0}


def test_the_refusal_comes_before_any_noise_and_names_the_fix(tmp_path):
    paths = _shards(tmp_path, [221, 133, 88])
    res = runner.invoke(app, ["learn", *paths, "--dp", "--epsilon", "5", "--noise", "per-site", "-q"])
    assert res.exit_code == 5
    assert "refused before any noise was drawn" in res.stderr
    u = json.loads(runner.invoke(app, ["privacy-budget", "--samples", "221,133,88", "--nodes", "11", "--epsilon", "5",
                                       "--json", "-q"]).stdout)["utility"]["per_site"]
    assert f"ε ≥ {u['epsilon_min']:g}" in res.stderr and f"≥ {u['rows_per_site_min']} rows per site" in res.stderr


@pytest.mark.parametrize("rows", [[221, 133, 88], [50, 50], [50, 5000], [1000, 1000], [100], [317, 40, 900]])
def test_the_default_delta_never_warns(rows):
    delta = default_delta(rows)
    assert max(rows) * delta <= WEAK_N_DELTA * (1 + 1e-12)
    assert delta <= 1.0 / min(rows) ** 2
    shapes = Shapes(("a", "b", "c"), tuple(ParticipantShape(f"s{k}", n) for k, n in enumerate(rows)))
    plan = RunPlan.resolve(LearnConfig(dp=DPConfig(epsilon=50.0), method="fed-moments"), shapes)
    from bnsl_cli.report import weak_participants

    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        assert weak_participants(plan) == ([], None)


def test_a_given_weak_delta_warns_in_one_short_line():
    shapes = Shapes(("a", "b", "c"), (ParticipantShape("s0", 221), ParticipantShape("s1", 88)))
    plan = RunPlan.resolve(LearnConfig(dp=DPConfig(epsilon=50.0, delta=1e-3), method="fed-moments"), shapes)
    from bnsl_cli.report import weak_participants

    with pytest.warns(PrivacyWarning) as rec:
        weak, text = weak_participants(plan)
    assert weak == [1, 2] and len(text) < 200 and "give --delta 2e-05 or smaller" in text
    assert len(rec) == 1
