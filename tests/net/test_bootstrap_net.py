"""serve --bootstrap: the replicates resampled at the sites (one session each, then the run), byte-identical
to bnsl learn --bootstrap; the site refuses a bootstrap plan out of order, changed or private."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.net.conftest import Party, all_ok, join, serve  # noqa: E402

from bnsl_cli.errors import GuardRefusedError, RefusedError  # noqa: E402


@pytest.mark.slow  # four sessions of a networked run
def test_networked_bootstrap_is_the_same_as_learn(small_world, tmp_path):
    certs, paths = small_world
    learned, served = tmp_path / "learned", tmp_path / "served"
    learn = Party(["learn", *map(str, paths), "--seed", "3", "--bootstrap", "3", "--out", str(learned), "-q"])
    coord, port = serve(certs, served, "--seed", "3", "--bootstrap", "3")
    sites = [join(certs, port, p, f"site{k + 1}", "--allow-non-private", "--transcript", str(tmp_path / f"t{k + 1}.jsonl"))
             for k, p in enumerate(paths)]
    code, _, err = learn.done()
    assert code == 0, err
    all_ok(coord, sites)
    for name in ("adjacency.csv", "edges.csv", "strength.csv"):
        assert (served / name).read_bytes() == (learned / name).read_bytes(), name
    rep = json.loads((served / "report.json").read_text())
    assert rep["confidence"]["replicates"] == 3 and "each site resampled its own rows" in rep["confidence"]["source"]
    # each site accepted four plans: three replicates on resampled rows, then the run on its rows
    plans = [json.loads(line) for line in (tmp_path / "t2.jsonl").read_text().splitlines()]
    assert sum(1 for r in plans if r.get("event") == "plan" and r.get("decision") == "accepted") == 4


def _plan_dict(**changes) -> dict:
    from bnsl_cli.plan.options import LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import ParticipantShape, Shapes

    shapes = Shapes(("a", "b", "c"), (ParticipantShape("s1", 50), ParticipantShape("s2", 50)))
    plan = RunPlan.resolve(LearnConfig(bootstrap=3, seed=1), shapes)
    from dataclasses import replace

    return replace(plan, **changes).to_dict()


def test_a_site_refuses_a_bootstrap_session_out_of_order_or_changed():
    from bnsl_cli.cli.join import _next_session

    first = _plan_dict(replicate=0, resample_entropy=7, trace=False)
    expect = _next_session(first, 1)
    expect({"plan": _plan_dict(replicate=1, resample_entropy=7, trace=False)})  # the next one: accepted
    for bad, words in (
        (_plan_dict(replicate=0, resample_entropy=7), "out of the bootstrap's order"),  # a replay
        (_plan_dict(replicate=2, resample_entropy=7), "out of the bootstrap's order"),  # skipped one
        (_plan_dict(replicate=1, resample_entropy=8), "out of the bootstrap's order"),  # other rows' stream
        (_plan_dict(replicate=1, resample_entropy=7, lam=0.5), "changed the plan"),
        (_plan_dict(), "out of the bootstrap's order"),  # the run itself, too early
    ):
        with pytest.raises(GuardRefusedError, match=words):
            expect({"plan": bad})
    last = _next_session(first, None)
    last({"plan": _plan_dict(trace=True)})  # the run itself: its own --trace
    with pytest.raises(GuardRefusedError):
        last({"plan": _plan_dict(replicate=2, resample_entropy=7)})


def test_check_plan_resamples_rows_and_refuses_a_private_replicate():
    from bnsl_cli.confidence import resample_rows
    from bnsl_cli.io.table import Table
    from bnsl_cli.net.policy import SiteLimits, check_plan

    X = np.random.default_rng(0).normal(size=(50, 3))
    table = Table(X, ("a", "b", "c"), "s2")
    limits = SiteLimits(max_epsilon=100.0, allow_non_private=True, accept_seeded_noise=True)
    acc = check_plan({"plan": _plan_dict(replicate=2, resample_entropy=11), "index": 1}, table, limits, "s2")
    assert np.array_equal(acc.X, resample_rows(X, 11, 2, 1))
    plain = check_plan({"plan": _plan_dict(), "index": 1}, table, limits, "s2")
    assert np.array_equal(plain.X, X)
    from bnsl_cli.plan.options import DPConfig, LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import ParticipantShape, Shapes
    from dataclasses import replace

    shapes = Shapes(("a", "b", "c"), (ParticipantShape("s1", 50), ParticipantShape("s2", 50)))
    private = RunPlan.resolve(LearnConfig(dp=DPConfig(epsilon=50.0), seed=1), shapes)
    body = {"plan": replace(private, replicate=0, resample_entropy=3, bootstrap=2).to_dict(), "index": 1}
    with pytest.raises(RefusedError, match="private run"):
        check_plan(body, table, limits, "s2")
