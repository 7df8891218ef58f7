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

**The accountants** (``--accountant``, a plan's ``accountant``): how a participant's releases compose into
``(epsilon, delta)``, as one :class:`Accountant` each — :class:`ZCDPAccountant` (``zcdp``: ρ adds up, then one
of the conversions above) and :class:`PLDAccountant` (``pld``: privacy-loss distributions,
:mod:`bnsl_cli.privacy.pld`, capped by the tight zCDP bound). A name is looked up once
(:func:`get_accountant`); the ledger, the release plan's calibration and ``privacy-budget`` call the
object: :meth:`~Accountant.epsilon` (one participant), :meth:`~Accountant.largest` (a run: participants
hold disjoint rows), :meth:`~Accountant.scale_for_epsilon` (the inverse the calibration needs).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Optional, Sequence, Union

from bnsl_cli.errors import OptionError, PrivacyBudgetError
from bnsl_cli.privacy.limits import validate_epsilon
from bnsl_cli.privacy.pld import COARSE_DISCRETIZATION, DEFAULT_DISCRETIZATION, SKIP_MARGIN, epsilon_of_events, grid_fits

__all__ = [
    "Accountant",
    "ZCDPAccountant",
    "PLDAccountant",
    "ACCOUNTANTS",
    "ACCOUNTANT_DESCRIPTIONS",
    "get_accountant",
    "accountant_option",
    "check_accountant",
    "accountant_epsilon",
    "CONVERSIONS",
    "CONVERSION_DESCRIPTIONS",
    "epsilon_from_rho",
    "epsilon_at_order",
    "optimal_order",
    "rho_for_epsilon",
    "validate_delta",
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


def _step_down(x: float, ok) -> float:
    """The largest of ``x`` and a few values just below it for which ``ok`` holds: undoes the rounding
    of a closed form in at most 64 ulp steps, then in relative steps (bounded time for any input)."""
    for _ in range(64):
        if x <= 0 or ok(x):
            return x
        x = math.nextafter(x, 0.0)
    while x > 0 and not ok(x):
        x *= 1.0 - 1e-9
    return x


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
    rho_simple = _step_down(rho_simple, lambda r: _simple(r, dlt) <= eps)  # undo rounding (a few ulps at most)
    if not rho_simple > 0:
        # ρ ≈ ε²/(4 ln(1/δ)) underflows to 0 (ε below about 1e-160)
        if conversion == "simple":
            raise PrivacyBudgetError(
                f"--epsilon {eps:g} is too small for the simple conversion: its zCDP budget ρ underflows to 0 in "
                f"floating point at δ = {dlt:g} (ε must be at least about 1e-160)"
            )
        # the tight conversion gives ε ≈ 0 for every ρ small enough against δ: start the search at a tiny ρ
        rho_simple = 1e-300
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


# ----------------------------------------------------------------------------------------------
# the accountants
# ----------------------------------------------------------------------------------------------


def _rho_of(events) -> float:
    """The zCDP spend of one participant's events: their ρ summed (``inf`` when one is)."""
    events = list(events)
    return math.fsum(ev.rho for ev in events) if not any(math.isinf(ev.rho) for ev in events) else math.inf


class Accountant:
    """How a release list's spend is read: one participant's ledger events composed into ε at δ.

    ``name`` is what a plan, a report and ``--accountant`` say; ``description`` and ``composition`` are
    the report's ``accountant_description`` and ``composition``; ``uses_conversion`` says whether the
    zCDP → (ε, δ) conversion choice changes the answer."""

    name: str = ""
    description: str = ""
    composition: str = ""
    uses_conversion: bool = False

    def label(self, conversion: str) -> str:
        """What the accountant is, in a table's row (``privacy-budget``)."""
        raise NotImplementedError

    def spend_note(self, conversion: str) -> str:
        """How an ε it read was obtained: ``"pld accountant"``, ``"zcdp accountant, tight conversion"``."""
        return f"{self.name} accountant" + (f", {conversion} conversion" if self.uses_conversion else "")

    def epsilon(self, events, delta: float, conversion: str = "tight", h: float = DEFAULT_DISCRETIZATION) -> float:
        """ε at ``delta`` of one participant's ``events`` (ledger :class:`~bnsl_cli.privacy.ledger.PrivacyEvent` s)."""
        raise NotImplementedError

    def largest(self, rhos: Iterable[float], epsilons: Iterable[float], delta: float, conversion: str = "tight") -> float:
        """The run's ε from its participants' ρ and ε (in the same order; participants hold disjoint rows,
        so the run's guarantee is its largest participant's). ``epsilons`` may be a generator: an
        accountant that needs only the ρ does not run it."""
        raise NotImplementedError

    def run_epsilon(self, participants: Iterable, delta: float, conversion: str = "tight") -> float:
        """The run's ε at ``delta``, ``participants`` the events of each participant."""
        parts = [list(events) for events in participants]
        return self.largest((_rho_of(events) for events in parts),
                            (self.epsilon(events, delta, conversion) for events in parts), delta, conversion)

    def scale_for_epsilon(self, spend: Callable[[float, float], float], epsilon: float, delta: float,
                          conversion: str = "tight", key: Optional[Callable[[], tuple]] = None) -> float:
        """The largest ``ρ*`` whose releases spend at most ``epsilon`` at ``delta``, every multiplier of a
        release list scaling as ``1/√ρ*``: ``spend(ρ*, h)`` is the ε (by this accountant, on the loss grid
        ``h`` where it has one) of the list calibrated to ``ρ*``; ``key()`` names the list's shape for a
        cache (``None``: no cache)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ZCDPAccountant(Accountant):
    """``zcdp``: ρ adds over a participant's releases and is converted to (ε, δ) with the conversion
    (:func:`epsilon_from_rho`); its inverse is closed (:func:`rho_for_epsilon`)."""

    name = "zcdp"
    description = "zCDP: rho adds over releases, converted to (epsilon, delta)"
    composition = ("zCDP adds over releases; the run's guarantee is the largest participant's spend "
                   "(participants hold disjoint rows)")
    uses_conversion = True

    def label(self, conversion: str) -> str:
        return f"zCDP, {conversion} conversion"

    def epsilon(self, events, delta, conversion="tight", h=DEFAULT_DISCRETIZATION) -> float:
        return epsilon_from_rho(_rho_of(events), delta, conversion)

    def largest(self, rhos, epsilons, delta, conversion="tight") -> float:
        return epsilon_from_rho(max(rhos, default=0.0), delta, conversion)

    def scale_for_epsilon(self, spend, epsilon, delta, conversion="tight", key=None) -> float:
        return rho_for_epsilon(epsilon, delta, conversion)


#: The PLD calibration's search stops when the bracket on ρ* is this narrow (relative) or the spend
#: is this close to ε (see :meth:`PLDAccountant.scale_for_epsilon`).
SEARCH_RTOL = 1e-10
_MAX_EVALUATIONS = 80
_scales: dict = {}  # (shape, ε, δ, accountant) -> ρ*


class PLDAccountant(Accountant):
    """``pld``: the privacy-loss distributions of a participant's events composed numerically
    (:func:`bnsl_cli.privacy.pld.epsilon_of_events`), and the smaller of that and the tight zCDP bound —
    both are upper bounds for the same releases, so their minimum is one too. (For many bounded-range
    selections the PLD of the pair that dominates *every* selection is looser than their zCDP cost
    ε₀²/8 each: a pair that is worst for each ε separately composes worse than any single selection
    does; see docs/privacy.md.) Its inverse is a search (:meth:`scale_for_epsilon`)."""

    name = "pld"
    description = ("privacy-loss distributions: each release's worst-case pair (Gaussian; bounded-range pair of the "
                   "Gumbel-max selection) discretised pessimistically and composed numerically (FFT), epsilon read at "
                   "delta; the smaller of that and the zCDP bound (tight conversion), both upper bounds")
    composition = ("privacy-loss distributions compose by convolution over a participant's releases; the "
                   "run's guarantee is the largest participant's epsilon (participants hold disjoint rows)")
    uses_conversion = False

    def label(self, conversion: str) -> str:
        return "privacy-loss distributions"

    def epsilon(self, events, delta, conversion="tight", h=DEFAULT_DISCRETIZATION) -> float:
        """The conversion does not enter: the cap is the tight zCDP bound."""
        events = list(events)
        z = epsilon_from_rho(_rho_of(events), delta, "tight")
        if not grid_fits(events, h):
            return z  # a very large ε: the losses' grid would not fit (see pld.MAX_CELLS); the zCDP bound holds
        if h < COARSE_DISCRETIZATION and epsilon_of_events(events, delta, COARSE_DISCRETIZATION) > z * (1 + SKIP_MARGIN):
            return z  # the PLD will not win here (a coarse grid is far above zCDP): skip the fine grid
        return min(epsilon_of_events(events, delta, h), z)

    def largest(self, rhos, epsilons, delta, conversion="tight") -> float:
        return max(epsilons, default=0.0)

    # Every multiplier is 1/√(2·share·ρ*), so ρ* is the common scale factor of all of them (multipliers
    # ∝ ρ*^{-1/2}). The spend ε(ρ*) grows with ρ*; the zCDP ρ* of (ε, δ) is a lower bracket (the PLD
    # accountant is never above the tight zCDP bound). The bracket is widened upwards until the spend
    # exceeds ε, then narrowed by regula falsi (Illinois) on log ε against log ρ* with a bisection
    # fallback, keeping ε(lo) ≤ ε; first on a coarse grid, then on the reporting one. The calibration
    # (:func:`bnsl_cli.privacy.release_plan.calibrate_releases`) then verifies the result.

    def scale_for_epsilon(self, spend, epsilon, delta, conversion="tight", key=None) -> float:
        """The largest ``ρ*`` (to :data:`SEARCH_RTOL`) whose releases spend at most
        ``epsilon·(1 − SEARCH_RTOL)`` at ``delta``. Like :func:`rho_for_epsilon` (the zCDP inverse) it
        refuses ε and δ outside its domain (PrivacyBudgetError): a library caller may reach it with
        values no option check has seen."""
        epsilon, delta = validate_epsilon(epsilon), validate_delta(delta)
        cache = None if key is None else (key(), float(epsilon), float(delta), self.name)
        if cache is not None and cache in _scales:
            return _scales[cache]
        target = float(epsilon) * (1.0 - SEARCH_RTOL)
        lo = rho_for_epsilon(target, delta, "tight")
        # a coarse grid first (cheap, itself an upper bound), then the reporting grid from there
        coarse = _search(spend, target, lo, 1.25, COARSE_DISCRETIZATION, 1e-6)
        result = _search(spend, target, max(lo, coarse), 1.0 + 1e-3, DEFAULT_DISCRETIZATION, SEARCH_RTOL)
        if cache is not None:
            _scales[cache] = result
        return result


def _search(spend_at, target, lo, grow, h, rtol) -> float:
    def spend(rho: float) -> float:
        return spend_at(rho, h)

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
    return _step_down(math.exp(x_lo), lambda r: spend(r) <= target)  # exp(log(·)) rounding


#: The accountants, the first the default of ``--accountant``.
_ACCOUNTANTS = (PLDAccountant(), ZCDPAccountant())
#: Their names, in that order: what ``--accountant`` and a plan's ``accountant`` accept.
ACCOUNTANTS = tuple(a.name for a in _ACCOUNTANTS)
#: One-line description of each (for reports).
ACCOUNTANT_DESCRIPTIONS = {a.name: a.description for a in _ACCOUNTANTS}
_BY_NAME = {a.name: a for a in _ACCOUNTANTS}


def get_accountant(accountant: Union[str, Accountant]) -> Accountant:
    """The accountant named ``accountant`` (an :class:`Accountant` is returned as it is); ValueError
    naming the choices when there is none of that name."""
    if isinstance(accountant, Accountant):
        return accountant
    try:
        return _BY_NAME[accountant]
    except (KeyError, TypeError):
        raise ValueError(f"unknown accountant {accountant!r}; use one of: {', '.join(ACCOUNTANTS)}") from None


def accountant_option(accountant: str) -> Accountant:
    """``--accountant``'s value as an :class:`Accountant`; :class:`OptionError` naming the choices."""
    try:
        return get_accountant(accountant)
    except ValueError:
        raise OptionError(f"--accountant: unknown accountant {accountant!r}; use {' or '.join(ACCOUNTANTS)}") from None


def check_accountant(accountant: str) -> str:
    """``accountant`` if it names one of :data:`ACCOUNTANTS`, else ValueError."""
    return get_accountant(accountant).name


def accountant_epsilon(
    events: Sequence, delta: float, accountant: Union[str, Accountant], conversion: str = "tight",
    h: float = DEFAULT_DISCRETIZATION,
) -> float:
    """ε at ``delta`` of one participant's ``events`` by ``accountant`` (:meth:`Accountant.epsilon`)."""
    return get_accountant(accountant).epsilon(events, delta, conversion, h)
