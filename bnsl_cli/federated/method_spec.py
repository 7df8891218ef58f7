"""What the registry (:mod:`bnsl_cli.federated.methods.registry`) knows about a method: :class:`MethodSpec`.

A leaf beside the registry, so that the modules the registry binds (a method's driver, the
statistics stage) can read a spec's facts without importing the registry."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable, Optional

from bnsl_cli.privacy.releases import ReleaseKind
from bnsl_cli.privacy.split_noise import SPLITTABLE

__all__ = ["Rounds", "Statistics", "MethodSpec"]


class Rounds(str, Enum):
    """What a plan's ``rounds`` count for the method."""

    #: ADMM rounds: one exchange with every participant per round (a site's guard counts them)
    ADMM = "admm"
    #: the outer steps of NOTEARS at the coordinator or at a site: no exchange per round
    SOLVER = "solver"


class Statistics(str, Enum):
    """Where the column statistics (the scale check, ``--standardize``) come from."""

    #: the participants answer the pre-round column-statistics exchange
    #: (:func:`bnsl_cli.federated.standardize.standardize_stage`)
    EXCHANGE = "exchange"
    #: the coordinator reads them from the pooled moment matrix (the report's ``standardize``)
    POOLED_MOMENTS = "pooled-moments"
    #: every site computes its own from its rows (its summary's ``sd``)
    SITE = "site"


@dataclass(frozen=True)
class MethodSpec:
    """Every fact about one method (see :mod:`bnsl_cli.federated.methods.registry`)."""

    name: str
    #: one line for the report and listings
    label: str
    #: ``participant(plan, pid, X, rng)`` — the site side, from the plan, the participant's index,
    #: its own rows and its own noise source only (what a remote site calls)
    participant: Callable
    #: ``drive(spec, plan, fleet, progress) -> Outcome`` — the coordinator side; it never sees rows
    drive: Callable
    rounds: Rounds
    statistics: Statistics
    default_lambda: float
    #: λ under --dp when it differs
    dp_lambda: Optional[float] = None
    #: non-private default λ scaled by ``lambda_sites / P`` (the same total ℓ₁ for any number of sites)
    lambda_sites: Optional[int] = None
    #: the participants send sparse PGCD updates (ℓ₁ on B_p, the coordinator's consensus snapped);
    #: otherwise dense updates and the ℓ₁ on the consensus W
    sparse_updates: bool = False
    #: acyclicity functions the method can use, and the default of ``--acyclicity auto``
    acyclicities: tuple = ("expm",)
    default_acyclicity: str = "expm"
    #: ``--acyclicity auto`` of a private run
    dp_acyclicity: str = "expm"
    #: a private variant exists (its releases come from ``release_builder``)
    private: bool = False
    #: ``release_builder(**shape) -> (ρ* -> [PlannedRelease])`` for a private run
    release_builder: Optional[Callable] = None
    #: the private variant releases one noisy matrix per participant (``matrix_release``) after the
    #: one-off releases; otherwise it is iterative (DP-PGCD: a selection and an update per step)
    one_matrix: bool = False
    matrix_release: Optional[ReleaseKind] = None
    #: the report's ``privacy.mechanism`` (and its addition when the polish runs)
    mechanism: str = ""
    polish_mechanism: str = ""
    #: the private variant's name in titles ("DP-Fed-BNSL noise plan")
    dp_title: str = ""
    #: the polish stage applies
    polishable: bool = False
    #: the method learns its graph at the coordinator from released (pooled) second moments with
    #: this method's non-private learner (:mod:`bnsl_cli.federated.methods.admm.on_moments`): the
    #: plan resolves λ, rounds, steps and the acyclicity function as that method's non-private
    #: defaults (its learner is post-processing: it runs in the clear on the released values)
    moment_learner: Optional[str] = None
    #: the fleet holds one participant with every row pooled (centralized NOTEARS)
    pooled: bool = False
    #: the participants exchange messages with a coordinator (report counts bytes)
    federated: bool = True
    #: one graph per participant (no consensus)
    per_participant_graphs: bool = False
    #: the private variant's driver gives edge confidence by resampling its released statistics with
    #: their sampling and release noise (post-processing: ``--dp --bootstrap B`` spends nothing more);
    #: a private run of any other method refuses ``--bootstrap``
    resamples_releases: bool = False
    #: every release of the private variant is a sum over rows in public units, so its noise can be
    #: distributed over securely summed sites (``--noise auto`` does so; privacy-budget shows both
    #: calibrations)
    distributed_noise: bool = False
    #: the report's ``privacy.clip`` when the method fixes it (not ``--clip``)
    clip_multiplier: Optional[float] = None
    clip_text: Optional[str] = None
    #: the method of ``--dp`` when none is given (exactly one private method has it; the
    #: non-private default is the registry's first entry)
    dp_default: bool = False
    #: the method-specific options of ``learn`` / ``serve`` it takes (names from
    #: :data:`bnsl_cli.federated.method_options.LEARN_OPTIONS`); any other of them given is refused
    options: frozenset = frozenset()
    #: the method-specific options of ``privacy-budget`` it takes
    #: (:data:`bnsl_cli.federated.method_options.BUDGET_OPTIONS`)
    budget_options: frozenset = frozenset()
    #: ``budget_table(spec, query, delta, resolve) -> BudgetTable``: its private variant's
    #: ``privacy-budget`` table (:mod:`bnsl_cli.privacy.budget`; ``methods/<family>/budget.py``): the noise
    #: plan ``resolve(**shape)`` resolves as ``learn --dp`` would, or with ``resolve`` ``None`` the budget
    #: the query's noise multipliers spend
    budget_table: Optional[Callable] = None
    #: ``site_sequence(plan) -> (Step, …)``: the message sequence its site answers
    #: (:mod:`bnsl_cli.federated.site_sequence`): each step's kinds, when each may come and the releases
    #: it makes; a site's guard refuses every other kind before the participant sees it
    #: (``bnsl_cli.net.policy``)
    site_sequence: Callable = lambda plan: ()
    #: ``reply_rules(plan) -> {request kind: Rule}``: what its participants' replies may hold, derived
    #: from the plan's public facts (:mod:`bnsl_cli.federated.reply_limits`; ``None``: the blanket
    #: checks only). ``run`` hands the limits built from them to the fleet.
    reply_rules: Optional[Callable] = None
    #: ``plan_verdict(plan) -> (verdict, message)``: for a private plan, ``works``, ``warns`` (a one-line
    #: warning) or ``refused`` (a one-line reason: its releases are expected to be lost in their noise),
    #: from public inputs only (rows per site, columns, ε, δ, sites, noise layout).
    #: ``plan.run_plan.check_verdict`` applies it before any value is drawn, and ``privacy-budget``
    #: answers with the same function.
    plan_verdict: Optional[Callable] = None
    #: ``plan_exchanges(plan) -> str``: what a plan runs, for the coordinator's log, when its exchanges
    #: are not ADMM rounds (e.g. "4 stages"); ``None``: "a fixed sequence of exchanges"
    plan_exchanges: Optional[Callable] = None
    #: the column kinds the method learns from (:mod:`bnsl_cli.io.kinds`): ``"continuous"`` only, or
    #: ``"categorical"`` too (its sites' statistics are over the indicator columns of the plan's
    #: ``columns``, its driver scores the variables); a plan with a kind it lacks is refused
    column_kinds: tuple = ("continuous",)
    #: the kinds a private run of the method takes (levels under --dp must be public input, a schema)
    dp_column_kinds: tuple = ("continuous",)

    @property
    def split_noise(self) -> bool:
        """The private variant has a release that may be split over securely summed sites."""
        return self.matrix_release in SPLITTABLE

    @property
    def clip_description(self) -> Optional[str]:
        """The report's ``privacy.clip.levels`` when it is not the plan's clip-level choice."""
        if self.clip_text is not None:
            return self.clip_text
        return "row L2 norm" if self.one_matrix else None
