"""The byte meter of a run: what crossed the fleet seam, per participant and per exchange (a leaf:
nothing of the package imported).

Every fleet (:class:`~bnsl_cli.federated.fleet.LocalFleet`, :class:`~bnsl_cli.federated.fleet.ProcessFleet`,
:class:`~bnsl_cli.federated.secure_local.SecureLocalFleet`, :class:`~bnsl_cli.net.fleet.NetworkFleet`)
makes one :class:`Traffic` in its constructor and counts every exchange it carries: the encoded
message once for every participant it reaches (a broadcast to ``P`` sites is ``P`` messages down, as
a network transport sends it to each), and every encoded reply that comes back (``0`` for a
participant that needs none). Under secure aggregation a reply is counted as it crossed, masked:
masking changes its values, not its length. The end-of-run summaries are not counted.

A coordinator driver only says which exchange it is in (:meth:`Traffic.enter`: an ADMM round
number, ``"standardize"``, ``"polish"``, ``"final"``, a stage name); the report builder
(:mod:`bnsl_cli.report`) reads the totals. Nothing else counts bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable, Optional, Sequence

__all__ = ["Crossing", "Traffic", "STANDARDIZE", "POLISH", "FINAL"]

#: The stages the report names: the column-statistics exchange before the rounds, the polish's
#: second-moment exchange after them and the stop broadcast. ADMM rounds are their numbers (1, 2, …).
STANDARDIZE = "standardize"
POLISH = "polish"
FINAL = "final"


@dataclass(frozen=True)
class Crossing:
    """One exchange through the fleet: the stage it belonged to, the bytes sent down to every
    participant and the bytes of every reply, in participant order."""

    stage: Hashable
    down: tuple
    up: tuple


class Traffic:
    """The bytes a fleet carried for ``participants`` participants, one :class:`Crossing` per
    exchange, under the stage the driver last entered (``None`` before it names one)."""

    def __init__(self, participants: int):
        self.participants = int(participants)
        self.stage: Hashable = None
        self.crossings: list[Crossing] = []

    def enter(self, stage: Hashable) -> None:
        """The exchanges from now on belong to ``stage`` (what the driver is doing)."""
        self.stage = stage

    def count(self, msg: bytes, replies: Sequence[Optional[bytes]]) -> None:
        """The fleet carried ``msg`` to every participant and brought back ``replies``."""
        n = len(replies)
        self.crossings.append(Crossing(self.stage, (len(msg),) * n, tuple(0 if r is None else len(r) for r in replies)))

    # -- reading ------------------------------------------------------------------------------
    def _of(self, stages: Optional[Iterable[Hashable]]) -> list[Crossing]:
        if stages is None:
            return self.crossings
        keep = set(stages)
        return [c for c in self.crossings if c.stage in keep]

    def stages(self) -> list:
        """The stages seen, in the order of their first exchange."""
        return list(dict.fromkeys(c.stage for c in self.crossings))

    def exchanges(self, stages: Optional[Iterable[Hashable]] = None) -> int:
        """The number of exchanges (of ``stages``; all by default)."""
        return len(self._of(stages))

    def up(self, stages: Optional[Iterable[Hashable]] = None) -> int:
        """Bytes of every reply (of ``stages``; all by default), all participants."""
        return sum(sum(c.up) for c in self._of(stages))

    def down(self, stages: Optional[Iterable[Hashable]] = None) -> int:
        """Bytes of every message sent (of ``stages``; all by default), all participants."""
        return sum(sum(c.down) for c in self._of(stages))

    def per_participant(self, stages: Optional[Iterable[Hashable]] = None) -> list[tuple[int, int]]:
        """``(up, down)`` bytes of every participant (of ``stages``; all by default)."""
        up = [0] * self.participants
        down = [0] * self.participants
        for c in self._of(stages):
            for k, (u, d) in enumerate(zip(c.up, c.down)):
                up[k] += u
                down[k] += d
        return list(zip(up, down))

    def totals(self, stages: Optional[Iterable[Hashable]] = None) -> dict:
        """``{"bytes_up": …, "bytes_down": …}`` (of ``stages``; all by default): the report's and a
        round record's byte entries."""
        return {"bytes_up": self.up(stages), "bytes_down": self.down(stages)}

    def since(self, mark: int) -> "Traffic":
        """A meter holding the exchanges from the ``mark``-th on (``mark = len(crossings)`` taken
        before a run: that run's bytes when the fleet carried others before)."""
        out = Traffic(self.participants)
        out.crossings = self.crossings[mark:]
        return out
