"""serve --bootstrap: the replicates resampled at the sites (one session each, then the run), byte-identical
to bnsl learn --bootstrap when every site opts in with --resample-seed; the site refuses a bootstrap plan out
of order, changed, private or beyond its session cap."""

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
    # the sites draw the streams bnsl learn --seed 3 draws only because each chose --resample-seed 3 itself
    sites = [join(certs, port, p, f"site{k + 1}", "--allow-non-private", "--resample-seed", "3",
                  "--transcript", str(tmp_path / f"t{k + 1}.jsonl"))
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
    accepted = [r for r in plans if r.get("event") == "plan" and r.get("decision") == "accepted"]
    assert len(accepted) == 4
    # the transcript says which session each was, of how many, the cap and where the weights came from
    assert [(r["session"], r["sessions"], r["replicate"]) for r in accepted] == [(1, 4, 1), (2, 4, 2), (3, 4, 3), (4, 4, None)]
    assert all(r["max_sessions"] == 21 and "--resample-seed" in r["resampling"] for r in accepted)
    assert "entropy" not in json.dumps(accepted)


def _plan_dict(**changes) -> dict:
    from bnsl_cli.plan.options import LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import ParticipantShape, Shapes

    shapes = Shapes(("a", "b", "c"), (ParticipantShape("s1", 50), ParticipantShape("s2", 50)))
    plan = RunPlan.resolve(LearnConfig(bootstrap=3, seed=1), shapes)
    from dataclasses import replace

    return replace(plan, **changes).to_dict()


def _plan(**changes):

    from bnsl_cli.plan.run_plan import RunPlan

    return RunPlan.from_dict(_plan_dict(**changes))


def test_a_site_refuses_a_bootstrap_session_out_of_order_or_changed():
    from bnsl_cli.net.site_sessions import BootstrapSessions

    def admitted(*plans):
        s = BootstrapSessions(21)
        for p in plans:
            s.admit(p, 50)
        return s

    first = _plan(replicate=0, trace=False)
    s = admitted(first, _plan(replicate=1, trace=False))  # the next one: accepted
    assert s.more() and s.total == 4
    for bad, words in (
        (_plan(replicate=0), "out of the bootstrap's order"),  # a replay
        (_plan(replicate=2), "out of the bootstrap's order"),  # skipped one
        (_plan(replicate=1, lam=0.5), "changed the plan"),
        (_plan(), "out of the bootstrap's order"),  # the run itself, too early
    ):
        with pytest.raises(GuardRefusedError, match=words):
            admitted(first).admit(bad, 50)
    s = admitted(first, _plan(replicate=1), _plan(replicate=2))
    s.admit(_plan(trace=True), 50)  # the run itself: its own --trace
    assert not s.more()
    with pytest.raises(GuardRefusedError, match="after the last one"):
        s.admit(_plan(), 50)


@pytest.mark.parametrize("first, words", [
    (dict(replicate=3), "began a bootstrap with replicate 4"),  # the order attack: replicate 4 first
    (dict(), "began a bootstrap with the run itself"),
])
def test_the_first_session_must_be_replicate_1_before_the_rows_are_touched(first, words):
    from bnsl_cli.net.policy import SiteGuard, SiteLimits

    touched = []

    class Rows:
        """A site's table whose values record every read: the guard must refuse before the first."""

        names, n, d, path = ("a", "b", "c"), 50, 3, "s2"

        @property
        def X(self):
            touched.append(1)
            return np.zeros((50, 3))

    table = Rows()
    guard = SiteGuard(table, SiteLimits(allow_non_private=True), "s2")
    with pytest.raises(GuardRefusedError, match=words):
        guard.on_plan({"plan": _plan_dict(**first), "index": 1})
    assert not touched and guard.accepted is None


def test_a_plan_beyond_the_session_cap_is_refused_before_any_session():
    from bnsl_cli.net.site_sessions import BootstrapSessions, sessions_bound

    # 50 rows over 3 columns: (sessions) x 9 < 150 allows 16 sessions; the site's own cap may be lower
    assert sessions_bound(50, 3) == 16
    with pytest.raises(RefusedError, match="at most 4"):
        BootstrapSessions(4).admit(_plan(replicate=0, bootstrap=5), 50)
    with pytest.raises(RefusedError, match="outnumber its rows' unknowns"):
        BootstrapSessions(1000).admit(_plan(replicate=0, bootstrap=16), 50)
    BootstrapSessions(1000).admit(_plan(replicate=0, bootstrap=15), 50)  # 16 sessions: within both


def test_check_plan_resamples_rows_from_the_sites_stream_and_refuses_a_private_replicate():
    from bnsl_cli.confidence import resample_rows
    from bnsl_cli.io.table import Table
    from bnsl_cli.net.policy import SiteLimits, check_plan
    from bnsl_cli.net.site_sessions import BootstrapSessions, Resampling

    X = np.random.default_rng(0).normal(size=(50, 3))
    table = Table(X, ("a", "b", "c"), "s2")
    limits = SiteLimits(max_epsilon=100.0, allow_non_private=True, accept_seeded_noise=True)
    sessions = BootstrapSessions(21, Resampling.of(11))  # the site's own --resample-seed 11
    acc = check_plan({"plan": _plan_dict(replicate=0), "index": 1}, table, limits, "s2", sessions)
    assert np.array_equal(acc.X, resample_rows(X, 11, 0, 1))
    acc = check_plan({"plan": _plan_dict(replicate=1), "index": 1}, table, limits, "s2", sessions)
    assert np.array_equal(acc.X, resample_rows(X, 11, 1, 1))
    plain = check_plan({"plan": _plan_dict(bootstrap=0), "index": 1}, table, limits, "s2", BootstrapSessions(21))
    assert np.array_equal(plain.X, X)
    # a coordinator that still sends a stream of its own is refused as malformed: it cannot choose the weights
    with pytest.raises(Exception, match="malformed"):
        check_plan({"plan": {**_plan_dict(replicate=0), "resample_entropy": 11}, "index": 1}, table, limits, "s2")
    from bnsl_cli.plan.options import DPConfig, LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import ParticipantShape, Shapes
    from dataclasses import replace

    shapes = Shapes(("a", "b", "c"), (ParticipantShape("s1", 50), ParticipantShape("s2", 50)))
    private = RunPlan.resolve(LearnConfig(dp=DPConfig(epsilon=50.0), seed=1), shapes)
    body = {"plan": replace(private, replicate=0, bootstrap=2).to_dict(), "index": 1}
    with pytest.raises(RefusedError, match="private run"):
        check_plan(body, table, limits, "s2")
