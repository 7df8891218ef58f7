"""The privacy-loss-distribution accountant (bnsl_cli/privacy/pld.py).

Checked against
* the analytic Gaussian (Balle & Wang 2018): pure-Gaussian ledgers, exact;
* Google's ``dp_accounting.pld`` (an independent implementation, test-only dependency): the same
  dominating pairs discretised, composed and read by its code, on random ledgers;
* the two-point bounded-range pairs of Dong, Durfee & Rogers (built in ``dp_accounting`` from their
  probability mass functions): the bounded-range curve dominates every one of them and is their
  supremum;
* the zCDP accountant: never above it.
"""

import math

import numpy as np
import pytest

from bnsl_cli.privacy import pld
from bnsl_cli.privacy.accountant import accountant_epsilon, check_accountant, epsilon_from_rho
from bnsl_cli.privacy.ledger import PrivacyEvent, PrivacyLedger
from bnsl_cli.privacy.releases import EXPONENTIAL, GAUSSIAN

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting.pld import pld_pmf  # noqa: E402
from dp_accounting.pld import privacy_loss_distribution as dpl  # noqa: E402

H = pld.DEFAULT_DISCRETIZATION


def _gauss(mult, count=1, sens=1.0):
    return PrivacyEvent("coordinate-update", GAUSSIAN, sens, mult * sens, count)


def _sel(mult, count=1, sens=1.0):
    return PrivacyEvent("coordinate-selection", EXPONENTIAL, sens, mult * sens, count)


def _random_ledger(rng):
    """A ledger like the ones bnsl makes: a few one-off Gaussians, optionally many selections and
    updates, optionally one matrix release; multipliers and counts drawn at random."""
    events = []
    for _ in range(rng.integers(1, 5)):
        events.append(PrivacyEvent("second-moments", GAUSSIAN, 1.0, float(rng.uniform(3, 15)), 1))
    if rng.random() < 0.7:
        k = int(rng.choice([10, 100, 400, 1000]))
        m = float(rng.uniform(8, 60)) * math.sqrt(k / 1000)
        events.append(_sel(m, k))
        events.append(_gauss(float(rng.uniform(8, 60)) * math.sqrt(k / 1000), k))
    if rng.random() < 0.5:
        events.append(PrivacyEvent("covariance", GAUSSIAN, 1.0, float(rng.uniform(0.8, 4)), 1))
    delta = float(rng.choice([1e-5, 1e-6, 4e-8, 1e-9]))
    return events, delta


def _dp_accounting_epsilon(events, delta):
    """The same composition in dp_accounting: all Gaussian events as one Gaussian (μ² = Σ count μ_i²,
    an identity; dp_accounting's add-or-remove pair N(0, σ²) vs N(Δ, σ²) is the pair of a
    replace-one sensitivity Δ), each bounded-range group as the connect-the-dots PMF of our curve, self-composed
    and composed by dp_accounting, ε read by dp_accounting."""
    mu2 = sum(e.count * (e.sensitivity / e.noise_scale) ** 2 for e in events if e.mechanism == GAUSSIAN)
    out = dpl.identity(H)
    if mu2 > 0:
        out = dpl.from_gaussian_mechanism(1.0, sensitivity=math.sqrt(mu2), value_discretization_interval=H)
    groups = {}
    for e in events:
        if e.mechanism == EXPONENTIAL:
            e0 = 2 * e.sensitivity / e.noise_scale
            groups[e0] = groups.get(e0, 0) + e.count
    for e0, k in groups.items():
        lo, hi = math.floor(-e0 / H) - 1, math.ceil(e0 / H)
        deltas = pld.bounded_range_delta(e0, np.arange(lo, hi + 1) * H)
        pmf = pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(H, lo, hi, deltas).to_dense_pmf()
        one = dpl.PrivacyLossDistribution(pmf)
        out = out.compose(one.self_compose(k))
    return out.get_epsilon_for_delta(delta)


# ---------------------------------------------------------------------------------------------
# the Gaussian: exact
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mu", [0.02, 0.3, 1.0, 2.5])
@pytest.mark.parametrize("delta", [1e-5, 4e-8])
def test_gaussian_pld_matches_analytic_gaussian(mu, delta):
    exact = pld.gaussian_epsilon(mu, delta)
    got = pld.gaussian_pld(mu).epsilon(delta)
    assert got >= exact * (1 - 1e-12)  # pessimistic
    # the grid h = 1e-4 costs < 1e-6 relative from ε ≈ 0.5 on; at ε ≈ 0.06 (μ = 0.02) about 3e-6
    assert got == pytest.approx(exact, rel=1e-6 if mu >= 0.3 else 5e-6)


def test_analytic_gaussian_is_the_textbook_formula():
    # Balle & Wang: δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ), at a hand-checked point
    from scipy.stats import norm

    mu, eps = 1.3, 0.7
    assert pld.gaussian_delta(mu, eps) == pytest.approx(norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu), rel=1e-12)
    assert pld.gaussian_delta(mu, pld.gaussian_epsilon(mu, 1e-6)) == pytest.approx(1e-6, rel=1e-9)


def test_pure_gaussian_ledger_composes_like_one_gaussian():
    events = [_gauss(7.0), _gauss(7.0), _gauss(60.0, 1000), PrivacyEvent("covariance", GAUSSIAN, 2.0, 3.0, 1)]
    mu = math.sqrt(sum(e.count * (e.sensitivity / e.noise_scale) ** 2 for e in events))
    exact = pld.gaussian_epsilon(mu, 4e-8)
    assert pld.epsilon_of_events(events, 4e-8) == pytest.approx(exact, rel=1e-6)
    # composing each event's own PLD by FFT instead of grouping: also an upper bound, close
    fft = pld.events_pld(events, group_gaussians=False).epsilon(4e-8)
    assert exact * (1 - 1e-9) <= fft <= exact * 1.01


# ---------------------------------------------------------------------------------------------
# the bounded-range curve
# ---------------------------------------------------------------------------------------------


def _two_point_delta(e0, t, eps):
    """δ(ε) of the Dong–Durfee–Rogers two-point pair with losses tε₀ and (t−1)ε₀, via dp_accounting."""
    a = math.exp(e0)
    p = (a - math.exp(t * e0)) / (a - 1)  # P(high loss)
    upper = {"hi": math.log(p), "lo": math.log1p(-p)}
    lower = {"hi": math.log(p) - t * e0, "lo": math.log1p(-p) + (1 - t) * e0}
    dist = dpl.from_two_probability_mass_functions(lower, upper, value_discretization_interval=1e-7, symmetric=False)
    return dist.get_delta_for_epsilon(eps)


@pytest.mark.parametrize("e0", [0.05, 0.4, 1.5])
def test_bounded_range_curve_dominates_every_two_point_pair(e0):
    rng = np.random.default_rng(0)
    for eps in [0.0, 0.3 * e0, 0.8 * e0]:
        env = pld.bounded_range_delta(e0, eps)
        best = 0.0
        for t in np.concatenate([rng.uniform(0.01, 0.99, 20), np.linspace(0.01, 0.99, 199)]):
            d = _two_point_delta(e0, float(t), eps)
            assert d <= env * (1 + 1e-5) + 1e-12
            best = max(best, d)
        assert best == pytest.approx(env, rel=2e-3)  # the supremum over t, reached on the grid


def test_bounded_range_reference_values():
    e0 = 0.7
    assert pld.bounded_range_delta(e0, 0.0) == pytest.approx(math.tanh(e0 / 4), rel=1e-12)
    assert pld.bounded_range_delta(e0, e0) == 0.0
    # swapping the pair: δ(−ε) = 1 − e^{−ε} + e^{−ε} δ(ε)
    assert pld.bounded_range_delta(e0, -0.2) == pytest.approx(1 - math.exp(-0.2) + math.exp(-0.2) * pld.bounded_range_delta(e0, 0.2))
    # one selection is ε₀-DP exactly: ε(δ → 0) = ε₀ (within the grid)
    assert pld.epsilon_of_events([_sel(2 / e0)], 1e-12) == pytest.approx(e0, abs=2 * H)


# ---------------------------------------------------------------------------------------------
# random ledgers against dp_accounting
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(24))
def test_random_ledgers_agree_with_dp_accounting(seed):
    events, delta = _random_ledger(np.random.default_rng(seed))
    ours = pld.epsilon_of_events(events, delta)
    theirs = _dp_accounting_epsilon(events, delta)
    assert ours == pytest.approx(theirs, rel=1e-6)
    # what the report prints is never below the independent implementation's bound beyond rounding
    assert accountant_epsilon(events, delta, "pld") >= min(theirs, epsilon_from_rho(sum(e.rho for e in events), delta)) * (1 - 1e-6)


@pytest.mark.parametrize("seed", range(24))
def test_pld_accountant_never_above_zcdp(seed):
    events, delta = _random_ledger(np.random.default_rng(100 + seed))
    rho = sum(e.rho for e in events)
    z = epsilon_from_rho(rho, delta)
    assert accountant_epsilon(events, delta, "pld") <= z
    if all(e.mechanism == GAUSSIAN for e in events):  # there the PLD itself is far below
        assert pld.epsilon_of_events(events, delta) < 0.97 * z


def test_per_event_gaussians_in_dp_accounting_are_no_tighter():
    """dp_accounting composing every Gaussian release separately (its own discretisation per event)
    is an upper bound too; ours (exact grouping) is below it and close."""
    events = [_gauss(7.0), _gauss(7.0), _gauss(20.0, 50), _sel(20.0, 50)]
    ours = pld.epsilon_of_events(events, 1e-6)
    out = dpl.identity(H)
    for e in events:
        if e.mechanism == GAUSSIAN:
            one = dpl.from_gaussian_mechanism(e.noise_scale / e.sensitivity, value_discretization_interval=H)
            out = out.compose(one.self_compose(e.count))
    lo, hi = math.floor(-0.1 / H) - 1, math.ceil(0.1 / H)
    pmf = pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(H, lo, hi, pld.bounded_range_delta(0.1, np.arange(lo, hi + 1) * H))
    out = out.compose(dpl.PrivacyLossDistribution(pmf.to_dense_pmf()).self_compose(50))
    theirs = out.get_epsilon_for_delta(1e-6)
    assert ours <= theirs * (1 + 1e-9)
    assert ours == pytest.approx(theirs, rel=1e-3)


def test_delta_and_epsilon_are_inverse():
    events = [_gauss(5.0), _sel(30.0, 200), _gauss(30.0, 200)]
    eps = pld.epsilon_of_events(events, 1e-6)
    assert pld.delta_of_events(events, eps) == pytest.approx(1e-6, rel=1e-6)
    assert pld.delta_of_events(events, eps * 0.99) > 1e-6


def test_edge_cases():
    assert pld.epsilon_of_events([], 1e-6) == 0.0
    assert pld.epsilon_of_events([PrivacyEvent("covariance", GAUSSIAN, 1.0, 0.0, 1)], 1e-6) == math.inf
    assert pld.epsilon_of_events([PrivacyEvent("covariance", GAUSSIAN, 0.0, 1.0, 1)], 1e-6) == 0.0
    with pytest.raises(ValueError):
        check_accountant("rdp")


# ---------------------------------------------------------------------------------------------
# the ledger, the plan and the calibration read through the accountant
# ---------------------------------------------------------------------------------------------


def test_ledger_report_names_the_accountant_and_takes_the_largest_participant():
    led = PrivacyLedger()
    led.record(1, _gauss(3.0))
    led.record(2, _gauss(2.0))
    z = led.to_dict(1e-6, "tight", "zcdp")
    p = led.to_dict(1e-6, "tight", "pld")
    assert z["accountant"] == "zcdp" and p["accountant"] == "pld"
    assert z["epsilon"] == epsilon_from_rho(0.5 / 4, 1e-6)
    assert p["epsilon"] == pytest.approx(pld.gaussian_epsilon(0.5, 1e-6), rel=1e-6)
    assert p["epsilon"] == max(e["epsilon"] for e in p["participants"])
    assert led.epsilon(1e-6, accountant="pld") == p["epsilon"]


@pytest.mark.parametrize("method", ["fed-moments", "fed-sparse"])
def test_calibration_meets_the_target_under_pld(method):
    from bnsl_cli.plan.options import DPConfig
    from bnsl_cli.plan.privacy_plan import resolve_privacy

    pz = resolve_privacy(method, DPConfig(epsilon=5, accountant="zcdp"), delta=4e-8, rounds=10, steps=20, polish=True)
    pp = resolve_privacy(method, DPConfig(epsilon=5, accountant="pld"), delta=4e-8, rounds=10, steps=20, polish=True)
    assert pp.accountant == "pld" and pz.accountant == "zcdp"
    eps_p, _ = pp.spend()
    assert 5 * (1 - 1e-6) <= eps_p <= 5
    # the same releases at a common scale: every multiplier shrinks by one factor, never grows
    ratios = {round(a.multiplier / b.multiplier, 9) for a, b in zip(pp.releases, pz.releases)}
    assert len(ratios) == 1 and ratios.pop() <= 1.0 + 1e-8
    if method == "fed-moments":  # all Gaussian: the PLD buys noise
        assert pp.rho_target > 1.05 * pz.rho_target


def test_a_very_large_budget_reports_the_zcdp_bound_without_a_huge_grid():
    """ε in the hundreds puts the losses near μ²/2 ≈ ρ: the PLD grid would take gigabytes and e^loss
    overflow. The accountant reports the zCDP bound then (an upper bound for the same releases)."""
    import resource

    from bnsl_cli.privacy.releases import ReleaseKind

    events = [PrivacyEvent(ReleaseKind.WHITENED_MOMENTS, GAUSSIAN, 1.0, 0.01, 1, 1)]  # ρ = 5000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    eps = accountant_epsilon(events, 1e-6, "pld")
    assert eps == epsilon_from_rho(5000.0, 1e-6, "tight")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500_000  # KB
