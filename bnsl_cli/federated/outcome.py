"""The typed value a coordinator driver hands back to the run (a leaf: nothing of the package imported).

A driver returns one of three outcomes, by the shape of what its method reports:
:class:`AdmmOutcome` (fed-sparse, fed-bnsl: ADMM rounds), :class:`SolverOutcome` (fed-moments,
fed-suffstats, notears: a solver at the coordinator or at the one pooled site) and
:class:`LocalOutcome` (local-notears: one graph per participant). Each field is one entry of
``report.json``; :attr:`Outcome.REPORT` lists them in the order the report writes them, with
``communication`` where the report builder (:mod:`bnsl_cli.report`) puts the bytes its fleet
counted. A driver never counts or reports bytes: it says what its messages carry
(:attr:`Outcome.messages`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

import numpy as np

__all__ = ["Outcome", "AdmmOutcome", "SolverOutcome", "LocalOutcome"]


@dataclass
class Outcome:
    """What every driver hands back: the raw estimate, the final DAG, every participant's summary
    (from ``fleet.finish()``), the per-participant DAGs (local-notears), and the report entries
    every method has."""

    W_raw: Optional[np.ndarray]
    W: np.ndarray
    summaries: list
    #: rounds (ADMM) or outer solver steps, and whether the method's stopping rule was met
    rounds: int
    converged: bool
    #: the report's ``timing`` (the run adds ``workers`` and ``wall_s``)
    timing: dict
    #: what the messages carried, in words (the report's ``communication.encoding`` / ``note``)
    messages: str
    #: the warnings the driver emitted, in order (the run appends its own)
    warnings: list = field(default_factory=list)
    #: per-participant DAGs (local-notears)
    local: Optional[list] = None

    #: ``(report key, attribute)`` in report order; ``("communication", None)`` marks where the
    #: report builder writes the bytes
    REPORT: ClassVar[tuple] = ()
    #: report keys left out when their attribute is ``None``
    OPTIONAL: ClassVar[frozenset] = frozenset()

    def report_entries(self) -> list[tuple[str, object]]:
        """``(key, value)`` for the report in order, ``("communication", None)`` as the bytes' place."""
        out = []
        for key, attr in self.REPORT:
            value = None if attr is None else getattr(self, attr)
            if key in self.OPTIONAL and value is None:
                continue
            out.append((key, value))
        return out


@dataclass
class AdmmOutcome(Outcome):
    """fed-sparse, fed-bnsl: the ADMM rounds (``history``: one record per round), the polish
    entry (``None`` for a method without a polish) and the coordinator's solver issues."""

    stopped_early: bool = False
    final: Optional[dict] = None
    history: list = field(default_factory=list)
    removed_for_acyclicity: list = field(default_factory=list)
    polish: Optional[dict] = None
    solver_issues: list = field(default_factory=list)

    REPORT: ClassVar[tuple] = (
        ("rounds", "rounds"), ("stopped_early", "stopped_early"), ("converged", "converged"), ("final", "final"),
        ("history", "history"), ("communication", None), ("timing", "timing"),
        ("removed_for_acyclicity", "removed_for_acyclicity"), ("warnings", "warnings"), ("polish", "polish"),
        ("solver_issues", "solver_issues"),
    )


@dataclass
class SolverOutcome(Outcome):
    """fed-moments, fed-suffstats, notears: one solve (``history``: its outer steps or stages),
    and where they apply the statistics' record (``standardize``) and fed-suffstats' basis
    (``suffstats``)."""

    final: Optional[dict] = None
    history: list = field(default_factory=list)
    removed_for_acyclicity: list = field(default_factory=list)
    solver_issues: list = field(default_factory=list)
    suffstats: Optional[dict] = None
    standardize: Optional[dict] = None

    REPORT: ClassVar[tuple] = (
        ("rounds", "rounds"), ("converged", "converged"), ("final", "final"), ("history", "history"),
        ("communication", None), ("timing", "timing"), ("removed_for_acyclicity", "removed_for_acyclicity"),
        ("solver_issues", "solver_issues"), ("warnings", "warnings"), ("suffstats", "suffstats"),
        ("standardize", "standardize"),
    )
    OPTIONAL: ClassVar[frozenset] = frozenset({"suffstats", "standardize"})


@dataclass
class LocalOutcome(Outcome):
    """local-notears: one record per participant (``per_participant``: its steps, ``h``,
    convergence, the edges removed and its DAG ``W``)."""

    per_participant: list = field(default_factory=list)

    REPORT: ClassVar[tuple] = (
        ("rounds", "rounds"), ("converged", "converged"), ("local", "per_participant"), ("communication", None),
        ("timing", "timing"), ("warnings", "warnings"),
    )
