"""Seeded end-to-end runs: a broken solver fails these bounds."""

import warnings

import numpy as np
import pytest

from bnsl_cli.errors import ConvergenceWarning, ReproducibleNoiseWarning
from bnsl_cli.io.table import Table
from bnsl_cli.learn import LearnConfig, learn
from bnsl_cli.metrics import structure_metrics
from tests._sim import simulated_tables


def _tables(d=10, P=4, n=2000, seed=3):
    return simulated_tables(d, P, n, seed)


@pytest.fixture(scope="module")
def data():
    return _tables()


@pytest.mark.parametrize(
    "method, max_shd",
    [("fed-sparse", 2), ("fed-bnsl", 3), ("notears", 1)],
)
def test_methods_recover_a_small_graph(data, method, max_shd):
    sim, tables = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = learn(tables, LearnConfig(method=method))
    m = structure_metrics(res.W, sim.W)
    assert m["shd"] <= max_shd, m
    assert m["tpr"] >= 0.8
    assert m["is_dag"]
    rep = res.report
    for key in ("method", "rounds", "communication", "timing", "graph", "history"):
        assert key in rep
    assert rep["timing"]["wall_s"] > 0


def test_fed_sparse_sends_far_less_than_fed_bnsl(data):
    _, tables = data
    sparse = learn(tables, LearnConfig(method="fed-sparse")).report["communication"]
    dense = learn(tables, LearnConfig(method="fed-bnsl")).report["communication"]
    assert sparse["bytes_total"] == sparse["bytes_up"] + sparse["bytes_down"]
    assert sparse["bytes_up"] < dense["bytes_up"] / 3
    per_round = sum(r["bytes_up"] for r in sparse["per_round"])
    assert per_round + sparse["standardize"]["bytes_up"] == sparse["bytes_up"]  # + the pre-round column statistics


def test_snap_keeps_small_consensus_entries_out_of_every_broadcast(data, monkeypatch):
    """With snap s, no broadcast W has a non-zero entry below s; without it, some do."""
    from bnsl_cli.federated.methods.admm.coordinator import Coordinator
    from bnsl_cli.federated.messages import ConsensusBroadcast, SupportState

    _, tables = data
    sent = []
    original = Coordinator.broadcast

    def spy(self, stop=False):
        msg = original(self, stop)
        sent.append(msg)
        return msg

    monkeypatch.setattr(Coordinator, "broadcast", spy)
    small = {}
    for snap in (0.0, 0.05):
        sent.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            learn(tables, LearnConfig(method="fed-sparse", snap=snap, rounds=40))
        state, count = SupportState(), 0
        for msg in sent:
            W = ConsensusBroadcast.decode(msg, state).W
            count += int(np.count_nonzero((W != 0) & (np.abs(W) < 0.05)))
        small[snap] = count
    assert small[0.05] == 0
    assert small[0.0] > 0  # the check above can fail: without snapping, small entries are broadcast


def test_uplink_carries_at_most_t_entries_per_round(data):
    _, tables = data
    steps = 5
    with pytest.warns(ConvergenceWarning, match="did not converge in 10 rounds"):  # 10 rounds on purpose
        rep = learn(tables, LearnConfig(method="fed-sparse", steps=steps, rounds=10)).report
    P = len(tables)
    rounds = [row for row in rep["communication"]["per_round"] if isinstance(row["round"], int)]
    assert len(rounds) == rep["rounds"]
    for row in rounds:
        # header 18 + objective 9 + 12 bytes per changed entry
        assert row["bytes_up"] <= P * (18 + 9 + 12 * steps)


def test_local_notears_gives_one_graph_per_participant(data):
    sim, tables = data
    res = learn(tables[:2], LearnConfig(method="local-notears"))
    assert len(res.local) == 2
    for W in res.local:
        assert structure_metrics(W, sim.W)["shd"] <= 4


def test_non_convergence_warns_with_the_option_to_change(data):
    _, tables = data
    with pytest.warns(Warning, match="--rounds"):
        learn(tables, LearnConfig(method="fed-sparse", rounds=3))


def test_personal_matrices_and_same_seed_same_result(data):
    _, tables = data
    with pytest.warns(ConvergenceWarning, match="did not converge in 20 rounds"):  # short on purpose
        a = learn(tables, LearnConfig(personal=True, rounds=20))
        b = learn(tables, LearnConfig(personal=True, rounds=20))
    assert len(a.personal) == len(tables)
    assert np.array_equal(a.W_raw, b.W_raw)


@pytest.mark.parametrize("method", ["fed-sparse", "notears"])
def test_permuting_columns_permutes_the_graph(data, method):
    sim, tables = data
    perm = np.random.default_rng(0).permutation(len(sim.names))
    names = tuple(sim.names[k] for k in perm)
    shuffled = [Table(t.X[:, perm], names, t.path) for t in tables]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = learn(tables, LearnConfig(method=method))
        b = learn(shuffled, LearnConfig(method=method))
    assert np.array_equal(a.W[np.ix_(perm, perm)] != 0, b.W != 0)
    np.testing.assert_allclose(a.W[np.ix_(perm, perm)], b.W, atol=2e-2)  # solver tolerance


@pytest.mark.parametrize("method", ["notears", "local-notears"])
def test_dp_with_a_method_that_cannot_honour_it_raises_in_the_library(method):
    """Issue 12.1: the library's learn() ran exact NOTEARS and labelled it "(dp)"."""
    from bnsl_cli.errors import BnslError
    from bnsl_cli.learn import DPConfig

    _, tables = simulated_tables(4, 2, 200, seed=0)
    with pytest.raises(BnslError, match="--dp"):
        learn(tables, LearnConfig(method=method, dp=DPConfig(epsilon=1.0)))


def test_failed_solver_results_become_report_warnings(monkeypatch):
    """Issue 12.6: L-BFGS-B results were never checked."""
    import scipy.optimize

    from bnsl_cli.errors import ConvergenceWarning

    real = scipy.optimize.minimize

    def failing(*args, **kwargs):
        res = real(*args, **kwargs)
        res.success, res.status, res.message = False, 2, "ABNORMAL (simulated)"
        return res

    # NOTEARS imports scipy.optimize where it runs and calls scipy.optimize.minimize through the module
    monkeypatch.setattr(scipy.optimize, "minimize", failing)
    _, tables = simulated_tables(4, 2, 300, seed=0)
    with pytest.warns(ConvergenceWarning, match="L-BFGS-B"):
        rep = learn(tables, LearnConfig(method="notears")).report
    assert rep["solver_issues"] and rep["solver_issues"][0]["message"] == "ABNORMAL (simulated)"
    assert any("L-BFGS-B" in w for w in rep["warnings"])


def test_coordinator_solver_issues_and_unconverged_dp_runs_warn(monkeypatch):
    from bnsl_cli.errors import ConvergenceWarning
    from bnsl_cli.federated.methods.admm.coordinator import Coordinator
    from bnsl_cli.learn import DPConfig

    real_step = Coordinator.step

    def step(self):
        info = real_step(self)
        self.solver_issues = getattr(self, "solver_issues", []) + [{"round": info["round"], "message": "simulated"}]
        return info

    monkeypatch.setattr(Coordinator, "step", step)
    _, tables = simulated_tables(4, 2, 300, seed=0)
    with pytest.warns(ReproducibleNoiseWarning), pytest.warns(ConvergenceWarning) as rec:
        rep = learn(tables, LearnConfig(method="fed-sparse", rounds=2, seed=1, dp=DPConfig(epsilon=5.0))).report
    texts = [str(w.message) for w in rec]
    # the unconverged private run, with advice that fits a fixed budget (not "raise --rounds")
    assert any("did not converge in 2 rounds" in t and "--epsilon" in t for t in texts)
    assert any("W-step" in t and "simulated" in t for t in texts)
    assert len(rep["solver_issues"]) == 2 and any("W-step" in w for w in rep["warnings"])


def test_report_names_each_participants_file_and_its_sha256_when_known():
    from types import SimpleNamespace

    _, tables = simulated_tables(4, 2, 200, seed=0)
    hashed = [SimpleNamespace(X=t.X, names=t.names, path=f"site{k}.csv", n=t.n, sha256=f"{k:064x}")
              for k, t in enumerate(tables)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = learn(hashed, LearnConfig(rounds=2)).report
    parts = rep["data"]["participants"]
    assert [p["participant"] for p in parts] == [1, 2]
    assert [p["file"] for p in parts] == ["site0.csv", "site1.csv"]
    assert parts[1]["sha256"] == f"{1:064x}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = learn(tables, LearnConfig(rounds=2)).report
    assert "sha256" not in plain["data"]["participants"][0]


def test_private_report_leaves_out_the_input_hashes():
    """A file hash identifies a participant's rows exactly: not part of a private run's report."""
    from types import SimpleNamespace

    from bnsl_cli.learn import DPConfig

    _, tables = simulated_tables(4, 2, 500, seed=0)
    hashed = [SimpleNamespace(X=t.X, names=t.names, path=f"site{k}.csv", n=t.n, sha256=f"{k:064x}")
              for k, t in enumerate(tables)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = learn(hashed, LearnConfig(method="fed-sparse", rounds=2, steps=5, seed=1, dp=DPConfig(epsilon=5.0))).report
    parts = rep["data"]["participants"]
    assert [p["file"] for p in parts] == ["site0.csv", "site1.csv"]
    assert all("sha256" not in p for p in parts)


def test_local_notears_in_worker_processes_matches_one_process():
    _, tables = simulated_tables(5, 3, 300, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = learn(tables, LearnConfig(method="local-notears", workers=1))
        b = learn(tables, LearnConfig(method="local-notears", workers=3))
    assert all(np.array_equal(x, y) for x, y in zip(a.local, b.local))
    assert [p["graph"] for p in a.report["local"]] == [p["graph"] for p in b.report["local"]]
    assert b.report["timing"]["workers"] == 3
