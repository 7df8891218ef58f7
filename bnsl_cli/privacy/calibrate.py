"""Calibrating the DP noise to a target ``(epsilon, delta)`` and the reverse direction (noise -> spend).

DP-Fed-Sparse-BNSL (DP-PGCD inside the federated ADMM). Each participant runs ``T`` DP-PGCD steps in
each of ``K`` rounds and makes two one-off Gaussian releases (second moments, column means). With the
zCDP budget ``rho* = rho_for_epsilon(epsilon, delta)``::

    rho_M    = moment_share * rho*            (second moments m_i, once)
    rho_mean = mean_share   * rho*            (column means, once; 0 when the means are public)
    rho_pol  = polish_share * rho*            (second moments for the polish, once after the rounds; 0: no polish)
    rho_it   = (rho* - rho_M - rho_mean - rho_pol) / (K * T)     (per DP-PGCD step)
    rho_sel  = a * rho_it,   rho_upd = (1 - a) * rho_it      (a = selection share)

Noise is expressed as multipliers of the (data-independent) sensitivities, so that the plan holds
for any clipping level:

    Gumbel scale    b / Delta_S = 1 / sqrt(2 rho_sel)      (exponential mechanism, rho = Delta_S**2/(2 b**2))
    Gaussian std    sigma / Delta = 1 / sqrt(2 rho_upd)    (noisy coordinate update)
    one-off         sigma_M / Delta_M = 1 / sqrt(2 rho_M),  sigma_mean / Delta_mean = 1 / sqrt(2 rho_mean)

With ``a = 1/2`` both per-step multipliers equal ``sqrt(K * T / (rho* - rho_M - rho_mean))``.
A participant's total spend is ``rho_M + rho_mean + K*T*(rho_sel + rho_upd) = rho*``.

DP-Fed-BNSL (baseline): one Gaussian release of ``X_p^T X_p`` with rows clipped to L2 norm ``C_x``;
replace-one sensitivity ``||x x^T - y y^T||_F <= sqrt(2) * C_x**2``; the whole budget (minus an optional
mean-release share) goes to it: ``sigma / Delta = 1 / sqrt(2 (1 - mean_share) rho*)``.

The spend is always computed by building the ledger of the releases and reading it with the accountant,
exactly as ``learn --dp`` does, so both report the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional, Union

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.privacy.accountant import (
    epsilon_from_rho,
    rho_for_epsilon,
    validate_delta,
    validate_epsilon,
)
from bnsl_cli.privacy.defaults import MEAN_SHARE, MOMENT_SHARE, SELECTION_SHARE
from bnsl_cli.privacy.ledger import EXPONENTIAL, GAUSSIAN, PrivacyEvent, PrivacyLedger
from bnsl_cli.privacy.releases import ReleaseKind

__all__ = [
    "RELEASE_MEANS",
    "RELEASE_MOMENTS",
    "RELEASE_SELECTION",
    "RELEASE_UPDATE",
    "RELEASE_COVARIANCE",
    "RELEASE_POLISH",
    "NoiseMultipliers",
    "NoisePlan",
    "CovariancePlan",
    "calibrate",
    "calibrate_covariance",
    "plan_covariance",
    "covariance_sensitivity",
    "multiplier_for_rho",
    "rho_for_multiplier",
    "ledger_for",
    "spend",
    "spend_from_noise",
    "spend_covariance",
]

RELEASE_MEANS = ReleaseKind.COLUMN_MEANS
RELEASE_MOMENTS = ReleaseKind.SECOND_MOMENTS
RELEASE_SELECTION = ReleaseKind.SELECTION
RELEASE_UPDATE = ReleaseKind.UPDATE
RELEASE_COVARIANCE = ReleaseKind.COVARIANCE
RELEASE_POLISH = ReleaseKind.POLISH


# ----------------------------------------------------------------------------------------------
# small helpers
# ----------------------------------------------------------------------------------------------


def multiplier_for_rho(rho: float) -> float:
    """Noise-to-sensitivity ratio of a release costing ``rho`` zCDP: ``1 / sqrt(2 rho)``."""
    if not rho > 0:
        raise PrivacyBudgetError(f"a release needs a zCDP budget > 0, got {rho!r}")
    return 1.0 / math.sqrt(2.0 * rho)


def rho_for_multiplier(multiplier: float) -> float:
    """zCDP cost of a release whose noise is ``multiplier`` times its sensitivity: ``1 / (2 m**2)``."""
    if not multiplier > 0:
        raise PrivacyBudgetError(f"noise multipliers must be > 0, got {multiplier!r}")
    return 0.5 / (float(multiplier) ** 2)


def covariance_sensitivity(clip_norm: float) -> float:
    """Replace-one L2 (Frobenius) sensitivity of ``X^T X`` with rows clipped to norm ``C_x``: ``sqrt(2) C_x**2``.

    ``||x x^T - y y^T||_F**2 = ||x||**4 + ||y||**4 - 2 (x^T y)**2 <= 2 C_x**4``. It also bounds the
    sensitivity of the upper triangle (with diagonal) that the symmetric noise is drawn for.
    """
    if not clip_norm > 0:
        raise PrivacyBudgetError(f"the row clipping norm C_x must be > 0, got {clip_norm!r}")
    return math.sqrt(2.0) * float(clip_norm) ** 2


def _check_count(name: str, value) -> int:
    try:
        whole = not isinstance(value, bool) and float(value).is_integer()
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole:
        raise PrivacyBudgetError(f"{name} must be a whole number >= 1, got {value!r}")
    v = int(value)
    if v < 1:
        raise PrivacyBudgetError(f"{name} must be >= 1, got {value!r}")
    return v


def _check_share(name: str, value: float, *, open_low: bool = False) -> float:
    v = float(value)
    ok = (v > 0 if open_low else v >= 0) and v < 1
    if not ok:
        interval = "(0, 1)" if open_low else "[0, 1)"
        raise PrivacyBudgetError(f"{name} must lie in {interval}, got {value!r}")
    return v


def _check_conversion(conversion: str) -> str:
    from bnsl_cli.privacy.accountant import CONVERSIONS

    if conversion not in CONVERSIONS:
        raise PrivacyBudgetError(f"unknown zCDP conversion {conversion!r}; use one of: {', '.join(CONVERSIONS)}")
    return conversion


# ----------------------------------------------------------------------------------------------
# multipliers and the ledger they imply
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoiseMultipliers:
    """Noise of DP-Fed-Sparse-BNSL as multiples of the sensitivities.

    ``gumbel`` = ``b / Delta_S`` (selection), ``sigma`` = ``sigma / Delta`` (update), ``moment`` and ``mean``
    the ``sigma / Delta`` of the one-off releases, ``polish`` that of the polish's second moments
    (``None``: that release is not made / not counted).
    """

    gumbel: float
    sigma: float
    moment: Optional[float] = None
    mean: Optional[float] = None
    polish: Optional[float] = None

    def __post_init__(self) -> None:
        for name in ("gumbel", "sigma"):
            v = getattr(self, name)
            if not (v is not None and v > 0):
                raise PrivacyBudgetError(f"the {name} noise multiplier must be > 0, got {v!r}")
        for name in ("moment", "mean", "polish"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise PrivacyBudgetError(f"the {name} noise multiplier must be > 0 (or absent), got {v!r}")


def ledger_for(
    multipliers: NoiseMultipliers, rounds: int, steps: int, participant_ids: Iterable[int] = (0,)
) -> PrivacyLedger:
    """Ledger of the releases a participant makes with these multipliers over ``rounds x steps`` steps.

    Unit sensitivities are used (``rho`` depends only on ``noise / sensitivity``).
    """
    k = _check_count("rounds", rounds)
    t = _check_count("steps", steps)
    events = []
    if multipliers.moment is not None:
        events.append(PrivacyEvent(RELEASE_MOMENTS, GAUSSIAN, 1.0, multipliers.moment, 1))
    if multipliers.mean is not None:
        events.append(PrivacyEvent(RELEASE_MEANS, GAUSSIAN, 1.0, multipliers.mean, 1))
    events.append(PrivacyEvent(RELEASE_SELECTION, EXPONENTIAL, 1.0, multipliers.gumbel, k * t))
    events.append(PrivacyEvent(RELEASE_UPDATE, GAUSSIAN, 1.0, multipliers.sigma, k * t))
    if multipliers.polish is not None:
        events.append(PrivacyEvent(RELEASE_POLISH, GAUSSIAN, 1.0, multipliers.polish, 1))
    ledger = PrivacyLedger()
    for p in participant_ids:
        ledger.add_participant(p)
        for ev in events:
            ledger.record(p, ev)
    return ledger


# ----------------------------------------------------------------------------------------------
# DP-Fed-Sparse-BNSL
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoisePlan:
    """The noise that spends exactly a target ``(epsilon, delta)`` over ``rounds x steps`` DP-PGCD steps.

    Budgets are zCDP ``rho``; multipliers are noise / sensitivity (see the module docstring).
    ``mean_multiplier`` is ``None`` when ``mean_share == 0`` (public means, no release); likewise
    ``moment_multiplier`` when ``moment_share == 0``.
    """

    epsilon: float
    delta: float
    conversion: str
    rounds: int
    steps: int
    selection_share: float
    moment_share: float
    mean_share: float
    rho_total: float  # rho*
    rho_moments: float  # rho_M
    rho_means: float  # rho_mean
    rho_iterations: float  # rho* - rho_M - rho_mean - rho_pol, spread over K*T steps
    rho_step: float  # rho_it
    rho_selection: float  # per step
    rho_update: float  # per step
    gumbel_multiplier: float  # b / Delta_S
    sigma_multiplier: float  # sigma / Delta
    moment_multiplier: Optional[float]
    mean_multiplier: Optional[float]
    polish_share: float = 0.0
    rho_polish: float = 0.0  # the polish's second-moment release, once after the rounds
    polish_multiplier: Optional[float] = None

    @property
    def multipliers(self) -> NoiseMultipliers:
        """The multipliers (what ``learn --dp`` uses)."""
        return NoiseMultipliers(
            self.gumbel_multiplier, self.sigma_multiplier, self.moment_multiplier, self.mean_multiplier,
            self.polish_multiplier,
        )

    @property
    def selection_epsilon(self) -> float:
        """Pure-DP ``eps_s = 2 Delta_S / b`` of one selection (``rho_sel = eps_s**2 / 8``)."""
        return 2.0 / self.gumbel_multiplier

    def planned_ledger(self, participant_ids: Iterable[int] = (0,)) -> PrivacyLedger:
        """The ledger of a full run (all ``K x T`` steps) for each participant, with unit sensitivities."""
        return ledger_for(self.multipliers, self.rounds, self.steps, participant_ids)

    def to_dict(self) -> dict:
        """JSON-ready fields."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho_total,
            "conversion": self.conversion,
            "rounds": self.rounds,
            "steps": self.steps,
            "selection_share": self.selection_share,
            "moment_share": self.moment_share,
            "mean_share": self.mean_share,
            "rho_moments": self.rho_moments,
            "rho_means": self.rho_means,
            "rho_iterations": self.rho_iterations,
            "rho_per_step": self.rho_step,
            "rho_selection_per_step": self.rho_selection,
            "rho_update_per_step": self.rho_update,
            "gumbel_multiplier": self.gumbel_multiplier,
            "sigma_multiplier": self.sigma_multiplier,
            "moment_multiplier": self.moment_multiplier,
            "mean_multiplier": self.mean_multiplier,
            "polish_share": self.polish_share,
            "rho_polish": self.rho_polish,
            "polish_multiplier": self.polish_multiplier,
            "selection_epsilon_per_step": self.selection_epsilon,
        }


def calibrate(
    epsilon: float,
    delta: float,
    rounds: int,
    steps: int,
    selection_share: float = SELECTION_SHARE,
    moment_share: float = MOMENT_SHARE,
    mean_share: float = MEAN_SHARE,
    conversion: str = "tight",
    polish_share: float = 0.0,
) -> NoisePlan:
    """Noise multipliers of DP-Fed-Sparse-BNSL for a target ``(epsilon, delta)``.

    ``rho* = rho_for_epsilon(epsilon, delta, conversion)``; ``rho_M = moment_share rho*``;
    ``rho_mean = mean_share rho*`` (pass ``mean_share=0`` when the means are public);
    ``rho_pol = polish_share rho*`` (the polish's second moments; ``learn --dp`` uses
    ``defaults.POLISH_SHARE``, 0 with ``--no-polish``);
    ``rho_it = (rho* - rho_M - rho_mean - rho_pol) / (K T)``; ``rho_sel = a rho_it``, ``rho_upd = (1 - a) rho_it``;
    ``b / Delta_S = 1 / sqrt(2 rho_sel)``, ``sigma / Delta = 1 / sqrt(2 rho_upd)``,
    one-off ``sigma / Delta = 1 / sqrt(2 rho_M)`` and ``1 / sqrt(2 rho_mean)``.

    Raises PrivacyBudgetError if ``epsilon <= 0``, ``delta`` is not in ``(0, 1)``, ``rounds`` or ``steps``
    is < 1, the selection share is not in ``(0, 1)``, a one-off share is not in ``[0, 1)``, or the
    one-off shares together leave nothing for the iterations (``moment_share + mean_share >= 1``).
    """
    eps = validate_epsilon(epsilon)
    dlt = validate_delta(delta)
    _check_conversion(conversion)
    k = _check_count("rounds", rounds)
    t = _check_count("steps", steps)
    a = _check_share("the selection share", selection_share, open_low=True)
    s_m = _check_share("the second-moment share", moment_share)
    s_mean = _check_share("the mean share", mean_share)
    s_pol = _check_share("the polish share", polish_share)
    left = 1.0 - s_m - s_mean - s_pol
    if not left > 0:
        raise PrivacyBudgetError(
            f"the one-off releases take the whole budget (second-moment share {s_m:g} + mean share "
            f"{s_mean:g} + polish share {s_pol:g} >= 1), leaving nothing for the {k} x {t} DP-PGCD steps; "
            "lower the shares"
        )
    rho_star = rho_for_epsilon(eps, dlt, conversion)
    # Rounding in the multipliers can push the recomputed spend a few ulps above epsilon; shave rho*
    # by a few ulps until the plan's own ledger stays within the target.
    for attempt in range(64):
        plan = _plan(eps, dlt, conversion, k, t, a, s_m, s_mean, rho_star, s_pol)
        if spend(plan)[0] <= eps:
            return plan
        rho_star *= 1.0 - 2.0 ** (attempt - 52)
    raise PrivacyBudgetError(
        f"could not verify a noise plan within epsilon = {eps:g} after 64 attempts; no plan is returned"
    )


def _plan(eps, dlt, conversion, k, t, a, s_m, s_mean, rho_star, s_pol=0.0) -> NoisePlan:
    rho_m = s_m * rho_star
    rho_mean = s_mean * rho_star
    rho_pol = s_pol * rho_star
    rho_iter = rho_star - rho_m - rho_mean - rho_pol
    rho_step = rho_iter / (k * t)
    rho_sel = a * rho_step
    rho_upd = (1.0 - a) * rho_step
    if (s_m > 0 and not rho_m > 0) or (s_mean > 0 and not rho_mean > 0) or (s_pol > 0 and not rho_pol > 0):
        raise PrivacyBudgetError(
            f"a one-off share is too small to fund its release (second-moment share {s_m:g}, mean share "
            f"{s_mean:g}); use 0 for no release or a larger share"
        )
    if not (rho_sel > 0 and rho_upd > 0):
        raise PrivacyBudgetError(
            f"the per-step budget underflows (rho per step = {rho_step:.3g}); use fewer rounds or steps"
        )
    return NoisePlan(
        epsilon=eps,
        delta=dlt,
        conversion=conversion,
        rounds=k,
        steps=t,
        selection_share=a,
        moment_share=s_m,
        mean_share=s_mean,
        rho_total=rho_star,
        rho_moments=rho_m,
        rho_means=rho_mean,
        rho_iterations=rho_iter,
        rho_step=rho_step,
        rho_selection=rho_sel,
        rho_update=rho_upd,
        gumbel_multiplier=multiplier_for_rho(rho_sel),
        sigma_multiplier=multiplier_for_rho(rho_upd),
        moment_multiplier=multiplier_for_rho(rho_m) if s_m > 0 else None,
        mean_multiplier=multiplier_for_rho(rho_mean) if s_mean > 0 else None,
        polish_share=s_pol,
        rho_polish=rho_pol,
        polish_multiplier=multiplier_for_rho(rho_pol) if s_pol > 0 else None,
    )


def spend(
    plan: Union[NoisePlan, NoiseMultipliers],
    rounds: Optional[int] = None,
    steps: Optional[int] = None,
    delta: Optional[float] = None,
    conversion: Optional[str] = None,
) -> tuple[float, float]:
    """``(epsilon, rho)`` spent by a participant using ``plan``'s noise for ``rounds x steps`` steps.

    For a :class:`NoisePlan` the arguments default to the plan's own (so ``spend(calibrate(eps, ...))``
    returns ``eps``); fewer rounds (an early stop) spend less. For :class:`NoiseMultipliers`,
    ``rounds``, ``steps`` and ``delta`` are required. ``rho = rho_M + rho_mean + K T (rho_sel + rho_upd)``,
    read from the ledger of those releases; ``epsilon = epsilon_from_rho(rho, delta, conversion)``.
    """
    if isinstance(plan, NoisePlan):
        mult = plan.multipliers
        rounds = plan.rounds if rounds is None else rounds
        steps = plan.steps if steps is None else steps
        delta = plan.delta if delta is None else delta
        conversion = plan.conversion if conversion is None else conversion
    elif isinstance(plan, NoiseMultipliers):
        mult = plan
        if rounds is None or steps is None or delta is None:
            raise PrivacyBudgetError("rounds, steps and delta are needed to account for given noise multipliers")
    else:
        raise TypeError(f"expected a NoisePlan or NoiseMultipliers, got {type(plan).__name__}")
    conversion = "tight" if conversion is None else _check_conversion(conversion)
    dlt = validate_delta(delta)
    rho = ledger_for(mult, rounds, steps).max_rho()
    return epsilon_from_rho(rho, dlt, conversion), rho


def spend_from_noise(
    gumbel_multiplier: float,
    sigma_multiplier: float,
    rounds: int,
    steps: int,
    moment_multiplier: Optional[float] = None,
    mean_multiplier: Optional[float] = None,
    delta: float = None,  # type: ignore[assignment]
    conversion: str = "tight",
    polish_multiplier: Optional[float] = None,
) -> tuple[float, float]:
    """``(epsilon, rho)`` spent with the given noise multipliers (the "noise -> spend" direction).

    ``rho = 1/(2 G**2) * K T + 1/(2 S**2) * K T + 1/(2 M**2) + 1/(2 Mean**2) + 1/(2 Pol**2)`` (absent
    one-off releases count 0); ``delta`` is required.
    """
    if delta is None:
        raise PrivacyBudgetError("delta is needed to convert the spend to (epsilon, delta)")
    mult = NoiseMultipliers(gumbel_multiplier, sigma_multiplier, moment_multiplier, mean_multiplier, polish_multiplier)
    return spend(mult, rounds, steps, delta, conversion)


# ----------------------------------------------------------------------------------------------
# DP-Fed-BNSL
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CovariancePlan:
    """DP-Fed-BNSL noise: one Gaussian release of ``X_p^T X_p`` (and optionally of the column means).

    ``sigma_multiplier = sigma / Delta`` with ``Delta = sqrt(2) C_x**2`` (see :func:`covariance_sensitivity`).
    """

    epsilon: float
    delta: float
    conversion: str
    mean_share: float
    rho_total: float
    rho_covariance: float
    rho_means: float
    sigma_multiplier: float
    mean_multiplier: Optional[float]

    def planned_ledger(self, participant_ids: Iterable[int] = (0,)) -> PrivacyLedger:
        """Ledger of the release(s) for each participant, with unit sensitivities."""
        ledger = PrivacyLedger()
        for p in participant_ids:
            ledger.add_participant(p)
            if self.mean_multiplier is not None:
                ledger.record(p, PrivacyEvent(RELEASE_MEANS, GAUSSIAN, 1.0, self.mean_multiplier, 1))
            ledger.record(p, PrivacyEvent(RELEASE_COVARIANCE, GAUSSIAN, 1.0, self.sigma_multiplier, 1))
        return ledger

    def to_dict(self) -> dict:
        """JSON-ready fields."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho_total,
            "conversion": self.conversion,
            "mean_share": self.mean_share,
            "rho_covariance": self.rho_covariance,
            "rho_means": self.rho_means,
            "sigma_multiplier": self.sigma_multiplier,
            "mean_multiplier": self.mean_multiplier,
            "covariance_sensitivity": "sqrt(2) * C_x**2 (rows clipped to L2 norm C_x, replace-one)",
        }


def plan_covariance(
    epsilon: float, delta: float, conversion: str = "tight", mean_share: float = 0.0
) -> CovariancePlan:
    """DP-Fed-BNSL calibration: ``rho* = rho_for_epsilon(epsilon, delta)``, ``rho_mean = mean_share rho*``,
    ``rho_cov = rho* - rho_mean``, ``sigma / Delta = 1 / sqrt(2 rho_cov)``.
    """
    eps = validate_epsilon(epsilon)
    dlt = validate_delta(delta)
    _check_conversion(conversion)
    s_mean = _check_share("the mean share", mean_share)
    rho_star = rho_for_epsilon(eps, dlt, conversion)
    for attempt in range(64):  # keep the recomputed spend within epsilon despite rounding
        plan = _covariance_plan(eps, dlt, conversion, s_mean, rho_star)
        if spend_covariance(plan.sigma_multiplier, dlt, plan.mean_multiplier, conversion)[0] <= eps:
            break
        rho_star *= 1.0 - 2.0 ** (attempt - 52)
    else:
        raise PrivacyBudgetError(
            f"could not verify a noise plan within epsilon = {eps:g} after 64 attempts; no plan is returned"
        )
    return plan


def _covariance_plan(eps, dlt, conversion, s_mean, rho_star) -> CovariancePlan:
    rho_mean = s_mean * rho_star
    rho_cov = rho_star - rho_mean
    return CovariancePlan(
        epsilon=eps,
        delta=dlt,
        conversion=conversion,
        mean_share=s_mean,
        rho_total=rho_star,
        rho_covariance=rho_cov,
        rho_means=rho_mean,
        sigma_multiplier=multiplier_for_rho(rho_cov),
        mean_multiplier=multiplier_for_rho(rho_mean) if s_mean > 0 else None,
    )


def calibrate_covariance(
    epsilon: float, delta: float, conversion: str = "tight", mean_share: float = 0.0
) -> float:
    """``sigma / Delta`` for one Gaussian release of ``X^T X`` spending ``(1 - mean_share)`` of the budget.

    ``sigma / Delta = 1 / sqrt(2 (1 - mean_share) rho*)``, ``Delta = sqrt(2) C_x**2``. See
    :func:`plan_covariance` for the full plan.
    """
    return plan_covariance(epsilon, delta, conversion, mean_share).sigma_multiplier


def spend_covariance(
    sigma_multiplier: float,
    delta: float,
    mean_multiplier: Optional[float] = None,
    conversion: str = "tight",
) -> tuple[float, float]:
    """``(epsilon, rho)`` of DP-Fed-BNSL's release(s): ``rho = 1/(2 S**2) + 1/(2 Mean**2)``."""
    dlt = validate_delta(delta)
    _check_conversion(conversion)
    ledger = PrivacyLedger()
    ledger.record(0, PrivacyEvent(RELEASE_COVARIANCE, GAUSSIAN, 1.0, _positive("sigma", sigma_multiplier), 1))
    if mean_multiplier is not None:
        ledger.record(0, PrivacyEvent(RELEASE_MEANS, GAUSSIAN, 1.0, _positive("mean", mean_multiplier), 1))
    rho = ledger.max_rho()
    return epsilon_from_rho(rho, dlt, conversion), rho


def _positive(name: str, v: float) -> float:
    if not (v is not None and v > 0):
        raise PrivacyBudgetError(f"the {name} noise multiplier must be > 0, got {v!r}")
    return float(v)


# ----------------------------------------------------------------------------------------------
# One-off releases as learn --dp makes them (shared with privacy-budget so both print the same)
# ----------------------------------------------------------------------------------------------

from bnsl_cli.privacy.release_plan import RANGE_FRACTION, one_off_releases  # noqa: E402  (one definition)


def dp_fed_bnsl_plan(epsilon: float, delta: float, conversion: str = "tight", public_means: bool = False) -> CovariancePlan:
    """DP-Fed-BNSL as ``learn --dp --method fed-bnsl`` runs it: the one-off releases (means unless
    public, second moments for the row clip norm) take ``MEAN_SHARE + MOMENT_SHARE`` of ρ*, the
    covariance the rest. ``plan.rho_means`` is the one-off total; split it with
    :func:`dp_fed_bnsl_one_offs`."""
    share = (0.0 if public_means else MEAN_SHARE) + MOMENT_SHARE
    return plan_covariance(epsilon, delta, conversion, mean_share=share)


def dp_fed_bnsl_split(plan: CovariancePlan, public_means: bool) -> tuple[float, float]:
    """``(rho_means, rho_moments)``: the one-off total of :func:`dp_fed_bnsl_plan`, split by share."""
    mean_share = 0.0 if public_means else MEAN_SHARE
    total = mean_share + MOMENT_SHARE
    return plan.rho_means * mean_share / total, plan.rho_means * MOMENT_SHARE / total
