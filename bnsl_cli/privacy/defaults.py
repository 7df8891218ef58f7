"""Default settings of the private learners, shared by ``learn --dp`` and ``privacy-budget``."""

from __future__ import annotations

#: Fixed number of ADMM rounds K for which a DP run's budget is calibrated.
DP_ROUNDS = 50
#: Share of the per-step budget spent on the coordinate selection (exponential mechanism).
SELECTION_SHARE = 0.5
#: Share of the total zCDP budget spent on the one-off release of the second moments m_i.
MOMENT_SHARE = 0.05
#: Share of the total zCDP budget spent on the one-off release of the column means (centering).
MEAN_SHARE = 0.05


def dp_steps(d: int) -> int:
    """Default number of DP-PGCD steps per round for ``d`` variables."""
    return max(20, d)
