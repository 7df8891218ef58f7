"""zCDP -> (epsilon, delta) conversions and their inverses.

A mechanism is ``rho``-zCDP when every Renyi divergence of order ``alpha > 1`` between its output
distributions on neighbouring data sets is at most ``alpha * rho``. zCDP composes by addition. Two
conversions to approximate ``(epsilon, delta)``-DP are offered:

``tight`` (Canonne, Kamath & Steinke 2020, Prop. 12 of arXiv:2004.00010)::

    eps(rho, delta) = inf_{alpha > 1} [ alpha*rho
                                        + (ln(1/delta) + (alpha-1)*ln(1 - 1/alpha) - ln(alpha)) / (alpha-1) ]

  Every ``alpha`` gives a valid bound. Writing ``u = alpha - 1`` and ``L = ln(1/delta)`` the objective is
  ``f(u) = (1+u)*rho + (L - ln(1+u))/u - ln(1 + 1/u)`` with derivative ``f'(u) = rho - (L - ln(1+u))/u**2``,
  so ``f`` is unimodal and its minimiser is the unique root of the strictly increasing function
  ``g(u) = rho*u**2 + ln(1+u) - L``, which lies in ``[2L/(1 + sqrt(1 + 4*rho*L)), sqrt(L/rho)]``.
  The bounded 1-D minimisation is therefore solved exactly through that root (Brent), which is robust
  for tiny and huge ``rho`` alike. The result is clipped at 0.

``simple`` (Bun & Steinke 2016, Prop. 1.3)::

    eps(rho, delta) = rho + 2*sqrt(rho * ln(1/delta)),
    rho(eps, delta) = (sqrt(ln(1/delta) + eps) - sqrt(ln(1/delta)))**2.

Edge cases: ``rho = 0`` gives ``eps = 0``; ``delta = 0`` gives ``eps = inf`` unless ``rho = 0``.
"""

from __future__ import annotations

import math

from bnsl_cli.errors import PrivacyBudgetError

__all__ = [
    "CONVERSIONS",
    "CONVERSION_DESCRIPTIONS",
    "epsilon_from_rho",
    "epsilon_at_order",
    "optimal_order",
    "rho_for_epsilon",
    "validate_delta",
    "validate_epsilon",
]

#: Names accepted for ``conversion``.
CONVERSIONS = ("tight", "simple")

#: One-line description of each conversion (for reports).
CONVERSION_DESCRIPTIONS = {
    "tight": "tight zCDP -> (eps, delta) conversion of Canonne, Kamath & Steinke (2020)",
    "simple": "simple zCDP -> (eps, delta) conversion of Bun & Steinke (2016): eps = rho + 2 sqrt(rho ln(1/delta))",
}


# ----------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------


def _check_conversion(conversion: str) -> str:
    if conversion not in CONVERSIONS:
        raise PrivacyBudgetError(
            f"unknown zCDP conversion {conversion!r}; use one of: {', '.join(CONVERSIONS)}"
        )
    return conversion


def validate_epsilon(epsilon: float) -> float:
    """Return ``epsilon`` as a float if it is a finite number ``> 0``, else raise PrivacyBudgetError."""
    try:
        eps = float(epsilon)
    except (TypeError, ValueError):
        raise PrivacyBudgetError(f"epsilon must be a number, got {epsilon!r}") from None
    if not (eps > 0 and math.isfinite(eps)):
        raise PrivacyBudgetError(
            f"epsilon must be a finite number > 0, got {epsilon!r}; a smaller epsilon means more privacy "
            "(typical values 0.5 to 50)"
        )
    return eps


def validate_delta(delta: float, allow_zero: bool = False) -> float:
    """Return ``delta`` as a float if ``0 < delta < 1`` (``0 <= delta`` with ``allow_zero``), else raise."""
    try:
        dlt = float(delta)
    except (TypeError, ValueError):
        raise PrivacyBudgetError(f"delta must be a number, got {delta!r}") from None
    low_ok = dlt >= 0 if allow_zero else dlt > 0
    if not (low_ok and dlt < 1):
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise PrivacyBudgetError(
            f"delta must lie in {interval}, got {delta!r}; the usual choice is 1/n_p**2 for the smallest "
            "participant's row count n_p"
        )
    return dlt


def _validate_rho(rho: float) -> float:
    try:
        r = float(rho)
    except (TypeError, ValueError):
        raise PrivacyBudgetError(f"rho must be a number, got {rho!r}") from None
    if not r >= 0:  # also rejects NaN
        raise PrivacyBudgetError(f"rho (zCDP) must be >= 0, got {rho!r}")
    return r


# ----------------------------------------------------------------------------------------------
# tight conversion
# ----------------------------------------------------------------------------------------------


def epsilon_at_order(rho: float, delta: float, alpha: float) -> float:
    """The Canonne–Kamath–Steinke bound at one Renyi order ``alpha > 1`` (not clipped at 0).

    ``alpha*rho + (ln(1/delta) + (alpha-1)*ln(1-1/alpha) - ln(alpha)) / (alpha-1)``; valid for every
    ``alpha > 1``, and :func:`epsilon_from_rho` returns its infimum.
    """
    u = float(alpha) - 1.0
    if not u > 0:
        raise ValueError(f"the Renyi order must be > 1, got {alpha!r}")
    return _objective(u, float(rho), -math.log(float(delta)))


def _objective(u: float, rho: float, log_inv_delta: float) -> float:
    """``f(u)`` with ``u = alpha - 1``, written to avoid cancellation for tiny and huge ``u``."""
    return (1.0 + u) * rho + (log_inv_delta - math.log1p(u)) / u - math.log1p(1.0 / u)


def optimal_order(rho: float, delta: float) -> float:
    """The Renyi order ``alpha* > 1`` at which the tight bound is attained (``rho > 0``, ``0 < delta < 1``).

    ``alpha* = 1 + u*`` with ``u*`` the root of ``rho*u**2 + ln(1+u) = ln(1/delta)``. (For huge ``rho``,
    ``alpha*`` rounds to 1.0 in floating point; the conversion itself works with ``u*`` directly.)
    """
    r = float(rho)
    log_inv_delta = -math.log(float(delta))
    if not (r > 0 and math.isfinite(r) and log_inv_delta > 0):
        raise ValueError("optimal_order needs 0 < rho < inf and 0 < delta < 1")
    return 1.0 + _optimal_u(r, log_inv_delta)


def _optimal_u(rho: float, log_inv_delta: float) -> float:
    """Root ``u* = alpha* - 1`` of ``g(u) = rho*u**2 + ln(1+u) - ln(1/delta)`` (strictly increasing)."""
    from scipy.optimize import brentq

    def g(u: float) -> float:
        return rho * u * u + math.log1p(u) - log_inv_delta

    hi = math.sqrt(log_inv_delta / rho)  # g(hi) = ln(1 + hi) > 0
    lo = 2.0 * log_inv_delta / (1.0 + math.sqrt(1.0 + 4.0 * rho * log_inv_delta))  # g(lo) <= 0
    lo = min(lo, hi)
    if g(lo) >= 0:
        return lo
    if g(hi) <= 0:
        return hi
    return brentq(g, lo, hi, xtol=1e-300, rtol=4 * 2.0**-52, maxiter=500)


def _tight(rho: float, delta: float) -> float:
    log_inv_delta = -math.log(delta)
    u = _optimal_u(rho, log_inv_delta)
    return max(0.0, _objective(u, rho, log_inv_delta))


def _simple(rho: float, delta: float) -> float:
    return rho + 2.0 * math.sqrt(rho * -math.log(delta))


# ----------------------------------------------------------------------------------------------
# public conversions
# ----------------------------------------------------------------------------------------------


def epsilon_from_rho(rho: float, delta: float, conversion: str = "tight") -> float:
    """The ``epsilon`` of ``(epsilon, delta)``-DP implied by ``rho``-zCDP.

    ``conversion`` is ``"tight"`` (Canonne–Kamath–Steinke, the default) or ``"simple"`` (Bun–Steinke
    ``rho + 2 sqrt(rho ln(1/delta))``); see the module docstring for the formulas. ``rho = 0`` gives 0,
    ``rho = inf`` gives ``inf``, ``delta = 0`` gives ``inf`` unless ``rho = 0``.

    Raises PrivacyBudgetError if ``rho < 0`` or ``delta`` is outside ``[0, 1)``.
    """
    _check_conversion(conversion)
    r = _validate_rho(rho)
    dlt = validate_delta(delta, allow_zero=True)
    if r == 0.0:
        return 0.0
    if dlt == 0.0 or math.isinf(r):
        return math.inf
    if conversion == "simple":
        return _simple(r, dlt)
    return _tight(r, dlt)


def rho_for_epsilon(epsilon: float, delta: float, conversion: str = "tight") -> float:
    """The largest ``rho`` such that ``epsilon_from_rho(rho, delta, conversion) <= epsilon``.

    ``simple``: the closed form ``(sqrt(L + eps) - sqrt(L))**2 = (eps / (sqrt(L + eps) + sqrt(L)))**2``
    with ``L = ln(1/delta)``. ``tight``: bisection on ``rho`` (``eps(rho)`` is non-decreasing), started from
    the simple value (the tight conversion is never looser, so the simple ``rho`` is a lower bracket) and
    run until the bracket is as narrow as floating point allows; the returned value always satisfies
    the inequality.

    Raises PrivacyBudgetError unless ``epsilon > 0`` (finite) and ``0 < delta < 1``.
    """
    _check_conversion(conversion)
    eps = validate_epsilon(epsilon)
    dlt = validate_delta(delta)
    log_inv_delta = -math.log(dlt)
    rho_simple = (eps / (math.sqrt(log_inv_delta + eps) + math.sqrt(log_inv_delta))) ** 2
    while rho_simple > 0 and _simple(rho_simple, dlt) > eps:  # undo rounding (a few ulps at most)
        rho_simple = math.nextafter(rho_simple, 0.0)
    if conversion == "simple":
        return rho_simple

    lo = rho_simple
    while _tight(lo, dlt) > eps:  # only by rounding; step down until valid
        lo *= 1.0 - 1e-12
    hi = 2.0 * lo  # grown below until it violates the target
    while _tight(hi, dlt) <= eps:
        lo = hi
        hi *= 2.0
    # invariant: eps(lo) <= eps < eps(hi)
    for _ in range(2000):
        if hi / lo < 2.0:
            mid = lo + 0.5 * (hi - lo)
        else:
            mid = math.sqrt(lo * hi)
        if mid <= lo or mid >= hi:
            break
        if _tight(mid, dlt) <= eps:
            lo = mid
        else:
            hi = mid
    return lo
