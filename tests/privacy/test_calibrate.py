"""Calibration of the noise to a target (epsilon, delta), and the reverse direction."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.privacy.accountant import epsilon_from_rho, rho_for_epsilon
from bnsl_cli.privacy.calibrate import (
    NoiseMultipliers,
    calibrate,
    calibrate_covariance,
    covariance_sensitivity,
    plan_covariance,
    spend,
    spend_covariance,
    spend_from_noise,
)
from bnsl_cli.privacy.defaults import DP_ROUNDS, MEAN_SHARE, MOMENT_SHARE, SELECTION_SHARE
from bnsl_cli.privacy.ledger import EXPONENTIAL, GAUSSIAN

eps_st = st.floats(min_value=0.05, max_value=100.0)
log10_delta_st = st.floats(min_value=-12, max_value=-2)
rounds_st = st.integers(min_value=1, max_value=200)
steps_st = st.integers(min_value=1, max_value=500)
conv_st = st.sampled_from(["tight", "simple"])


def share_st(hi):
    return st.one_of(st.just(0.0), st.floats(1e-4, hi))


def test_defaults_match_the_spec():
    plan = calibrate(1.0, 1e-8, DP_ROUNDS, 20)
    assert plan.selection_share == SELECTION_SHARE == 0.5
    assert plan.moment_share == MOMENT_SHARE and plan.mean_share == MEAN_SHARE
    assert plan.conversion == "tight"


def test_budget_split_by_hand():
    eps, delta, K, T = 2.0, 1e-6, 10, 30
    plan = calibrate(eps, delta, K, T, selection_share=0.3, moment_share=0.1, mean_share=0.05)
    rho_star = rho_for_epsilon(eps, delta)
    assert plan.rho_total == pytest.approx(rho_star, rel=1e-12)
    assert plan.rho_moments == pytest.approx(0.1 * rho_star, rel=1e-12)
    assert plan.rho_means == pytest.approx(0.05 * rho_star, rel=1e-12)
    rho_it = 0.85 * rho_star / (K * T)
    assert plan.rho_step == pytest.approx(rho_it, rel=1e-12)
    assert plan.rho_selection == pytest.approx(0.3 * rho_it, rel=1e-12)
    assert plan.rho_update == pytest.approx(0.7 * rho_it, rel=1e-12)
    assert plan.gumbel_multiplier == pytest.approx(1 / math.sqrt(2 * 0.3 * rho_it), rel=1e-12)
    assert plan.sigma_multiplier == pytest.approx(1 / math.sqrt(2 * 0.7 * rho_it), rel=1e-12)
    assert plan.moment_multiplier == pytest.approx(1 / math.sqrt(2 * 0.1 * rho_star), rel=1e-12)
    assert plan.mean_multiplier == pytest.approx(1 / math.sqrt(2 * 0.05 * rho_star), rel=1e-12)
    assert plan.selection_epsilon == pytest.approx(2 / plan.gumbel_multiplier)
    assert plan.selection_epsilon**2 / 8 == pytest.approx(plan.rho_selection, rel=1e-12)


@settings(max_examples=50, deadline=None)
@given(eps=eps_st, log10_delta=log10_delta_st, K=rounds_st, T=steps_st,
       moment=share_st(0.4), mean=share_st(0.4), conversion=conv_st)
def test_half_split_identity(eps, log10_delta, K, T, moment, mean, conversion):
    """With a = 1/2 both per-step multipliers equal sqrt(K T / (rho* - rho_M - rho_mean))."""
    plan = calibrate(eps, 10.0**log10_delta, K, T, selection_share=0.5, moment_share=moment,
                     mean_share=mean, conversion=conversion)
    expected = math.sqrt(K * T / (plan.rho_total - plan.rho_moments - plan.rho_means))
    assert plan.gumbel_multiplier == pytest.approx(expected, rel=1e-12)
    assert plan.sigma_multiplier == pytest.approx(expected, rel=1e-12)


@settings(max_examples=80, deadline=None)
@given(eps=eps_st, log10_delta=log10_delta_st, K=rounds_st, T=steps_st,
       a=st.floats(0.05, 0.95), moment=share_st(0.3), mean=share_st(0.3), conversion=conv_st)
def test_calibration_inverts_accounting(eps, log10_delta, K, T, a, moment, mean, conversion):
    delta = 10.0**log10_delta
    plan = calibrate(eps, delta, K, T, selection_share=a, moment_share=moment, mean_share=mean,
                     conversion=conversion)
    spent, rho = spend(plan)
    assert spent == pytest.approx(eps, rel=1e-9)
    assert spent <= eps  # never over the target, not even by rounding
    assert rho == pytest.approx(plan.rho_total, rel=1e-9)
    # the same through the "from noise" entry point
    again, rho2 = spend_from_noise(plan.gumbel_multiplier, plan.sigma_multiplier, K, T,
                                   plan.moment_multiplier, plan.mean_multiplier, delta=delta,
                                   conversion=conversion)
    assert again == spent and rho2 == rho


@settings(max_examples=60, deadline=None)
@given(g=st.floats(0.5, 500.0), s=st.floats(0.5, 500.0), K=rounds_st, T=steps_st,
       log10_delta=log10_delta_st, conversion=conv_st)
def test_epsilon_grows_with_rounds_and_steps(g, s, K, T, log10_delta, conversion):
    delta = 10.0**log10_delta
    e1, r1 = spend_from_noise(g, s, K, T, delta=delta, conversion=conversion)
    e2, r2 = spend_from_noise(g, s, K + 1, T, delta=delta, conversion=conversion)
    e3, r3 = spend_from_noise(g, s, K, T + 1, delta=delta, conversion=conversion)
    assert r2 > r1 and r3 > r1
    assert e2 >= e1 and e3 >= e1
    if e1 > 0:  # the tight conversion is exactly 0 for a tiny rho and a large delta
        assert e2 > e1 and e3 > e1


@settings(max_examples=60, deadline=None)
@given(g=st.floats(0.5, 500.0), s=st.floats(0.5, 500.0), factor=st.floats(1.01, 10.0), K=rounds_st,
       T=steps_st, log10_delta=log10_delta_st, conversion=conv_st)
def test_epsilon_shrinks_with_noise(g, s, factor, K, T, log10_delta, conversion):
    delta = 10.0**log10_delta
    base, _ = spend_from_noise(g, s, K, T, delta=delta, conversion=conversion)
    more_gumbel, _ = spend_from_noise(g * factor, s, K, T, delta=delta, conversion=conversion)
    more_sigma, _ = spend_from_noise(g, s * factor, K, T, delta=delta, conversion=conversion)
    assert more_gumbel <= base and more_sigma <= base
    if min(more_gumbel, more_sigma) > 0:  # strict unless the tight bound hit 0
        assert more_gumbel < base and more_sigma < base


@settings(max_examples=40, deadline=None)
@given(eps1=eps_st, eps2=eps_st, K=rounds_st, T=steps_st)
def test_more_budget_means_less_noise(eps1, eps2, K, T):
    assume(eps2 > eps1 * 1.01)
    p1, p2 = calibrate(eps1, 1e-6, K, T), calibrate(eps2, 1e-6, K, T)
    assert p2.gumbel_multiplier < p1.gumbel_multiplier
    assert p2.sigma_multiplier < p1.sigma_multiplier


def test_early_stop_spends_less():
    plan = calibrate(5.0, 1e-8, 50, 20)
    eps_full, _ = spend(plan)
    eps_10, rho_10 = spend(plan, rounds=10)
    assert eps_10 < eps_full
    expected_rho = plan.rho_moments + plan.rho_means + 10 * 20 * (plan.rho_selection + plan.rho_update)
    assert rho_10 == pytest.approx(expected_rho, rel=1e-12)


def test_public_means_release_nothing():
    plan = calibrate(1.0, 1e-8, 50, 20, mean_share=0.0)
    assert plan.mean_multiplier is None and plan.rho_means == 0.0
    releases = [ev.release for ev in plan.planned_ledger([0]).events(0)]
    assert "column-means" not in releases
    # and the iterations get the budget the means would have taken
    with_means = calibrate(1.0, 1e-8, 50, 20)
    assert plan.sigma_multiplier < with_means.sigma_multiplier


def test_planned_ledger():
    plan = calibrate(3.0, 1e-7, 40, 25)
    ledger = plan.planned_ledger([2, 5, 9])
    assert ledger.participants == [2, 5, 9]
    for p in ledger.participants:
        evs = {ev.release: ev for ev in ledger.events(p)}
        assert set(evs) == {"second-moments", "column-means", "coordinate-selection", "coordinate-update"}
        assert evs["coordinate-selection"].mechanism == EXPONENTIAL
        assert evs["coordinate-update"].mechanism == GAUSSIAN
        assert evs["coordinate-selection"].count == evs["coordinate-update"].count == 40 * 25
        assert evs["second-moments"].count == evs["column-means"].count == 1
        assert evs["coordinate-selection"].noise_multiplier == pytest.approx(plan.gumbel_multiplier)
        assert ledger.rho(p) == pytest.approx(plan.rho_total, rel=1e-12)
    assert ledger.epsilon(1e-7) == pytest.approx(3.0, rel=1e-9)


def test_spend_needs_rounds_for_bare_multipliers():
    with pytest.raises(PrivacyBudgetError):
        spend(NoiseMultipliers(10.0, 10.0), delta=1e-5)
    with pytest.raises(PrivacyBudgetError):
        spend_from_noise(10.0, 10.0, 5, 5)  # no delta


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(epsilon=0.0), "epsilon"),
        (dict(epsilon=-1.0), "epsilon"),
        (dict(delta=0.0), "delta"),
        (dict(delta=1.0), "delta"),
        (dict(rounds=0), "rounds"),
        (dict(steps=0), "steps"),
        (dict(steps=2.5), "steps"),
        (dict(selection_share=0.0), "selection share"),
        (dict(selection_share=1.0), "selection share"),
        (dict(moment_share=-0.1), "second-moment share"),
        (dict(moment_share=1.0), "second-moment share"),
        (dict(mean_share=1.2), "mean share"),
        (dict(moment_share=0.6, mean_share=0.4), "whole budget"),
        (dict(moment_share=0.7, mean_share=0.5), "whole budget"),
        (dict(mean_share=5e-324), "too small"),
        (dict(conversion="loose"), "conversion"),
    ],
)
def test_invalid_inputs_raise_budget_error(kwargs, match):
    args = dict(epsilon=1.0, delta=1e-6, rounds=50, steps=20)
    args.update(kwargs)
    with pytest.raises(PrivacyBudgetError, match=match):
        calibrate(**args)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_invalid_multipliers(bad):
    with pytest.raises(PrivacyBudgetError):
        spend_from_noise(bad, 1.0, 1, 1, delta=1e-5)
    with pytest.raises(PrivacyBudgetError):
        spend_from_noise(1.0, 1.0, 1, 1, moment_multiplier=bad, delta=1e-5)


# ---------------------------------------------------------------------------------------------
# DP-Fed-BNSL
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.5, 1.0, 5.0, 50.0])
@pytest.mark.parametrize("conversion", ["tight", "simple"])
def test_covariance_calibration(eps, conversion):
    delta = 1 / 5000**2
    m = calibrate_covariance(eps, delta, conversion)
    rho_star = rho_for_epsilon(eps, delta, conversion)
    assert m == pytest.approx(1 / math.sqrt(2 * rho_star), rel=1e-12)
    spent, rho = spend_covariance(m, delta, conversion=conversion)
    assert spent == pytest.approx(eps, rel=1e-9) and spent <= eps
    plan = plan_covariance(eps, delta, conversion, mean_share=0.1)
    assert plan.rho_means == pytest.approx(0.1 * plan.rho_total)
    assert plan.sigma_multiplier == pytest.approx(1 / math.sqrt(2 * 0.9 * plan.rho_total), rel=1e-12)
    spent2, _ = spend_covariance(plan.sigma_multiplier, delta, plan.mean_multiplier, conversion)
    assert spent2 == pytest.approx(eps, rel=1e-9)
    assert plan.planned_ledger([0]).epsilon(delta, conversion) == pytest.approx(eps, rel=1e-9)


def test_covariance_errors():
    with pytest.raises(PrivacyBudgetError):
        calibrate_covariance(0.0, 1e-5)
    with pytest.raises(PrivacyBudgetError):
        plan_covariance(1.0, 1e-5, mean_share=1.0)
    with pytest.raises(PrivacyBudgetError):
        covariance_sensitivity(0.0)


def test_covariance_sensitivity_bound_holds_and_is_attained():
    rng = np.random.default_rng(0)
    C = 1.7
    bound = covariance_sensitivity(C)
    assert bound == pytest.approx(math.sqrt(2) * C**2)
    x = rng.normal(size=(2000, 6))
    y = rng.normal(size=(2000, 6))
    # clip rows to norm C (some are inside the ball)
    x *= np.minimum(1.0, C / np.linalg.norm(x, axis=1))[:, None] * rng.uniform(0.5, 1.0, (2000, 1))
    y *= np.minimum(1.0, C / np.linalg.norm(y, axis=1))[:, None]
    diff = np.einsum("ni,nj->nij", x, x) - np.einsum("ni,nj->nij", y, y)
    norms = np.linalg.norm(diff, axis=(1, 2))
    assert norms.max() <= bound * (1 + 1e-12)
    # orthogonal rows of norm C attain the bound
    e1, e2 = np.eye(6)[0] * C, np.eye(6)[1] * C
    attained = np.linalg.norm(np.outer(e1, e1) - np.outer(e2, e2))
    assert attained == pytest.approx(bound, rel=1e-12)


def test_spend_is_read_from_the_ledger():
    """epsilon from spend() equals converting the ledger's rho by hand."""
    mult = NoiseMultipliers(gumbel=40.0, sigma=60.0, moment=10.0, mean=None)
    eps, rho = spend(mult, 7, 30, 1e-6)
    hand = 7 * 30 * (0.5 / 40.0**2 + 0.5 / 60.0**2) + 0.5 / 10.0**2
    assert rho == pytest.approx(hand, rel=1e-12)
    assert eps == pytest.approx(epsilon_from_rho(hand, 1e-6), rel=1e-12)
    assert spend(mult, 7, 30, 1e-6, "simple")[0] == pytest.approx(epsilon_from_rho(hand, 1e-6, "simple"))


def test_release_calibration_fails_closed_when_it_cannot_verify(monkeypatch):
    """Issue 12.4: after its attempt limit the calibration returned an unverified plan; now it raises."""
    from bnsl_cli.errors import PrivacyBudgetError
    from bnsl_cli.privacy import release_plan

    def build(rho):
        return release_plan.dp_fed_bnsl_releases(rho, mean_share=0.05, moment_share=0.05, value_bound_given=False)

    releases, rho = release_plan.calibrate_releases(build, 2.0, 1e-6)
    assert release_plan.spend_of(releases, 1e-6)[0] <= 2.0
    monkeypatch.setattr(release_plan, "spend_of", lambda rel, d, c="tight": (2.0 * (1 + 1e-9), 0.0))
    with pytest.raises(PrivacyBudgetError, match="could not verify"):
        release_plan.calibrate_releases(build, 2.0, 1e-6)
