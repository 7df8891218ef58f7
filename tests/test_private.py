"""DP-PGCD and DP-Fed-BNSL: reduction to PGCD, clipping, ledger and report."""

import warnings

import numpy as np
import pytest

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.federated.dp_participant import ClippedGradients, DPSparseParticipant, clip_levels, dp_pgcd
from bnsl_cli.federated.messages import ConsensusBroadcast, SparseUpdate
from bnsl_cli.federated.participant import SparseParticipant
from bnsl_cli.federated.roles import make_participant
from bnsl_cli.learn import DPConfig, LearnConfig, RunPlan, Shapes, learn
from bnsl_cli.metrics import structure_metrics
from bnsl_cli.plan import ParticipantShape
from bnsl_cli.privacy.releases import ReleaseKind
from bnsl_cli.simulate import simulate
from tests._sim import simulated_tables

#: one-off multipliers that make the one-off releases practically noise-free
_QUIET = {ReleaseKind.SECOND_MOMENTS: 1e-12}


def _centred(n=600, d=6, seed=0):
    sim = simulate(d, d, participants=1, samples=n, seed=seed)
    X = sim.shards[0]
    return X - X.mean(axis=0), sim


def _pair(X, clip, gumbel=0.0, sigma=0.0, steps=15, precision="double"):
    n_total = 3 * X.shape[0]
    dp = DPSparseParticipant(
        0, X, n_total, 0.01, steps, one_offs=_QUIET, value_bound=1e3, gumbel_multiplier=gumbel,
        sigma_multiplier=sigma, rng=np.random.default_rng(0), clip=clip, precision=precision,
    )
    plain = SparseParticipant(0, X, n_total, 0.01, steps, tol=0.0)
    return dp, plain


def test_without_noise_or_clipping_dp_pgcd_is_pgcd():
    X, _ = _centred()
    dp, plain = _pair(X, clip=1e9)
    np.testing.assert_allclose(dp.m_hat, np.diag(X.T @ X) / (3 * X.shape[0]), rtol=1e-8)
    rng = np.random.default_rng(1)
    W = rng.normal(scale=0.2, size=(6, 6))
    np.fill_diagonal(W, 0)
    for rnd, rho2 in enumerate([0.01, 0.05, 0.2], start=1):
        msg = ConsensusBroadcast(rnd, 6, W * rnd, rho2).encode()
        a = SparseUpdate.decode(dp.handle(msg))
        b = SparseUpdate.decode(plain.handle(msg))
        assert np.array_equal(a.entries.rows, b.entries.rows) and np.array_equal(a.entries.cols, b.entries.cols)
        np.testing.assert_allclose(dp.B, plain.B, atol=1e-9)
        assert a.objective is None  # private participants never send their objective


def _levels(X, rho2=0.1, clip=0.5):
    v = (X * X).mean(axis=0)
    return clip_levels(v, v / 3.0, rho2, clip, "adaptive")


def test_clipped_sums_are_exact_and_bound_each_row():
    X, _ = _centred(n=300)
    B = np.triu(np.full((6, 6), 0.3), 1)
    grads = ClippedGradients(X, "double")
    C = _levels(X)
    grads.set_levels(C)
    grads.set_B(B)
    per_sample = X[:, :, None] * (X @ B - X)[:, None, :]  # [row, i, j]
    clipped = np.clip(per_sample, -C[None, :, None], C[None, :, None])
    np.testing.assert_allclose(grads.sums, clipped.sum(axis=0), atol=1e-9)
    assert (np.abs(per_sample) > C[None, :, None]).any()  # clipping is active in this test
    # replacing one row moves every clipped sum by at most 2 C_i
    assert np.all(np.abs(clipped[0]) <= C[:, None] + 1e-12)
    assert np.all(np.abs(clipped[0] - clipped[1]) <= 2 * C[:, None] + 1e-12)
    # one coordinate move updates that column exactly
    grads.move(2, 4, -0.2)
    B[2, 4] -= 0.2
    per_sample = X[:, :, None] * (X @ B - X)[:, None, :]
    np.testing.assert_allclose(grads.sums, np.clip(per_sample, -C[None, :, None], C[None, :, None]).sum(axis=0), atol=1e-9)


def test_single_precision_sums_are_close_and_still_bounded():
    """Single-precision products: sums within float32 rounding of the exact ones, accumulated in
    float64, and every clipped term at most the (double-precision) level C_i."""
    X, _ = _centred(n=300)
    B = np.triu(np.full((6, 6), 0.3), 1)
    C = _levels(X)
    fast, exact = ClippedGradients(X, "single"), ClippedGradients(X, "double")
    for g in (fast, exact):
        g.set_B(B)
        g.set_levels(C)
    assert fast.sums.dtype == np.float64
    np.testing.assert_allclose(fast.sums, exact.sums, rtol=1e-5, atol=1e-5 * np.abs(exact.sums).max())
    assert not np.array_equal(fast.sums, exact.sums)  # it really is computed differently
    # every single-precision term is within its level: a row of huge values stays bounded
    Y = X.copy()
    Y[0] *= 1e6
    g = ClippedGradients(Y, "single")
    g.set_B(B)
    g.set_levels(C)
    Z = Y.copy()
    Z[0] = X[1]
    h = ClippedGradients(Z, "single")
    h.set_B(B)
    h.set_levels(C)
    assert np.all(np.abs(g.sums - h.sums) <= 2 * C[:, None] * (1 + 1e-6))


def test_dp_pgcd_is_a_plain_function_with_explicit_releases():
    X, _ = _centred(n=500)
    v = (X * X).mean(axis=0)
    m_hat = v / 2.0
    C = clip_levels(v, m_hat, 0.05, 1.5, "adaptive")
    grads = ClippedGradients(X)
    B0 = np.zeros((6, 6))
    W = np.zeros((6, 6))
    B, events = dp_pgcd(grads, C, B0, np.zeros((6, 6)), W, 0.05, 0.01, m_hat, 12, 1000, 3.0, 4.0,
                        np.random.default_rng(0))
    assert not B0.any() and B.shape == (6, 6)  # the input is not modified
    kinds = [ev.release for ev in events]
    assert kinds[0] == ReleaseKind.SELECTION and events[0].count == 12
    assert sum(ev.count for ev in events if ev.release == ReleaseKind.UPDATE) == 12
    for ev in events:
        want = 3.0 if ev.release == ReleaseKind.SELECTION else 4.0
        assert ev.noise_multiplier == pytest.approx(want)
    # the same inputs and noise source give the same step
    B2, _ = dp_pgcd(ClippedGradients(X), C, B0, np.zeros((6, 6)), W, 0.05, 0.01, m_hat, 12, 1000, 3.0, 4.0,
                    np.random.default_rng(0))
    np.testing.assert_array_equal(B, B2)


def _plan(X, eps=5.0, rounds=10, steps=8, P=3, polish=False, **dp):
    shapes = Shapes(tuple(f"x{i}" for i in range(X.shape[1])), tuple(ParticipantShape(f"p{k}", X.shape[0]) for k in range(P)))
    return RunPlan.resolve(LearnConfig(rounds=rounds, steps=steps, polish=polish, dp=DPConfig(epsilon=eps, delta=1e-6, **dp)), shapes)


def test_noise_has_the_planned_scale_and_is_recorded():
    X, _ = _centred(n=3000)
    plan = _plan(X)
    dp = make_participant(plan, 0, X, np.random.default_rng(3))
    W = np.zeros((6, 6))
    for rnd in range(1, 11):
        dp.handle(ConsensusBroadcast(rnd, 6, W, 0.01 * rnd).encode())
    events = dp.summary()["events"]
    releases = {ev["release"] for ev in events}
    assert {"coordinate-selection", "coordinate-update", "column-means", "second-moments"} <= releases
    from bnsl_cli.privacy.ledger import PrivacyEvent, PrivacyLedger

    ledger = PrivacyLedger()
    for ev in events:
        ledger.record(0, PrivacyEvent.from_dict(ev))
    assert ledger.epsilon(1e-6) == pytest.approx(5.0, rel=1e-9)
    for ev in events:  # every release used the plan's multiplier of its kind
        assert ev["noise_multiplier"] == pytest.approx(plan.privacy.multiplier(ReleaseKind(ev["release"])), rel=1e-12)


def test_plan_round_trips_and_refuses_dp_where_the_method_cannot_honour_it():
    import json

    from bnsl_cli.errors import OptionError

    X, _ = _centred(n=300)
    for kw in ({}, {"public_means": True}, {"value_bound": 4.0}):
        plan = _plan(X, polish=True, **kw)
        again = RunPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
        assert again == plan
    shapes = Shapes(("a", "b"), (ParticipantShape("f.csv", 100),))
    for method in ("notears", "local-notears"):
        with pytest.raises(OptionError, match="--dp"):
            RunPlan.resolve(LearnConfig(method=method, dp=DPConfig(epsilon=1.0)), shapes)
    with pytest.raises(PrivacyBudgetError):
        RunPlan.resolve(LearnConfig(dp=DPConfig(epsilon=1.0, clip=0.0)), shapes)


@pytest.fixture(scope="module")
def shards():
    return simulated_tables(10, 4, 2000, seed=5)


def test_dp_fed_sparse_learns_at_large_epsilon_and_reports_the_ledger(shards):
    sim, tables = shards
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = learn(tables, LearnConfig(seed=1, dp=DPConfig(epsilon=50.0)))
    m = structure_metrics(res.W, sim.W)
    assert m["shd"] <= 4, m
    pv = res.report["privacy"]
    assert pv["epsilon"] <= 50.0 + 1e-9
    assert pv["delta"] == pytest.approx(1 / 2000**2)
    assert pv["seeded"] is True and "warning" in pv
    assert len(pv["participants"]) == 4
    assert "value-range (raw)" in pv["released_values"]


def test_dp_fed_bnsl_runs_and_spends_its_budget(shards):
    _, tables = shards
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = learn(tables, LearnConfig(method="fed-bnsl", seed=2, dp=DPConfig(epsilon=5.0, delta=1e-6)))
    pv = res.report["privacy"]
    assert pv["epsilon"] == pytest.approx(5.0, rel=1e-6)
    assert "covariance" in pv["released_values"]


def test_public_means_skip_the_mean_release(shards):
    _, tables = shards
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = learn(tables, LearnConfig(seed=1, rounds=3, dp=DPConfig(epsilon=5.0, public_means=True)))
    pv = res.report["privacy"]
    assert "column-means" not in pv["released_values"]
    assert "declared public" in pv["centring"]


def test_unseeded_runs_differ_and_bad_budgets_fail(shards):
    _, tables = shards
    a = learn(tables, LearnConfig(rounds=2, dp=DPConfig(epsilon=5.0)))
    b = learn(tables, LearnConfig(rounds=2, dp=DPConfig(epsilon=5.0)))
    assert a.report["privacy"]["seeded"] is False
    assert not np.array_equal(a.W_raw, b.W_raw)
    with pytest.raises(PrivacyBudgetError):
        learn(tables, LearnConfig(rounds=2, dp=DPConfig(epsilon=-1.0)))
    with pytest.raises(PrivacyBudgetError):
        learn(tables, LearnConfig(rounds=2, dp=DPConfig(epsilon=1.0, delta=1.5)))
