"""The public bounds of a privacy target, checked before anything heavy is imported or calibrated:
:data:`MAX_EPSILON` and :func:`validate_epsilon` (``learn --dp`` and ``privacy-budget`` call it first, so a
huge ε gets its one-line answer at start-up speed; the accountant calls it before every calibration)."""

from __future__ import annotations

import math

from bnsl_cli.errors import PrivacyBudgetError

__all__ = ["MAX_EPSILON", "validate_epsilon"]


#: The largest ε a plan may target: a public maximum checked before any calibration, so that every
#: calibration (and a site's check of a plan) runs in bounded time. A guarantee of e^(10⁶) protects
#: nothing; far below it, ε = 1000 already makes the noise negligible on any data set bnsl reads.
MAX_EPSILON = 1e6


def validate_epsilon(epsilon: float) -> float:
    """Return ``epsilon`` as a float if it is a finite number ``> 0`` and at most :data:`MAX_EPSILON`,
    else raise PrivacyBudgetError."""
    try:
        eps = float(epsilon)
    except (TypeError, ValueError):
        raise PrivacyBudgetError(f"epsilon must be a number, got {epsilon!r}") from None
    if not (eps > 0 and math.isfinite(eps)):
        raise PrivacyBudgetError(
            f"epsilon must be a finite number > 0, got {epsilon!r}; a smaller epsilon means more privacy "
            "(typical values 0.5 to 50)"
        )
    if eps > MAX_EPSILON:
        raise PrivacyBudgetError(
            f"epsilon {eps:.3g} is above the largest a private run takes ({MAX_EPSILON:g}): such a guarantee protects "
            "nothing; run without --dp for a non-private run"
        )
    return eps
