"""fed-suffstats' typed report entries: a stage (in the outcome's ``history``) and the last basis (the
outcome's ``method_entry``, reported as ``suffstats``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

__all__ = ["SuffstatsStage", "SuffstatsBasis"]


@dataclass(frozen=True)
class SuffstatsStage:
    """One stage of fed-suffstats: its noise level ``tau``, the edges and score of its search (all
    ``None`` when the stage's rows were lost in the noise), the clipped rows' weight, and a note."""

    round: int
    tau: Optional[float]
    edges: Optional[int]
    score: Optional[float]
    weight: float
    note: Optional[str] = None

    OMIT_IF_NONE: ClassVar[frozenset] = frozenset({"note"})


@dataclass(frozen=True)
class SuffstatsBasis:
    """fed-suffstats' last basis: centre and scale per column, the number of stages, and (private)
    the columns whose scale was defaulted or whose centre was not resolved."""

    REPORT_KEY: ClassVar[str] = "suffstats"

    centre: list
    scale: list
    stages: int
    scale_defaulted: Optional[list] = None
    centre_unresolved: Optional[list] = None

    OMIT_IF_NONE: ClassVar[frozenset] = frozenset({"scale_defaulted", "centre_unresolved"})
