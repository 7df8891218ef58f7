"""The typed value a coordinator driver hands back to the run, and the typed entries it is made of
(a leaf: nothing of the package imported).

A driver returns one of three outcomes, by the shape of what its method reports:
:class:`AdmmOutcome` (fed-sparse, fed-bnsl: ADMM rounds), :class:`SolverOutcome` (the pooled-
statistics methods, notears: a solver at the coordinator or at the one pooled site) and
:class:`LocalOutcome` (local-notears: one graph per participant). Each of their report fields holds
a typed entry (below: a round, a solver step, the final state, the polish, the statistics read from the pooled moments, the driver's timing, a participant's fit). The
report builder (:mod:`bnsl_cli.report`) is the one place that turns them into ``report.json``: it
names the keys, puts them in order and adds what only the run knows (the bytes its fleet counted,
the workers, the wall time). A driver never counts or reports bytes: it says what its messages
carry (:attr:`Outcome.messages`).

An entry's fields are its report keys, in order; a field named in its ``OMIT_IF_NONE`` is left out
of the report when it is ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Mapping, Optional, Union

import numpy as np

__all__ = [
    "Outcome",
    "AdmmOutcome",
    "SolverOutcome",
    "LocalOutcome",
    "AdmmRound",
    "SolverStep",
    "AdmmFinal",
    "SolverFinal",
    "PolishApplied",
    "PolishSkipped",
    "PooledStats",
    "AdmmTiming",
    "SolverTiming",
    "LocalFit",
]


# ----------------------------------------------------------------------------------------------
# the entries
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdmmRound:
    """One ADMM round as the coordinator recorded it (the report adds the bytes of its exchange
    before ``local_s``, and keeps ``support`` only with ``--trace``)."""

    round: int
    h: float
    gap: float
    objective: Optional[float]
    rho1: float
    rho2: float
    alpha: float
    edges: int
    support: list
    local_s: float
    round_s: float


@dataclass(frozen=True)
class SolverStep:
    """One outer step of NOTEARS (notears, fed-moments)."""

    outer: int
    h: float
    rho: float


@dataclass(frozen=True)
class AdmmFinal:
    """The last ADMM round's acyclicity, consensus gap and objective."""

    h: float
    gap: float
    objective: Optional[float]


@dataclass(frozen=True)
class SolverFinal:
    """The solver's final acyclicity."""

    h: float


@dataclass(frozen=True)
class PolishApplied:
    """The polish's search ran (the search's diagnostics, :func:`~bnsl_cli.solvers.score_search.polish_graph`),
    with the number of second moments asked for and the search's seconds."""

    applied: bool = field(default=True, init=False)
    edges_before: int
    edges_after: int
    moves: Mapping
    changes: Mapping
    dropped_below_threshold: int
    dropped_within_noise: int
    candidate_level: Optional[float]
    additions: str
    threshold: Optional[float]
    score: str
    penalty_per_edge: float
    bic: Optional[Mapping]
    pairs: int
    seconds: float

    OMIT_IF_NONE: ClassVar[frozenset] = frozenset({"bic"})


@dataclass(frozen=True)
class PolishSkipped:
    """The polish left the thresholded consensus as it was: why, and — when its exchange took place —
    the number of second moments asked for and the search's seconds."""

    applied: bool = field(default=False, init=False)
    reason: str
    pairs: Optional[int] = None
    seconds: Optional[float] = None

    OMIT_IF_NONE: ClassVar[frozenset] = frozenset({"pairs", "seconds"})


@dataclass(frozen=True)
class PooledStats:
    """The column statistics a solver method read from its pooled moments (no message of their own):
    whether ``--standardize`` applied them, where they came from, the means and standard deviations."""

    applied: bool
    source: str
    mean: list
    sd: list


@dataclass(frozen=True)
class AdmmTiming:
    """The ADMM driver's timing: each participant's compute seconds, the coordinator's, the number of
    evaluations of its W-step objective, the round loop's seconds."""

    participants_s: list
    server_s: float
    server_evaluations: int
    protocol_s: float


@dataclass(frozen=True)
class SolverTiming:
    """A solver method's compute seconds."""

    compute_s: float


@dataclass(frozen=True)
class LocalFit:
    """local-notears: one participant's fit (its DAG is the outcome's ``local`` entry)."""

    participant: int
    outer_steps: int
    h: float
    converged: bool
    removed_for_acyclicity: list


# ----------------------------------------------------------------------------------------------
# the outcomes
# ----------------------------------------------------------------------------------------------


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
    #: the driver's timing (the report adds ``workers`` and ``wall_s``)
    timing: Union[AdmmTiming, SolverTiming]
    #: what the messages carried, in words (the report's ``communication.encoding`` / ``note``)
    messages: str
    #: the warnings the driver emitted, in order (the run appends its own)
    warnings: list = field(default_factory=list)
    #: per-participant DAGs (local-notears)
    local: Optional[list] = None
    #: edge confidence a private driver made by resampling its releases (``--dp --bootstrap``;
    #: :class:`bnsl_cli.confidence.Replicates`, weights in original units)
    confidence: Optional[object] = None
    #: the weight threshold the finished graph went through (``None``: none; a score decided the
    #: edges): the report's ``options.threshold_applied``
    threshold_applied: Optional[float] = None


@dataclass
class AdmmOutcome(Outcome):
    """fed-sparse, fed-bnsl: the ADMM rounds (``history``: one record per round), the polish
    entry (``None`` for a method without a polish) and the coordinator's solver issues."""

    stopped_early: bool = False
    final: Optional[AdmmFinal] = None
    history: list = field(default_factory=list)  # of AdmmRound
    removed_for_acyclicity: list = field(default_factory=list)
    polish: Optional[Union[PolishApplied, PolishSkipped]] = None
    solver_issues: list = field(default_factory=list)


@dataclass
class SolverOutcome(Outcome):
    """The pooled-statistics methods, notears: one solve (``history``: its outer steps, or a method's
    own entries such as its stages), and where they apply the statistics read from the pooled moments
    (``standardize``) and a method's own section (``method_entry``: a typed entry whose class names
    its report key as ``REPORT_KEY``, placed before ``standardize``)."""

    final: Optional[SolverFinal] = None
    history: list = field(default_factory=list)  # of SolverStep, or a method's own entries
    removed_for_acyclicity: list = field(default_factory=list)
    solver_issues: list = field(default_factory=list)
    method_entry: Optional[object] = None
    standardize: Optional[PooledStats] = None


@dataclass
class LocalOutcome(Outcome):
    """local-notears: one fit per participant (``per_participant``; their DAGs are ``local``)."""

    per_participant: list = field(default_factory=list)  # of LocalFit
