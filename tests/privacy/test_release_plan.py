"""The release list of a private run: its budget split, its calibration to (ε, δ) and its accounting."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bnsl_cli.errors import OptionError, PrivacyBudgetError
from bnsl_cli.plan.options import DPConfig
from bnsl_cli.plan.privacy_plan import resolve_privacy
from bnsl_cli.privacy.accountant import epsilon_from_rho, rho_for_epsilon
from bnsl_cli.privacy.defaults import MEAN_SHARE, MOMENT_SHARE, POLISH_SHARE, SELECTION_SHARE
from bnsl_cli.privacy.release_plan import (
    RANGE_FRACTION,
    calibrate_releases,
    covariance_sensitivity,
    dp_fed_bnsl_releases,
    dp_pgcd_releases,
    spend_of,
)
from bnsl_cli.privacy.releases import EXPONENTIAL, GAUSSIAN, PlannedRelease, ReleaseKind as K

eps_st = st.floats(min_value=0.05, max_value=100.0)
log10_delta_st = st.floats(min_value=-12, max_value=-2)
rounds_st = st.integers(min_value=1, max_value=200)
steps_st = st.integers(min_value=1, max_value=500)
conv_st = st.sampled_from(["tight", "simple"])


def _sparse(eps, delta, K_, T, conversion="tight", **kw):
    dp = DPConfig(epsilon=eps, delta=delta, conversion=conversion, **kw)
    return resolve_privacy("fed-sparse", dp, delta=delta, rounds=K_, steps=T, polish=kw.get("polish_share", 0) > 0)


def test_defaults_match_learn():
    assert SELECTION_SHARE == 0.5 and RANGE_FRACTION == 0.5
    pv = _sparse(1.0, 1e-8, 50, 20, polish_share=POLISH_SHARE)
    assert pv.selection_share == SELECTION_SHARE and pv.moment_share == MOMENT_SHARE and pv.mean_share == MEAN_SHARE
    assert [r.kind for r in pv.releases] == [
        K.RANGE_RAW, K.COLUMN_MEANS, K.RANGE_CENTRED, K.SECOND_MOMENTS, K.SELECTION, K.UPDATE, K.POLISH,
    ]


def test_budget_split_by_hand():
    rho = 0.8
    rel = dp_pgcd_releases(rho, rounds=10, steps=30, selection_share=0.3, mean_share=0.05, moment_share=0.1,
                           polish_share=0.15, value_bound_given=False)
    by = {r.kind: r for r in rel}
    rho_it = 0.7 * rho / 300
    assert by[K.SELECTION].count == by[K.UPDATE].count == 300
    assert by[K.SELECTION].mechanism == EXPONENTIAL and by[K.UPDATE].mechanism == GAUSSIAN
    assert by[K.SELECTION].rho_each == pytest.approx(0.3 * rho_it, rel=1e-12)
    assert by[K.UPDATE].rho_each == pytest.approx(0.7 * rho_it, rel=1e-12)
    # each one-off release spends half its share on its value-range histogram first
    assert by[K.RANGE_RAW].rho == pytest.approx(0.025 * rho) and by[K.COLUMN_MEANS].rho == pytest.approx(0.025 * rho)
    assert by[K.RANGE_CENTRED].rho == pytest.approx(0.05 * rho) and by[K.SECOND_MOMENTS].rho == pytest.approx(0.05 * rho)
    assert by[K.SECOND_MOMENTS].multiplier == pytest.approx(1 / math.sqrt(2 * 0.05 * rho), rel=1e-12)
    assert by[K.POLISH].multiplier == pytest.approx(1 / math.sqrt(2 * 0.15 * rho), rel=1e-12)
    assert sum(r.rho for r in rel) == pytest.approx(rho, rel=1e-12)
    bounded = dp_pgcd_releases(rho, rounds=10, steps=30, selection_share=0.3, mean_share=0.05, moment_share=0.1,
                               polish_share=0.0, value_bound_given=True)
    assert {r.kind for r in bounded} == {K.COLUMN_MEANS, K.SECOND_MOMENTS, K.SELECTION, K.UPDATE}


@settings(max_examples=60, deadline=None)
@given(eps=eps_st, log10_delta=log10_delta_st, K_=rounds_st, T=steps_st, a=st.floats(0.05, 0.95),
       public=st.booleans(), bound=st.booleans(), polish=st.booleans(), conversion=conv_st)
def test_calibration_inverts_accounting(eps, log10_delta, K_, T, a, public, bound, polish, conversion):
    delta = 10.0**log10_delta
    pv = _sparse(eps, delta, K_, T, conversion, selection_share=a, public_means=public,
                 value_bound=3.0 if bound else None, polish_share=POLISH_SHARE if polish else 0.0,
                 accountant="zcdp")  # zCDP's calibration inverts zCDP's accounting (pld: tests/privacy/test_pld.py)
    spent, rho = spend_of(pv.releases, delta, conversion)
    assert spent <= eps and spent == pytest.approx(eps, rel=1e-9)
    assert rho == pytest.approx(rho_for_epsilon(eps, delta, conversion), rel=1e-9)
    assert pv.spend() == (spent, rho)


@settings(max_examples=40, deadline=None)
@given(g=st.floats(0.5, 500.0), s=st.floats(0.5, 500.0), K_=rounds_st, T=steps_st, factor=st.floats(1.01, 10.0))
def test_more_steps_spend_more_and_more_noise_spends_less(g, s, K_, T, factor):
    def rel(g, s, n):
        return [PlannedRelease(K.SELECTION, EXPONENTIAL, g, n), PlannedRelease(K.UPDATE, GAUSSIAN, s, n)]

    base = spend_of(rel(g, s, K_ * T), 1e-6)[0]
    assert spend_of(rel(g, s, K_ * T + 1), 1e-6)[0] > base
    assert spend_of(rel(g * factor, s * factor, K_ * T), 1e-6)[0] < base


def test_spend_is_read_from_the_ledger():
    rel = [PlannedRelease(K.SELECTION, EXPONENTIAL, 40.0, 210), PlannedRelease(K.UPDATE, GAUSSIAN, 60.0, 210),
           PlannedRelease(K.SECOND_MOMENTS, GAUSSIAN, 10.0, 1)]
    eps, rho = spend_of(rel, 1e-6)
    hand = 210 * (0.5 / 40.0**2 + 0.5 / 60.0**2) + 0.5 / 10.0**2
    assert rho == pytest.approx(hand, rel=1e-12)
    assert eps == pytest.approx(epsilon_from_rho(hand, 1e-6), rel=1e-12)
    assert spend_of(rel, 1e-6, "simple")[0] == pytest.approx(epsilon_from_rho(hand, 1e-6, "simple"))


def test_public_means_release_nothing_and_fed_bnsl_splits_per_release():
    pv = _sparse(1.0, 1e-8, 5, 5, public_means=True)
    assert pv.multiplier(K.COLUMN_MEANS) is None and pv.multiplier(K.RANGE_RAW) is None and pv.mean_share == 0.0
    dp = DPConfig(epsilon=5.0, delta=1e-8)
    fb = resolve_privacy("fed-bnsl", dp, delta=1e-8, rounds=1, steps=1, polish=True)
    by = {r.kind: r.rho for r in fb.releases}
    rho = fb.rho_target
    # per-release budgets, not one total (issue 12.4)
    assert by[K.COLUMN_MEANS] == pytest.approx(0.5 * MEAN_SHARE * rho)
    assert by[K.SECOND_MOMENTS] == pytest.approx(0.5 * MOMENT_SHARE * rho)
    assert by[K.COVARIANCE] == pytest.approx((1 - MEAN_SHARE - MOMENT_SHARE) * rho)
    assert fb.summary()["rho_means"] == pytest.approx(MEAN_SHARE * rho)
    assert fb.rounds is None and fb.polish_share == 0.0 and fb.spend()[0] == pytest.approx(5.0, rel=1e-9)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"epsilon": 0.0}, PrivacyBudgetError, "epsilon"),
        ({"epsilon": float("nan")}, PrivacyBudgetError, "epsilon"),
        ({"selection_share": 1.0}, PrivacyBudgetError, "selection-share"),
        ({"clip": -1.0}, PrivacyBudgetError, "clip"),
        ({"polish_share": 1.0}, PrivacyBudgetError, "polish-share"),
        ({"conversion": "loose"}, OptionError, "conversion"),
    ],
)
def test_invalid_inputs_raise(kwargs, error, match):
    dp = DPConfig(**{"epsilon": 1.0, **kwargs})
    with pytest.raises(error, match=match):
        resolve_privacy("fed-sparse", dp, delta=1e-6, rounds=5, steps=5, polish=True)


def test_shares_that_leave_nothing_are_refused():
    with pytest.raises(PrivacyBudgetError, match="whole budget"):
        dp_pgcd_releases(1.0, rounds=2, steps=2, selection_share=0.5, mean_share=0.5, moment_share=0.3,
                         polish_share=0.2, value_bound_given=False)
    with pytest.raises(PrivacyBudgetError):
        dp_fed_bnsl_releases(1.0, mean_share=0.6, moment_share=0.4, value_bound_given=True)
    with pytest.raises(PrivacyBudgetError):
        calibrate_releases(lambda r: [], 0.0, 1e-6)
    with pytest.raises(ValueError):
        PlannedRelease(K.UPDATE, GAUSSIAN, 0.0)


def test_covariance_sensitivity_bound_holds_and_is_attained():
    rng = np.random.default_rng(0)
    C = 1.7
    bound = covariance_sensitivity(C)
    assert bound == pytest.approx(math.sqrt(2) * C**2)
    x = rng.normal(size=(2000, 6))
    y = rng.normal(size=(2000, 6))
    x *= np.minimum(1.0, C / np.linalg.norm(x, axis=1))[:, None] * rng.uniform(0.5, 1.0, (2000, 1))
    y *= np.minimum(1.0, C / np.linalg.norm(y, axis=1))[:, None]
    diff = np.einsum("ni,nj->nij", x, x) - np.einsum("ni,nj->nij", y, y)
    assert np.linalg.norm(diff, axis=(1, 2)).max() <= bound * (1 + 1e-12)
    e1, e2 = np.eye(6)[0] * C, np.eye(6)[1] * C
    assert np.linalg.norm(np.outer(e1, e1) - np.outer(e2, e2)) == pytest.approx(bound, rel=1e-12)
    with pytest.raises(PrivacyBudgetError):
        covariance_sensitivity(0.0)


def test_release_calibration_fails_closed_when_it_cannot_verify(monkeypatch):
    """Issue 12.4: after its attempt limit the calibration returned an unverified plan; now it raises."""
    from bnsl_cli.privacy import release_plan

    def build(rho):
        return release_plan.dp_fed_bnsl_releases(rho, mean_share=0.05, moment_share=0.05, value_bound_given=False)

    releases, rho = release_plan.calibrate_releases(build, 2.0, 1e-6)
    assert release_plan.spend_of(releases, 1e-6)[0] <= 2.0
    monkeypatch.setattr(release_plan, "spend_of", lambda rel, d, c="tight", a="zcdp": (2.0 * (1 + 1e-9), 0.0))
    with pytest.raises(PrivacyBudgetError, match="could not verify"):
        release_plan.calibrate_releases(build, 2.0, 1e-6)


def test_fed_suffstats_releases_split_the_budget_as_documented():
    import pytest as _pytest

    from bnsl_cli.errors import PrivacyBudgetError
    from bnsl_cli.federated.methods.suffstats.releases import CENTRE_SHARE as SUFFSTATS_CENTRE_SHARE, HIST_SHARE as SUFFSTATS_HIST_SHARE, STAGE_SHARES as SUFFSTATS_STAGE_SHARES
    from bnsl_cli.federated.methods.suffstats.releases import planned_releases as fed_suffstats_releases
    from bnsl_cli.privacy.releases import ReleaseKind

    rel = fed_suffstats_releases(0.8)
    assert rel[0].kind == ReleaseKind.SCALE_HISTOGRAM and rel[0].rho == _pytest.approx(SUFFSTATS_HIST_SHARE * 0.8)
    assert rel[1].kind == ReleaseKind.CENTRE_HISTOGRAM and rel[1].rho == _pytest.approx(SUFFSTATS_CENTRE_SHARE * 0.8)
    stages = [r for r in rel if r.kind == ReleaseKind.WHITENED_MOMENTS]
    assert len(stages) == len(SUFFSTATS_STAGE_SHARES)
    for r, f in zip(stages, SUFFSTATS_STAGE_SHARES):
        assert r.rho == _pytest.approx((1 - SUFFSTATS_HIST_SHARE - SUFFSTATS_CENTRE_SHARE) * f * 0.8)
    assert sum(r.rho for r in rel) == _pytest.approx(0.8)
    with _pytest.raises(PrivacyBudgetError):
        fed_suffstats_releases(0.8, stage_shares=(0.5, 0.6))
    with _pytest.raises(PrivacyBudgetError):
        fed_suffstats_releases(0.8, hist_share=0.5, centre_share=0.5)
