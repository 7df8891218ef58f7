"""Calibration of a release list to a target ε under an accountant without a closed-form inverse (PLD).

A release list is built from one budget ``ρ*`` (``build(ρ*)``); every noise multiplier is
``1/√(2·share·ρ*)``, so ``ρ*`` is the common scale factor of all multipliers (multipliers ∝ ρ*^{-1/2}).
The spend ``ε(ρ*)`` read from the list's ledger by the accountant grows with ``ρ*``. The zCDP budget
``ρ*_zCDP`` of (ε, δ) is a lower bracket (the PLD accountant is never above the tight zCDP bound); the
bracket is widened upwards until the spend exceeds ε, then narrowed by regula falsi (Illinois) on
``log ε`` against ``log ρ*`` with a bisection fallback, keeping ``ε(lo) ≤ ε`` throughout. The result
is ``lo``; :func:`~bnsl_cli.privacy.release_plan.calibrate_releases` then verifies it as for zCDP.
"""

from __future__ import annotations

import math
from typing import Callable

__all__ = ["scale_for_epsilon", "SEARCH_RTOL"]

#: The search stops when the bracket on ρ* is this narrow (relative) or the spend is this close to ε.
SEARCH_RTOL = 1e-10
_MAX_EVALUATIONS = 80
_cache: dict = {}


def _shape(build) -> tuple:
    return tuple((r.kind.value, r.mechanism, r.multiplier, r.count, r.split) for r in build(1.0))


def scale_for_epsilon(build: Callable, epsilon: float, delta: float, accountant: str) -> float:
    """The largest ``ρ*`` (to :data:`SEARCH_RTOL`) whose release list ``build(ρ*)`` spends at most
    ``epsilon·(1 − SEARCH_RTOL)`` at ``delta`` by ``accountant``."""
    from bnsl_cli.privacy.accountant import rho_for_epsilon
    from bnsl_cli.privacy.pld import COARSE_DISCRETIZATION, DEFAULT_DISCRETIZATION

    key = (_shape(build), float(epsilon), float(delta), accountant)
    if key in _cache:
        return _cache[key]
    target = float(epsilon) * (1.0 - SEARCH_RTOL)
    lo = rho_for_epsilon(target, delta, "tight")
    # a coarse grid first (cheap, itself an upper bound), then the reporting grid from there
    coarse = _search(build, delta, accountant, target, lo, 1.25, COARSE_DISCRETIZATION, 1e-6)
    result = _search(build, delta, accountant, target, max(lo, coarse), 1.0 + 1e-3, DEFAULT_DISCRETIZATION, SEARCH_RTOL)
    _cache[key] = result
    return result


def _search(build, delta, accountant, target, lo, grow, h, rtol) -> float:
    from bnsl_cli.errors import PrivacyBudgetError
    from bnsl_cli.privacy.pld import accountant_epsilon
    from bnsl_cli.privacy.release_plan import ledger_of

    def spend(rho: float) -> float:
        return accountant_epsilon(ledger_of(build(rho)).events(0), delta, accountant, h=h)

    f_lo = spend(lo)
    while not f_lo <= target:  # the zCDP budget is below target by construction; a coarse one may not be
        lo *= 0.999
        f_lo = spend(lo)
    hi, f_hi = lo * grow, spend(lo * grow)
    n = 2
    while f_hi <= target:
        lo, f_lo = hi, f_hi
        hi *= grow
        f_hi = spend(hi)
        n += 1
        if n > _MAX_EVALUATIONS:
            raise PrivacyBudgetError("could not bracket the noise scale for the target ε; no run was started")
    # invariant: spend(lo) <= target < spend(hi); Illinois on g(x) = log spend(e^x) − log target
    x_lo, x_hi = math.log(lo), math.log(hi)
    g_lo = math.log(max(f_lo, 1e-300)) - math.log(target)
    g_hi = math.log(f_hi) - math.log(target)
    side = 0
    gap = -g_lo  # the true log-gap of lo (g_lo itself is halved by the Illinois step)
    while n < _MAX_EVALUATIONS and (x_hi - x_lo) > rtol and gap > rtol * 1e-2:
        x = x_lo - g_lo * (x_hi - x_lo) / (g_hi - g_lo) if g_hi != g_lo else 0.5 * (x_lo + x_hi)
        if not (x_lo < x < x_hi):
            x = 0.5 * (x_lo + x_hi)
        f = spend(math.exp(x))
        n += 1
        g = math.log(max(f, 1e-300)) - math.log(target)
        if g <= 0:
            x_lo, g_lo, gap = x, g, -g
            if side == -1:
                g_hi *= 0.5
            side = -1
        else:
            x_hi, g_hi = x, g
            if side == 1:
                g_lo *= 0.5
            side = 1
    result = math.exp(x_lo)
    while spend(result) > target:  # exp(log(·)) rounding
        result = math.nextafter(result, 0.0)
    return result
