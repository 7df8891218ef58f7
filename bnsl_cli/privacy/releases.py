"""The kinds of private release, and one planned release.

:class:`ReleaseKind` is the one list of release names: the ledger, the accountant, the run plan's
release list, the report, ``privacy-budget`` and the calibration all use its members. A
:class:`PlannedRelease` is one entry of a run plan's release list: what is released, by which
mechanism, with which noise multiplier (noise / sensitivity), how many times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

__all__ = ["ReleaseKind", "PlannedRelease", "GAUSSIAN", "EXPONENTIAL", "MECHANISMS"]

#: Mechanism names.
GAUSSIAN = "gaussian"
EXPONENTIAL = "exponential (gumbel-max)"
MECHANISMS = (GAUSSIAN, EXPONENTIAL)


class ReleaseKind(str, Enum):
    """Every kind of data-dependent value a participant can release (the ledger's ``release``).

    The one list of release names: the ledger, the accountant, the run plan's release list, the
    report, ``privacy-budget`` and the calibration all use these members (their values are what
    ``report.json`` shows)."""

    RANGE_RAW = "value-range (raw)"
    COLUMN_MEANS = "column-means"
    RANGE_CENTRED = "value-range (centred)"
    SECOND_MOMENTS = "second-moments"
    SELECTION = "coordinate-selection"
    UPDATE = "coordinate-update"
    COVARIANCE = "covariance"
    POLISH = "polish-second-moments"
    MOMENT_MATRIX = "moment-matrix"
    SCALE_HISTOGRAM = "scale-histogram"
    WHITENED_MOMENTS = "whitened-moments"
    CENTRE_HISTOGRAM = "centre-histogram"

    def __str__(self) -> str:  # the plain name in messages and f-strings
        return self.value


#: The smallest noise multiplier a planned release may have: one release at it costs ρ = 5·10¹¹, far
#: beyond the largest ε a plan may target (:data:`~bnsl_cli.privacy.limits.MAX_EPSILON`), and every
#: cost computed from it stays finite (a smaller one squared underflows).
MIN_MULTIPLIER = 1e-6


@dataclass(frozen=True)
class PlannedRelease:
    """One planned release: ``count`` releases of ``kind`` by ``mechanism`` with noise
    ``multiplier`` × its sensitivity; each costs ``1 / (2 multiplier²)`` zCDP. ``split`` > 1: split
    noise over that many sites (each adds ``1/split`` of the variance; the noise is that of their
    secure sum; see :class:`~bnsl_cli.privacy.ledger.PrivacyEvent`)."""

    kind: ReleaseKind
    mechanism: str
    multiplier: float
    count: int = 1
    split: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ReleaseKind(self.kind))
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"unknown mechanism {self.mechanism!r}; use one of {MECHANISMS}")
        m = float(self.multiplier)
        if not (m >= MIN_MULTIPLIER and math.isfinite(m)):
            raise ValueError(
                f"a planned release needs a finite noise multiplier of at least {MIN_MULTIPLIER:g}, got {self.multiplier!r}"
                " (below it a release costs more than any ε a plan may target)"
            )
        object.__setattr__(self, "multiplier", m)
        if isinstance(self.count, bool) or int(self.count) != self.count or self.count < 1:
            raise ValueError(f"count must be an integer >= 1, got {self.count!r}")
        object.__setattr__(self, "count", int(self.count))
        if isinstance(self.split, bool) or int(self.split) != self.split or self.split < 1:
            raise ValueError(f"split must be an integer >= 1, got {self.split!r}")
        object.__setattr__(self, "split", int(self.split))

    @property
    def rho_each(self) -> float:
        return 0.5 / self.multiplier**2

    @property
    def rho(self) -> float:
        return self.count * self.rho_each

    def to_dict(self) -> dict:
        return {
            "release": self.kind.value,
            "mechanism": self.mechanism,
            "noise_multiplier": self.multiplier,
            "count": self.count,
            "rho_each": self.rho_each,
            "rho": self.rho,
            **({"split": self.split} if self.split > 1 else {}),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "PlannedRelease":
        return cls(ReleaseKind(d["release"]), d["mechanism"], d["noise_multiplier"], d["count"], int(d.get("split", 1)))
