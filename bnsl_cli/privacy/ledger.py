"""The privacy ledger: every data-dependent release, per participant, with its zCDP cost.

Privacy unit: one row of one participant's data; neighbouring data sets replace one row of one
participant. Costs are in zero-concentrated DP (zCDP):

* Gaussian mechanism, L2 sensitivity ``Delta``, noise std ``sigma``: ``rho = Delta**2 / (2 sigma**2)``;
* exponential mechanism in Gumbel-max form (argmax of scores + Gumbel(0, b)), score sensitivity
  ``Delta_S``: ``rho = Delta_S**2 / (2 b**2)`` (bounded-range analysis; equals ``eps_s**2 / 8`` with
  ``b = 2 Delta_S / eps_s``; the scores are not monotone, hence the factor 2 in ``b``).

zCDP composes by addition, so a participant's spend is ``sum(count * rho_each)`` over its events.
Participants hold disjoint rows, so the run's guarantee is the largest participant's spend
(parallel composition). The accountant (:mod:`bnsl_cli.privacy.accountant`) only reads the ledger.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Optional

from bnsl_cli.privacy.accountant import CONVERSION_DESCRIPTIONS, get_accountant
from bnsl_cli.privacy.releases import EXPONENTIAL, GAUSSIAN, MECHANISMS, ReleaseKind

__all__ = [
    "GAUSSIAN",
    "EXPONENTIAL",
    "MECHANISMS",
    "NEIGHBOURING_RELATION",
    "SPLIT_ASSUMPTION",
    "PrivacyEvent",
    "PrivacyLedger",
]

#: What a split-noise release's cost rests on (``PrivacyEvent.split > 1``).
SPLIT_ASSUMPTION = (
    "split noise: each site added 1/split of the noise variance; the noise scale is that of the securely "
    "aggregated sum, so the cost holds against a party that sees only the sum and only while no other site "
    "colludes with it"
)

#: The neighbouring relation every event's sensitivity refers to.
NEIGHBOURING_RELATION = "replace-one row of one participant"


@dataclass(frozen=True)
class PrivacyEvent:
    """One kind of release, made ``count`` times with the same sensitivity and noise.

    Attributes
    ----------
    release : ReleaseKind
        What is released (a member of :class:`~bnsl_cli.privacy.releases.ReleaseKind`; its string
        value is accepted and converted).
    mechanism : str
        ``"gaussian"`` or ``"exponential (gumbel-max)"``.
    sensitivity : float
        Replace-one sensitivity: L2 sensitivity ``Delta`` of the Gaussian release, or the score
        sensitivity ``Delta_S`` of the exponential mechanism.
    noise_scale : float
        Gaussian standard deviation ``sigma``, or the Gumbel scale ``b``. 0 means no noise (rho = inf
        unless the sensitivity is 0 too).
    count : int
        How many times this release was made (zCDP adds up).
    split : int
        1: the participant added all of ``noise_scale`` itself. ``P > 1``: split noise — each of the
        ``P`` sites added ``N(0, noise_scale²/P)`` and only their securely aggregated sum carries
        ``noise_scale``; the cost holds against a party that sees nothing but that sum, and only
        while no other site colludes with it (:data:`SPLIT_ASSUMPTION`).
    """

    release: ReleaseKind
    mechanism: str
    sensitivity: float
    noise_scale: float
    count: int = 1
    split: int = 1

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "release", ReleaseKind(self.release))
        except ValueError:
            raise ValueError(f"unknown release {self.release!r}; use a ReleaseKind") from None
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"unknown mechanism {self.mechanism!r}; use one of {MECHANISMS}")
        if not (self.sensitivity >= 0 and math.isfinite(self.sensitivity)):
            raise ValueError(f"sensitivity must be finite and >= 0, got {self.sensitivity!r}")
        if not self.noise_scale >= 0:
            raise ValueError(f"noise scale must be >= 0, got {self.noise_scale!r}")
        if isinstance(self.count, bool) or int(self.count) != self.count or self.count < 1:
            raise ValueError(f"count must be an integer >= 1, got {self.count!r}")
        object.__setattr__(self, "sensitivity", float(self.sensitivity))
        object.__setattr__(self, "noise_scale", float(self.noise_scale))
        object.__setattr__(self, "count", int(self.count))
        if isinstance(self.split, bool) or int(self.split) != self.split or self.split < 1:
            raise ValueError(f"split must be an integer >= 1, got {self.split!r}")
        object.__setattr__(self, "split", int(self.split))

    @property
    def noise_multiplier(self) -> float:
        """``noise_scale / sensitivity`` (inf when the sensitivity is 0)."""
        if self.sensitivity == 0:
            return math.inf
        return self.noise_scale / self.sensitivity

    @property
    def rho_each(self) -> float:
        """zCDP cost of one release: ``sensitivity**2 / (2 noise_scale**2)`` for both mechanisms."""
        if self.sensitivity == 0:
            return 0.0
        if self.noise_scale == 0:
            return math.inf
        ratio = self.sensitivity / self.noise_scale
        return 0.5 * ratio * ratio  # a product overflows to inf (a power would raise OverflowError)

    @property
    def rho(self) -> float:
        """zCDP cost of all ``count`` releases: ``count * rho_each``."""
        return self.count * self.rho_each

    @property
    def key(self) -> tuple:
        """Identity of the release apart from its count (events with equal keys are merged)."""
        return (self.release, self.mechanism, self.sensitivity, self.noise_scale, self.split)

    def with_count(self, count: int) -> "PrivacyEvent":
        """The same release made ``count`` times."""
        return PrivacyEvent(self.release, self.mechanism, self.sensitivity, self.noise_scale, count, self.split)

    def to_dict(self) -> dict:
        """JSON-ready description (non-finite numbers as ``None``)."""
        return {
            "release": self.release.value,
            "mechanism": self.mechanism,
            "sensitivity": self.sensitivity,
            "noise_scale": _finite_or_none(self.noise_scale),
            "noise_multiplier": _finite_or_none(self.noise_multiplier),
            "count": self.count,
            "rho_each": _finite_or_none(self.rho_each),
            "rho": _finite_or_none(self.rho),
            **({"split": self.split, "assumption": SPLIT_ASSUMPTION} if self.split > 1 else {}),
        }


    @classmethod
    def from_dict(cls, d: dict) -> "PrivacyEvent":
        """The event of :meth:`to_dict` (a summary a participant sent back)."""
        noise = d["noise_scale"]
        return cls(d["release"], d["mechanism"], d["sensitivity"], math.inf if noise is None else noise, d["count"],
                   int(d.get("split", 1)))


class PrivacyLedger:
    """Releases per participant id; identical releases (same key) are merged by adding counts.

    ``rho(p) = sum over p's events of count * rho_each``; ``max_rho() = max_p rho(p)`` is the run's
    zCDP guarantee, because participants hold disjoint rows.
    """

    def __init__(self) -> None:
        self._events: dict[int, dict[tuple, PrivacyEvent]] = {}

    # -- recording ---------------------------------------------------------------------------

    def add_participant(self, participant: int) -> None:
        """Register a participant that has (so far) released nothing."""
        self._events.setdefault(_pid(participant), {})

    def record(self, participant: int, event: PrivacyEvent) -> None:
        """Add ``event`` to ``participant``'s releases (merging it with an identical earlier one)."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"expected a PrivacyEvent, got {type(event).__name__}")
        book = self._events.setdefault(_pid(participant), {})
        old = book.get(event.key)
        book[event.key] = event if old is None else old.with_count(old.count + event.count)

    # -- reading -----------------------------------------------------------------------------

    @property
    def participants(self) -> list[int]:
        """Participant ids, sorted."""
        return sorted(self._events)

    def events(self, participant: int) -> list[PrivacyEvent]:
        """``participant``'s merged events in order of first occurrence (empty if unknown)."""
        return list(self._events.get(_pid(participant), {}).values())

    def __iter__(self) -> Iterator[tuple[int, PrivacyEvent]]:
        for p in self.participants:
            for ev in self._events[p].values():
                yield p, ev

    def __len__(self) -> int:
        """Number of distinct (merged) events over all participants."""
        return sum(len(book) for book in self._events.values())

    def rho(self, participant: int) -> float:
        """zCDP spend of one participant: ``sum(count * rho_each)`` (0 if it released nothing)."""
        return _sum(ev.rho for ev in self.events(participant))

    def max_rho(self) -> float:
        """The run's zCDP guarantee: the largest participant's spend (0 for an empty ledger)."""
        return max((self.rho(p) for p in self.participants), default=0.0)

    def epsilon(
        self, delta: float, conversion: str = "tight", participant: Optional[int] = None, accountant="zcdp"
    ) -> float:
        """``epsilon`` at ``delta`` of the run (or of one participant) via the ``accountant`` (a name or
        an :class:`~bnsl_cli.privacy.accountant.Accountant`; ``zcdp``: the largest ρ converted; ``pld``:
        the largest participant's PLD epsilon)."""
        who = self.participants if participant is None else [participant]
        return get_accountant(accountant).run_epsilon((self.events(p) for p in who), delta, conversion)

    def to_dict(self, delta: float, conversion: str = "tight", accountant="zcdp") -> dict:
        """JSON-ready summary: overall epsilon/delta/rho (largest participant) and per-participant events.

        ``accountant`` ``zcdp``: each epsilon is the conversion of its ρ; ``pld``: each participant's
        epsilon from the privacy-loss distributions of its events, the run's the largest of them.
        Non-finite numbers (a release without noise) appear as ``None`` so the result is valid JSON.
        """
        acc = get_accountant(accountant)
        parts, rhos, epsilons = [], [], []
        for p in self.participants:
            rho_p = self.rho(p)
            eps_p = acc.epsilon(self.events(p), delta, conversion)
            rhos.append(rho_p)
            epsilons.append(eps_p)
            parts.append(
                {
                    "participant": p,
                    "rho": _finite_or_none(rho_p),
                    "epsilon": _finite_or_none(eps_p),
                    "events": [ev.to_dict() for ev in self.events(p)],
                }
            )
        rho_max = self.max_rho()
        eps = acc.largest(rhos, epsilons, delta, conversion)
        return {
            "epsilon": _finite_or_none(eps),
            "delta": float(delta),
            "rho": _finite_or_none(rho_max),
            "neighbouring_relation": NEIGHBOURING_RELATION,
            "composition": acc.composition,
            "conversion": conversion,
            "conversion_description": CONVERSION_DESCRIPTIONS[conversion],
            "accountant": acc.name,
            "accountant_description": acc.description,
            "participants": parts,
        }


def _pid(participant) -> int:
    if isinstance(participant, bool) or int(participant) != participant:
        raise TypeError(f"participant ids are integers, got {participant!r}")
    return int(participant)


def _sum(values) -> float:
    vals = list(values)
    if any(math.isinf(v) for v in vals):
        return math.inf
    return math.fsum(vals)


def _finite_or_none(x: float):
    x = float(x)
    return x if math.isfinite(x) else None
