"""The release list of a private run: every planned release with its noise, calibrated to (ε, δ).

One participant's planned releases are a list of :class:`~bnsl_cli.privacy.releases.PlannedRelease`
(kind, mechanism, noise multiplier = noise / sensitivity, count). Their zCDP spend is
``Σ count / (2 multiplier²)``, read by building the ledger of those releases (unit sensitivities)
and asking the accountant, exactly as a finished run's ledger is read. The run plan, the report,
``privacy-budget`` (both directions) and the participants all use this one list, so every printed
number comes from it.

Budget split with ``ρ* = rho_for_epsilon(ε, δ)`` (shares of ``ρ*``):

DP-Fed-Sparse-BNSL — one-offs: column means ``mean_share`` (0 with public means), second moments
``moment_share``; without a public value bound each one-off spends ``RANGE_FRACTION`` of its share on
the noisy value-range histogram that sets its clipping bound. The polish's second moments
``polish_share`` (0 without the polish). The rest over the ``K × T`` DP-PGCD steps, a fraction
``a`` (selection share) on the exponential-mechanism selection and ``1 − a`` on the Gaussian update.

DP-Fed-BNSL — the same one-offs (means, second moments for the row clip norm), the covariance the rest.

A method's package may build its own list from the same parts (its ``release_builder``:
:func:`multiplier_for_rho`, :class:`~bnsl_cli.privacy.releases.PlannedRelease`).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence, Union

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.privacy.accountant import Accountant, get_accountant
from bnsl_cli.privacy.ledger import PrivacyEvent, PrivacyLedger
from bnsl_cli.privacy.releases import EXPONENTIAL, GAUSSIAN, PlannedRelease, ReleaseKind

__all__ = [
    "RANGE_FRACTION",
    "CALIBRATION_ATTEMPTS",
    "release_list",
    "range_multiplier",
    "dp_pgcd_releases",
    "dp_fed_bnsl_releases",
    "ledger_of",
    "spend_of",
    "calibrate_releases",
    "covariance_sensitivity",
    "multiplier_for_rho",
]

#: Fraction of the mean (resp. second-moment) budget spent on the value-range histogram that sets
#: the clipping bound of that release, when no public value bound is given.
RANGE_FRACTION = 0.5
#: How many times the calibration shaves ρ* by a few ulps to absorb rounding before it gives up.
CALIBRATION_ATTEMPTS = 64
#: The calibrated plan spends at most ε·(1 − this): the run's ledger recomputes each release's ρ
#: from its actual sensitivity and noise (a few ulps apart from the plan's), and must stay within ε.
CALIBRATION_MARGIN = 1e-12


def multiplier_for_rho(rho: float) -> float:
    """The noise multiplier (noise / sensitivity) of a Gaussian release of zCDP budget ``rho``: ``1/√(2ρ)``
    (a :class:`~bnsl_cli.errors.PrivacyBudgetError` when ``rho`` cannot fund one)."""
    if not (rho > 0 and math.isfinite(rho)):
        raise PrivacyBudgetError(f"a release needs a finite zCDP budget > 0, got {rho!r}")
    m = 1.0 / math.sqrt(2.0 * rho)
    if not math.isfinite(m):
        raise PrivacyBudgetError(f"the zCDP budget {rho!r} of a release is too small to fund any noise level")
    return m


_multiplier = multiplier_for_rho


def covariance_sensitivity(clip_norm: float) -> float:
    """Replace-one L2 (Frobenius) sensitivity of ``XᵀX`` with rows clipped to norm ``C_x``: ``√2 C_x²``.

    ``‖x xᵀ − y yᵀ‖²_F = ‖x‖⁴ + ‖y‖⁴ − 2 (xᵀy)² ≤ 2 C_x⁴``; it also bounds the sensitivity of the
    upper triangle (with the diagonal) that the symmetric noise is drawn for."""
    if not (clip_norm > 0 and math.isfinite(clip_norm)):
        raise PrivacyBudgetError(f"the row clipping norm C_x must be a finite number > 0, got {clip_norm!r}")
    return math.sqrt(2.0) * float(clip_norm) ** 2


def release_list(*, means=None, moments=None, matrix=None, iterations=None, polish=None) -> list[PlannedRelease]:
    """The releases of one participant, in the order it makes them, from each release's noise
    multiplier — the one place that says which releases a plan holds and in what order (the
    calibration below and ``privacy-budget``'s spend mode both build their lists here).

    ``means``, ``moments``: ``(range multiplier, multiplier)`` of a one-off release, the range
    multiplier ``None`` when a public value bound makes the noisy value-range histogram that sets its
    clipping bound unnecessary; the raw range and the column means come first, then the centred
    range and the second moments. ``matrix``: ``(kind, multiplier)`` of a one-matrix method's release.
    ``iterations``: ``(selection multiplier, update multiplier, count)`` of the DP-PGCD steps.
    ``polish``: the multiplier of the polish's second moments. ``None``: no such release."""
    out: list[PlannedRelease] = []
    for (before, kind), pair in (
        ((ReleaseKind.RANGE_RAW, ReleaseKind.COLUMN_MEANS), means),
        ((ReleaseKind.RANGE_CENTRED, ReleaseKind.SECOND_MOMENTS), moments),
    ):
        if pair is None:
            continue
        range_mult, mult = pair
        if range_mult is not None:
            out.append(PlannedRelease(before, GAUSSIAN, range_mult, 1))
        out.append(PlannedRelease(kind, GAUSSIAN, mult, 1))
    if matrix is not None:
        out.append(PlannedRelease(matrix[0], GAUSSIAN, matrix[1], 1))
    if iterations is not None:
        selection, update, count = iterations
        out.append(PlannedRelease(ReleaseKind.SELECTION, EXPONENTIAL, selection, count))
        out.append(PlannedRelease(ReleaseKind.UPDATE, GAUSSIAN, update, count))
    if polish is not None:
        out.append(PlannedRelease(ReleaseKind.POLISH, GAUSSIAN, polish, 1))
    return out


def range_multiplier(multiplier: float) -> float:
    """The multiplier of the value-range release before a one-off release with ``multiplier``: it
    spends ``RANGE_FRACTION`` of the pair's budget, the release the rest
    (``ρ_range / ρ_release = f / (1 − f)``)."""
    return multiplier * math.sqrt((1.0 - RANGE_FRACTION) / RANGE_FRACTION)


def _one_offs(rho_star, mean_share, moment_share, value_bound_given) -> dict:
    """``release_list``'s ``means``/``moments`` for shares of ``rho_star``: without a public value
    bound, ``RANGE_FRACTION`` of each budget pays for the value-range histogram (none for a share of 0:
    public means)."""
    f = 0.0 if value_bound_given else RANGE_FRACTION
    out = {}
    for key, share in (("means", mean_share), ("moments", moment_share)):
        rho = share * rho_star
        if rho > 0:
            out[key] = (_multiplier(f * rho) if f else None, _multiplier((1 - f) * rho))
    return out


def dp_pgcd_releases(
    rho_star: float,
    *,
    rounds: int,
    steps: int,
    selection_share: float,
    mean_share: float,
    moment_share: float,
    polish_share: float,
    value_bound_given: bool,
) -> list[PlannedRelease]:
    """DP-Fed-Sparse-BNSL's releases for a budget of ``rho_star`` (see the module docstring)."""
    left = 1.0 - mean_share - moment_share - polish_share
    if not left > 0:
        raise PrivacyBudgetError(
            f"the one-off releases take the whole budget (second-moment share {moment_share:g} + mean share "
            f"{mean_share:g} + polish share {polish_share:g} >= 1); lower the shares"
        )
    one_offs = _one_offs(rho_star, mean_share, moment_share, value_bound_given)
    rho_step = left * rho_star / (rounds * steps)
    iterations = (_multiplier(selection_share * rho_step), _multiplier((1.0 - selection_share) * rho_step), rounds * steps)
    polish = _multiplier(polish_share * rho_star) if polish_share > 0 else None
    return release_list(**one_offs, iterations=iterations, polish=polish)


def dp_fed_bnsl_releases(
    rho_star: float, *, mean_share: float, moment_share: float, value_bound_given: bool
) -> list[PlannedRelease]:
    """DP-Fed-BNSL's releases: the one-offs, then the covariance with the rest of ``rho_star``."""
    left = 1.0 - mean_share - moment_share
    if not left > 0:
        raise PrivacyBudgetError("the one-off releases take the whole budget; lower the shares")
    one_offs = _one_offs(rho_star, mean_share, moment_share, value_bound_given)
    return release_list(**one_offs, matrix=(ReleaseKind.COVARIANCE, _multiplier(left * rho_star)))


def ledger_of(releases: Sequence[PlannedRelease], participant_ids=(0,)):
    """The ledger those releases make (unit sensitivities: ρ depends only on noise / sensitivity)."""
    ledger = PrivacyLedger()
    for p in participant_ids:
        ledger.add_participant(p)
        for r in releases:
            ledger.record(p, PrivacyEvent(r.kind, r.mechanism, 1.0, r.multiplier, r.count, r.split))
    return ledger


def spend_of(
    releases: Sequence[PlannedRelease], delta: float, conversion: str = "tight",
    accountant: Union[str, Accountant] = "zcdp",
) -> tuple[float, float]:
    """``(ε, ρ)`` one participant spends with these releases, read from their ledger by the
    ``accountant`` (a name or an :class:`~bnsl_cli.privacy.accountant.Accountant`; ρ is always the
    zCDP spend)."""
    ledger = ledger_of(releases)
    return ledger.epsilon(delta, conversion, accountant=accountant), ledger.max_rho()


def calibrate_releases(
    build: Callable[[float], list[PlannedRelease]], epsilon: float, delta: float, conversion: str = "tight",
    accountant: Union[str, Accountant] = "zcdp",
) -> tuple[list[PlannedRelease], float]:
    """``(releases, ρ*)``: the releases ``build(ρ*)`` makes, with ρ* the largest budget whose
    releases spend at most ε at δ by the ``accountant``
    (:meth:`~bnsl_cli.privacy.accountant.Accountant.scale_for_epsilon`), verified: their spend read
    back from their ledger is at most ε.

    ``epsilon`` and ``delta`` are not checked again here: :func:`~bnsl_cli.plan.privacy_plan.resolve_privacy`
    checked them with the other options, and a direct caller's invalid value is refused by the
    accountant's inverse (:func:`~bnsl_cli.privacy.accountant.rho_for_epsilon`, PrivacyBudgetError).

    Rounding in the multipliers can push the recomputed spend a few ulps above ε; ρ* is shaved by a
    few ulps at a time until the spend is at most ε·(1 − ``CALIBRATION_MARGIN``). If no attempt verifies, this fails closed with :class:`PrivacyBudgetError`
    rather than return an unverified plan."""
    acc = get_accountant(accountant)

    def spend(rho: float, h: float) -> float:
        return acc.epsilon(ledger_of(build(rho)).events(0), delta, conversion, h)

    rho_star = acc.scale_for_epsilon(spend, epsilon, delta, conversion, key=lambda: _shape(build))
    eps, dlt = float(epsilon), float(delta)
    for attempt in range(CALIBRATION_ATTEMPTS):
        releases = build(rho_star)
        spent = spend_of(releases, dlt, conversion, acc)
        if spent[0] <= eps * (1.0 - CALIBRATION_MARGIN):
            return releases, rho_star
        rho_star *= 1.0 - 2.0 ** (min(attempt, 24) - 52)  # a few ulps, growing, at most 2⁻²⁸ a time
    raise PrivacyBudgetError(
        f"could not verify a noise plan within ε = {eps:g} at δ = {dlt:g} after {CALIBRATION_ATTEMPTS} "
        "attempts; no run was started (try a slightly different --epsilon)"
    )


def _shape(build) -> tuple:
    """The release list's shape (kinds, mechanisms, multipliers at ρ* = 1, counts, splits): what the
    PLD accountant's search caches on."""
    return tuple((r.kind.value, r.mechanism, r.multiplier, r.count, r.split) for r in build(1.0))
