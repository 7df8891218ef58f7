"""The zCDP -> (epsilon, delta) accountant: closed forms, reference values, and dp_accounting.

Relation tested against Google's dp_accounting
------------------------------------------------
A Gaussian mechanism with noise multiplier z (std / L2 sensitivity) composed c times has Renyi DP
``RDP(alpha) = c * alpha / (2 z**2)``, i.e. it is rho-zCDP with ``rho = c / (2 z**2)``.
``dp_accounting.rdp.compute_epsilon`` converts RDP with Proposition 12 of Canonne–Kamath–Steinke
(arXiv:2004.00010), ``eps(alpha) = RDP(alpha) + ln(1 - 1/alpha) - (ln(delta) + ln(alpha)) / (alpha - 1)``,
which for ``RDP(alpha) = alpha*rho`` is exactly the objective our tight conversion minimises, but
dp_accounting minimises it over a finite grid of orders (alpha > 1.01) while we take the exact infimum
over all alpha > 1. Hence, for the same mechanism:

1. ``eps_ours <= eps_dp_accounting`` always (never looser);
2. ``epsilon_at_order(rho, delta, alpha_dp) == eps_dp_accounting`` at dp_accounting's optimal order
   (the two implement the same bound, and dp_accounting's Gaussian RDP equals ``alpha * rho``);
3. ``eps_dp_accounting <= 1.03 * eps_ours`` with the default orders when the optimal order lies inside
   the grid, and within 1e-6 relative with a dense custom grid.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.privacy.accountant import (
    epsilon_at_order,
    epsilon_from_rho,
    optimal_order,
    rho_for_epsilon,
)

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting import dp_event  # noqa: E402
from dp_accounting.rdp import rdp_privacy_accountant as rdp  # noqa: E402

# ---------------------------------------------------------------------------------------------
# reference values and closed forms
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rho, delta, expected",
    [(0.1, 1e-5, 1.914239), (1.0, 4e-8, 8.631811)],
)
def test_tight_reference_values(rho, delta, expected):
    assert epsilon_from_rho(rho, delta, "tight") == pytest.approx(expected, abs=1e-5)


def test_tight_is_the_default():
    assert epsilon_from_rho(0.1, 1e-5) == epsilon_from_rho(0.1, 1e-5, "tight")


@pytest.mark.parametrize("rho", [1e-6, 0.01, 0.1, 1.0, 7.5, 100.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 4e-8, 1e-12])
def test_simple_closed_form(rho, delta):
    expected = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    assert epsilon_from_rho(rho, delta, "simple") == pytest.approx(expected, rel=1e-14)


@pytest.mark.parametrize("eps", [1e-4, 0.5, 1.0, 10.0, 50.0, 1e4])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-10])
def test_simple_inverse_closed_form(eps, delta):
    L = math.log(1 / delta)
    rho = rho_for_epsilon(eps, delta, "simple")
    assert rho == pytest.approx((math.sqrt(L + eps) - math.sqrt(L)) ** 2, rel=1e-9)
    assert epsilon_from_rho(rho, delta, "simple") == pytest.approx(eps, rel=1e-12)


def test_tight_matches_brute_force_minimisation():
    """The root-of-the-derivative solution equals a direct numerical minimisation over alpha."""
    for rho in [1e-4, 0.01, 0.1, 1.0, 30.0]:
        for delta in [1e-3, 1e-6, 1e-10]:
            res = minimize_scalar(
                lambda t: epsilon_at_order(rho, delta, 1.0 + math.exp(t)),
                bounds=(-20, 20),
                method="bounded",
                options={"xatol": 1e-10},
            )
            ours = epsilon_from_rho(rho, delta)
            assert ours <= res.fun + 1e-12
            assert ours == pytest.approx(max(res.fun, 0.0), rel=1e-8, abs=1e-12)


def test_optimal_order_is_a_minimum():
    rho, delta = 0.3, 1e-6
    a = optimal_order(rho, delta)
    best = epsilon_at_order(rho, delta, a)
    assert best == pytest.approx(epsilon_from_rho(rho, delta), rel=1e-14)
    for factor in (0.9, 0.99, 1.01, 1.1):
        assert epsilon_at_order(rho, delta, 1 + (a - 1) * factor) > best
    # the spec's rule of thumb alpha ~ 1 + sqrt(ln(1/delta)/rho) is an upper bracket
    assert 1 < a < 1 + math.sqrt(math.log(1 / delta) / rho)


# ---------------------------------------------------------------------------------------------
# edge cases and validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("conversion", ["tight", "simple"])
def test_edge_cases(conversion):
    assert epsilon_from_rho(0.0, 1e-5, conversion) == 0.0
    assert epsilon_from_rho(0.0, 0.0, conversion) == 0.0
    assert epsilon_from_rho(0.5, 0.0, conversion) == math.inf
    assert epsilon_from_rho(math.inf, 1e-5, conversion) == math.inf


@pytest.mark.parametrize("rho", [1e-300, 1e-20, 1e-12, 1e-8, 1e-3, 1.0, 1e3, 1e6, 1e12, 1e100, 1e300])
def test_tight_robust_for_tiny_and_huge_rho(rho):
    for delta in (1e-5, 1e-12):
        tight = epsilon_from_rho(rho, delta, "tight")
        simple = epsilon_from_rho(rho, delta, "simple")
        assert math.isfinite(tight)
        assert 0.0 <= tight <= simple * (1 + 1e-12)
        if rho >= 1.0:
            assert tight >= rho * (1 - 1e-12)  # privacy loss has mean rho


def test_tight_monotone_in_rho_and_delta():
    rhos = np.geomspace(1e-10, 1e8, 300)
    eps = [epsilon_from_rho(r, 1e-6) for r in rhos]
    assert all(b >= a for a, b in zip(eps, eps[1:]))
    assert eps[-1] > eps[0]
    deltas = np.geomspace(1e-14, 0.5, 50)
    eps_d = [epsilon_from_rho(0.2, d) for d in deltas]
    assert all(b <= a for a, b in zip(eps_d, eps_d[1:]))


@pytest.mark.parametrize("delta", [-1e-5, 1.0, 1.5, float("nan")])
def test_invalid_delta(delta):
    with pytest.raises(PrivacyBudgetError, match="delta"):
        epsilon_from_rho(0.1, delta)
    with pytest.raises(PrivacyBudgetError, match="delta"):
        rho_for_epsilon(1.0, delta)


def test_delta_zero_rejected_by_inverse():
    with pytest.raises(PrivacyBudgetError, match=r"delta must lie in \(0, 1\)"):
        rho_for_epsilon(1.0, 0.0)


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf")])
def test_invalid_epsilon(eps):
    with pytest.raises(PrivacyBudgetError, match="epsilon"):
        rho_for_epsilon(eps, 1e-5)


def test_negative_rho_and_unknown_conversion():
    with pytest.raises(PrivacyBudgetError, match="rho"):
        epsilon_from_rho(-0.1, 1e-5)
    with pytest.raises(PrivacyBudgetError, match="conversion"):
        epsilon_from_rho(0.1, 1e-5, "loose")
    with pytest.raises(PrivacyBudgetError, match="conversion"):
        rho_for_epsilon(1.0, 1e-5, "loose")


# ---------------------------------------------------------------------------------------------
# the inverse
# ---------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    eps=st.floats(min_value=1e-3, max_value=200.0),
    log10_delta=st.floats(min_value=-14, max_value=-1),
    conversion=st.sampled_from(["tight", "simple"]),
)
def test_rho_for_epsilon_is_the_largest_feasible_rho(eps, log10_delta, conversion):
    delta = 10.0**log10_delta
    rho = rho_for_epsilon(eps, delta, conversion)
    assert rho > 0
    assert epsilon_from_rho(rho, delta, conversion) <= eps
    assert epsilon_from_rho(rho * (1 + 1e-9), delta, conversion) > eps
    assert epsilon_from_rho(rho, delta, conversion) == pytest.approx(eps, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(eps=st.floats(min_value=1e-2, max_value=100.0), log10_delta=st.floats(min_value=-14, max_value=-2))
def test_tight_allows_more_rho_than_simple(eps, log10_delta):
    delta = 10.0**log10_delta
    assert rho_for_epsilon(eps, delta, "tight") >= rho_for_epsilon(eps, delta, "simple")


# ---------------------------------------------------------------------------------------------
# cross-check against dp_accounting
# ---------------------------------------------------------------------------------------------


def _dp_accounting_gaussian(noise_multiplier, count, delta, orders=None):
    acc = rdp.RdpAccountant(orders=orders, neighboring_relation=rdp.NeighborRel.REPLACE_ONE)
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(noise_multiplier), count))
    return acc.get_epsilon_and_optimal_order(delta)


CASES = [
    # (noise multiplier z, count c, delta): rho = c / (2 z**2) from 5e-4 to ~60
    (1.0, 1, 1e-5),
    (2.0, 10, 1e-5),
    (5.0, 1000, 1e-8),
    (50.0, 2000, 4e-8),
    (0.8, 3, 1e-6),
    (10.0, 20, 1e-3),
    (0.4, 20, 1e-10),
]


@pytest.mark.parametrize("z, count, delta", CASES)
def test_tight_is_never_looser_than_dp_accounting(z, count, delta):
    rho = count / (2 * z**2)
    eps_dp, order = _dp_accounting_gaussian(z, count, delta)
    ours = epsilon_from_rho(rho, delta, "tight")
    # 1. never looser
    assert ours <= eps_dp + 1e-12
    # 2. same bound: our objective at dp_accounting's chosen order reproduces its epsilon
    assert epsilon_at_order(rho, delta, order) == pytest.approx(eps_dp, rel=1e-9)
    # 3. close: default grid within 3 % when the optimal order is inside it
    if 1.1 < optimal_order(rho, delta) < 63:
        assert eps_dp <= 1.03 * ours


@pytest.mark.parametrize("z, count, delta", CASES)
def test_dense_orders_converge_to_tight(z, count, delta):
    rho = count / (2 * z**2)
    a_star = optimal_order(rho, delta)
    orders = np.linspace(max(1.02, a_star * 0.9), a_star * 1.1, 2001)
    eps_dp, _ = _dp_accounting_gaussian(z, count, delta, orders=orders)
    ours = epsilon_from_rho(rho, delta)
    assert ours <= eps_dp + 1e-12
    assert eps_dp == pytest.approx(ours, rel=1e-6)


def test_simple_is_looser_than_dp_accounting_rdp():
    """Sanity: the simple conversion is the classic, looser one."""
    z, count, delta = 5.0, 1000, 1e-8
    eps_dp, _ = _dp_accounting_gaussian(z, count, delta)
    assert epsilon_from_rho(count / (2 * z**2), delta, "simple") > eps_dp


def test_a_tiny_epsilon_is_calibrated_or_refused_never_a_crash():
    # ε = 1e-300: ρ ≈ ε²/(4 ln(1/δ)) underflows to 0 (it divided by zero). The tight conversion reaches
    # ε ≈ 0 for every small enough ρ, so it still has a largest ρ; the simple one cannot be calibrated.
    from bnsl_cli.errors import PrivacyBudgetError
    from bnsl_cli.privacy.accountant import epsilon_from_rho, rho_for_epsilon

    rho = rho_for_epsilon(1e-300, 1e-5, "tight")
    assert rho > 0 and epsilon_from_rho(rho, 1e-5, "tight") <= 1e-300
    assert rho == pytest.approx(rho_for_epsilon(1e-20, 1e-5, "tight"), rel=1e-9)  # both where the tight ε is 0
    with pytest.raises(PrivacyBudgetError, match="too small for the simple conversion"):
        rho_for_epsilon(1e-300, 1e-5, "simple")
