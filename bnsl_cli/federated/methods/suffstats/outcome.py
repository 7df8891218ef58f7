"""fed-suffstats' typed report entries: a stage (in the outcome's ``history``) and the last basis (the
outcome's ``method_entry``, reported as ``suffstats``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

__all__ = ["SuffstatsStage", "SuffstatsBasis"]


@dataclass(frozen=True)
class SuffstatsStage:
    """One stage of fed-suffstats: its noise level ``tau`` (an off-diagonal entry's, in the whitened
    basis, over the rows' weight), the edges and score of its search (all ``None`` when the stage's
    rows were lost in the noise), the clipped rows' weight, a note, and the effective row count of its
    moments."""

    round: int
    tau: Optional[float]
    edges: Optional[int]
    score: Optional[float]
    weight: float
    note: Optional[str] = None
    #: the effective row count of the stage's moments (rows and release noise, see
    #: :func:`~bnsl_cli.federated.methods.admm.on_moments.effective_rows`)
    n_eff: Optional[int] = None
    #: the stage's basis over the model whitening when the clip was widened (``κ > 1``, see
    #: :func:`~bnsl_cli.federated.methods.suffstats.driver.next_clip_scale`); ``None``: the designed clip
    clip_scale: Optional[float] = None
    #: the stages whose releases, made on the same basis, this stage's moments average (inverse-variance
    #: weights, see :func:`~bnsl_cli.federated.methods.suffstats.driver.repeat_basis`); ``None``: its own
    pooled: Optional[list] = None

    OMIT_IF_NONE: ClassVar[frozenset] = frozenset({"note", "n_eff", "clip_scale", "pooled"})


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
