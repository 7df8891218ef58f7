"""DP-PGCD and DP-Fed-BNSL: reduction to PGCD, clipping, ledger and report."""

import warnings

import numpy as np
import pytest

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.federated.dp_participant import DPSparseParticipant, OneOffBudget
from bnsl_cli.federated.messages import ConsensusBroadcast, SparseUpdate
from bnsl_cli.federated.participant import SparseParticipant
from bnsl_cli.learn import LearnConfig, learn
from bnsl_cli.metrics import structure_metrics
from bnsl_cli.privacy.calibrate import calibrate
from bnsl_cli.privacy.ledger import PrivacyLedger
from bnsl_cli.private import DPConfig
from bnsl_cli.simulate import simulate
from tests._sim import simulated_tables


def _centred(n=600, d=6, seed=0):
    sim = simulate(d, d, participants=1, samples=n, seed=seed)
    X = sim.shards[0]
    return X - X.mean(axis=0), sim


def _pair(X, clip, gumbel=0.0, sigma=0.0, steps=15, precision="double"):
    n_total = 3 * X.shape[0]
    budget = OneOffBudget(rho_means=0.0, rho_moments=1e24, value_bound=1e3)
    dp = DPSparseParticipant(
        0, X, n_total, 0.01, steps, gumbel_multiplier=gumbel, sigma_multiplier=sigma, budget=budget,
        rng=np.random.default_rng(0), ledger=PrivacyLedger(), clip=clip, precision=precision,
    )
    plain = SparseParticipant(0, X, n_total, 0.01, steps, tol=0.0)
    return dp, plain


def test_without_noise_or_clipping_dp_pgcd_is_pgcd():
    X, _ = _centred()
    dp, plain = _pair(X, clip=1e9)
    np.testing.assert_allclose(dp.m_hat, np.diag(plain._S), rtol=1e-8)
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


def test_clipped_sums_are_exact_and_bound_each_row():
    X, _ = _centred(n=300)
    dp, _ = _pair(X, clip=0.5)
    dp.rho2 = 0.1
    dp._C = dp._clip_levels(0.1)
    dp.B = np.triu(np.full((6, 6), 0.3), 1)
    dp._RT = (dp._Xc @ dp.B - dp._Xc).T.copy()
    dp._recompute_all()
    C = dp._C
    per_sample = dp._Xc[:, :, None] * (dp._Xc @ dp.B - dp._Xc)[:, None, :]  # [row, i, j]
    clipped = np.clip(per_sample, -C[None, :, None], C[None, :, None])
    np.testing.assert_allclose(dp._CS, clipped.sum(axis=0), atol=1e-9)
    assert (np.abs(per_sample) > C[None, :, None]).any()  # clipping is active in this test
    # replacing one row moves every clipped sum by at most 2 C_i
    assert np.all(np.abs(clipped[0]) <= C[:, None] + 1e-12)
    assert np.all(np.abs(clipped[0] - clipped[1]) <= 2 * C[:, None] + 1e-12)


def test_single_precision_sums_are_close_and_still_bounded():
    """The default single-precision products: sums within float32 rounding of the exact ones, and
    every clipped term at most the (double-precision) level C_i."""
    X, _ = _centred(n=300)
    fast, _ = _pair(X, clip=0.5, precision="single")
    exact, _ = _pair(X, clip=0.5, precision="double")
    B = np.triu(np.full((6, 6), 0.3), 1)
    for dp in (fast, exact):
        dp._C = dp._clip_levels(0.1)
        dp.B = B.copy()
        dp._RT = (dp._Xc @ B - dp._Xc).T.copy()
        dp._recompute_all()
    assert fast._Chi.dtype == np.float32 and np.all(fast._Chi[:, 0].astype(float) <= fast._C)
    np.testing.assert_allclose(fast._CS, exact._CS, rtol=1e-5, atol=1e-5 * np.abs(exact._CS).max())
    assert not np.array_equal(fast._CS, exact._CS)  # it really is computed differently


def test_noise_has_the_calibrated_scale_and_is_recorded():
    X, _ = _centred(n=3000)
    plan = calibrate(5.0, 1e-6, 10, 8)
    budget = OneOffBudget(plan.rho_means, plan.rho_moments)
    ledger = PrivacyLedger()
    dp = DPSparseParticipant(
        0, X, 9000, 0.01, 8, gumbel_multiplier=plan.gumbel_multiplier, sigma_multiplier=plan.sigma_multiplier,
        budget=budget, rng=np.random.default_rng(3), ledger=ledger,
    )
    W = np.zeros((6, 6))
    for rnd in range(1, 11):
        dp.handle(ConsensusBroadcast(rnd, 6, W, 0.01 * rnd).encode())
    releases = {ev.release for ev in ledger.events(0)}
    assert {"coordinate-selection", "coordinate-update", "column-means", "second-moments"} <= releases
    assert ledger.epsilon(1e-6) == pytest.approx(5.0, rel=1e-9)
    for ev in ledger.events(0):
        if ev.release == "coordinate-update":
            assert ev.noise_scale == pytest.approx(plan.sigma_multiplier * ev.sensitivity)
        if ev.release == "coordinate-selection":
            assert ev.noise_scale == pytest.approx(plan.gumbel_multiplier * ev.sensitivity)


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
