"""The run plan: every option of a learning run checked and resolved once, then frozen.

``RunPlan.resolve(options, shapes)`` takes the user's choices (:class:`LearnConfig`, with an
optional :class:`DPConfig`) and the public shape of the data (column names; per participant its
label and row count) and returns an immutable :class:`RunPlan`. Every check happens there: the
method is known, a private run is possible for the method, every option is in range, and for a
private run the noise is calibrated and verified. The plan holds the resolved schedule and, for a
private run, the **release list** (every planned release: kind, mechanism, noise multiplier,
count) that the participants use, the ledger is checked against, and the report and
``privacy-budget`` print.

``plan.to_dict()`` / ``RunPlan.from_dict(d)`` round-trip exactly through JSON: a remote site
receives the plan and checks it against its own limits before it releases anything.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, fields, replace
from typing import Optional

from bnsl_cli.errors import BnslError, NoisyReleaseWarning, OptionError, PrivacyBudgetError
from bnsl_cli.federated.methods.registry import method_spec, methods_where
from bnsl_cli.column_kinds import CATEGORICAL, ColumnKinds
from bnsl_cli.knowledge import Knowledge
from bnsl_cli.plan.options import LearnConfig
from bnsl_cli.plan.privacy_plan import PrivacyPlan, resolve_privacy
from bnsl_cli.plan.shapes import ParticipantShape, Shapes
from bnsl_cli.privacy.defaults import DP_ROUNDS, default_delta, dp_steps
from bnsl_cli.privacy.split_noise import distribute_noise

__all__ = [
    "PenaltyPlan",
    "RunPlan",
    "PLAN_VERSION",
    "DEFAULT_THRESHOLD",
    "DEFAULT_ROUNDS",
    "default_acyclicity",
    "default_delta",
    "check_verdict",
    "default_steps",
]

PLAN_VERSION = 1
#: Weight threshold when ``threshold`` is not given.
DEFAULT_THRESHOLD = 0.3
#: Rounds of a non-private run when ``rounds`` is not given.
DEFAULT_ROUNDS = 80


def default_steps(d: int) -> int:
    """PGCD steps per round (non-private): ``3d``. Measured at d = 20 (ER1, P = 8, 5000 rows,
    5 seeds): mean SHD 3.0 / 2.6 / 2.0 / 1.4 with T = d / 2d / 3d / 5d, bytes rising with T
    (CHANGELOG)."""
    return 3 * d




@dataclass(frozen=True)
class PenaltyPlan:
    """ρ₁ (acyclicity) and ρ₂ (consensus) start values, growth factors and cap."""

    rho1: float
    rho2: float
    growth1: float
    growth2: float
    cap: float



@dataclass(frozen=True)
class RunPlan:
    """An immutable, fully resolved learning run (see the module docstring)."""

    method: str
    names: tuple
    participants: tuple  # of ParticipantShape
    n_total: int
    lam: float
    threshold: float
    rounds: int
    steps: int
    penalty: PenaltyPlan
    tol: float
    h_tol: float
    gap_tol: float
    server_ftol: float
    snap: float
    polish: bool
    seed: Optional[int]
    workers: Optional[int]
    personal: bool
    standardize: bool = False
    trace: bool = False
    privacy: Optional[PrivacyPlan] = None
    acyclicity: str = "expm"
    version: int = PLAN_VERSION
    #: the user gave ``threshold`` (otherwise the default, and the polish's score decides the edges)
    threshold_given: bool = True
    #: checked prior knowledge (required / forbidden edges, tiers); ``None``: none given
    knowledge: Optional[Knowledge] = None
    #: edge confidence (``--bootstrap``): replicates, and the averaged network's threshold (``None``:
    #: the run's own graph, annotated; ``min_strength_auto``: estimated from the strengths)
    bootstrap: int = 0
    min_strength: Optional[float] = None
    min_strength_auto: bool = False
    #: a networked bootstrap replicate (``bnsl serve --bootstrap``, non-private): every site runs it on
    #: its rows resampled from a stream of its own that the coordinator never learns
    #: (:mod:`bnsl_cli.net.site_sessions`); ``None``: the rows as they are
    replicate: Optional[int] = None
    #: the variables' kinds when some are categorical (:class:`~bnsl_cli.io.kinds.ColumnKinds`): the
    #: protocol's columns (``names``) are then the expanded ones, the graph is over ``columns.names``
    columns: Optional[ColumnKinds] = None
    #: with categorical columns: whether the second phase may ask the sites for contingency tables of a
    #: variable with its neighbours (``bnsl join --allow-tables`` at every site of a networked run; always in
    #: one process). Such a table is a finer release than the moments: over few columns it lists how many
    #: rows hold each combination of levels.
    tables: bool = True

    def forbidden_mask(self):
        """The d × d forbidden mask of the plan's knowledge (``None`` without knowledge)."""
        return None if self.knowledge is None else self.knowledge.forbidden_mask()

    def required_mask(self):
        """The d × d required mask of the plan's knowledge (``None`` without knowledge)."""
        return None if self.knowledge is None else self.knowledge.required_mask()

    @property
    def d(self) -> int:
        return len(self.names)

    @property
    def variables(self) -> tuple:
        """The graph's nodes: the variables (``names`` unless some columns are categorical)."""
        return self.names if self.columns is None else tuple(self.columns.names)

    def on_variables(self) -> "RunPlan":
        """The plan as the finished graph sees it: its names the variables (itself without categorical
        columns)."""
        return self if self.columns is None else replace(self, names=self.variables, columns=None)

    @property
    def P(self) -> int:
        return len(self.participants)

    @property
    def rows(self) -> list:
        return [p.rows for p in self.participants]

    @property
    def private(self) -> bool:
        return self.privacy is not None

    @property
    def spec(self):
        """The method's registry entry (:class:`~bnsl_cli.federated.method_spec.MethodSpec`): code that
        holds a plan asks it, not the registry."""
        return method_spec(self.method)

    # -- resolution -----------------------------------------------------------------------------
    @classmethod
    def resolve(cls, options: LearnConfig, shapes: Shapes) -> "RunPlan":
        """Check every option against the method and the data's shape; fill in the defaults;
        for a private run calibrate and verify the noise. Raises :class:`OptionError` (a bad
        option), :class:`PrivacyBudgetError` (a privacy request that cannot be honoured) or
        :class:`BnslError`."""
        options.check()
        spec = options.spec
        names = tuple(str(n) for n in shapes.names)
        if not names:
            raise OptionError("the data have no columns")
        parts = tuple(shapes.participants)
        if not parts:
            raise OptionError("no participants: give at least one shard")
        for p in parts:
            if not (isinstance(p.rows, int) and p.rows >= 1):
                raise BnslError(f"{p.label}: a participant needs at least one row, got {p.rows!r}")
        d = len(names)
        dp = options.dp
        # the solver's defaults: the method's own, or (a method that learns from released moments)
        # those of its moment learner run in the clear
        solver = spec if spec.moment_learner is None else method_spec(spec.moment_learner)
        solver_dp = dp is not None and spec.moment_learner is None
        lam = options.lam
        if lam is None:
            lam = solver.dp_lambda if (solver_dp and solver.dp_lambda is not None) else solver.default_lambda
            if solver.lambda_sites is not None and not solver_dp:
                # the local losses are normalised by the total n, so the consensus problem carries
                # Σ_p λ_p: keep that total fixed (λ_p = default at P = lambda_sites) whatever the number of sites
                lam = lam * solver.lambda_sites / len(parts)
        rounds = options.rounds if options.rounds is not None else (DP_ROUNDS if solver_dp else DEFAULT_ROUNDS)
        steps = options.steps if options.steps is not None else (dp_steps(d) if solver_dp else default_steps(d))
        plan = dict(
            method=options.method,
            names=names,
            participants=parts,
            n_total=int(sum(p.rows for p in parts)),
            lam=float(lam),
            threshold=float(DEFAULT_THRESHOLD if options.threshold is None else options.threshold),
            threshold_given=options.threshold is not None,
            rounds=int(rounds),
            steps=int(steps),
            penalty=PenaltyPlan(
                float(options.rho1), float(options.rho2), float(options.rho1_growth), float(options.rho2_growth),
                float(options.rho_max),
            ),
            tol=float(options.tol),
            h_tol=float(options.h_tol),
            gap_tol=float(options.gap_tol),
            server_ftol=float(options.server_ftol),
            snap=float(options.snap),
            polish=bool(options.polish and spec.polishable),
            seed=None if options.seed is None else int(options.seed),
            workers=None if options.workers is None else int(options.workers),
            personal=bool(options.personal),
            standardize=bool(options.standardize),
            trace=bool(options.trace),
            privacy=None,
            acyclicity=default_acyclicity(solver.name, solver_dp)
            if options.acyclicity == "auto" else str(options.acyclicity),
            knowledge=None if options.knowledge is None else options.knowledge.resolve(
                names if shapes.columns is None else tuple(shapes.columns.names)),
            bootstrap=int(options.bootstrap),
            min_strength=None if options.min_strength in (None, "auto") else float(options.min_strength),
            min_strength_auto=options.min_strength == "auto",
            columns=shapes.columns if shapes.columns is not None and shapes.columns.has_categorical else None,
        )
        if plan["columns"] is not None:
            check_kinds(spec, plan["columns"], dp is not None, bool(options.standardize))
        if dp is not None:
            delta = dp.delta if dp.delta is not None else default_delta([p.rows for p in parts])
            plan["privacy"] = resolve_privacy(
                options.method, dp, delta=delta, rounds=plan["rounds"], steps=plan["steps"], polish=plan["polish"], d=d
            )
            plan["privacy"] = distribute_noise(plan["privacy"], options.method, spec.distributed_noise, len(parts),
                                               dp.noise, dp.collusion_tolerance)
        return cls(**plan)

    # -- serialisation ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """JSON-able; :meth:`from_dict` gives back an equal plan."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["names"] = list(self.names)
        d["participants"] = [p.to_dict() for p in self.participants]
        d["penalty"] = asdict(self.penalty)
        d["privacy"] = None if self.privacy is None else self.privacy.to_dict()
        if self.knowledge is None:
            del d["knowledge"]  # a plan without knowledge reads as before
        else:
            d["knowledge"] = self.knowledge.to_dict()
        if not self.bootstrap:  # a plan without edge confidence reads as before
            for key in ("bootstrap", "min_strength", "min_strength_auto"):
                del d[key]
        if self.replicate is None:
            del d["replicate"]
        if self.columns is None:  # a plan of continuous columns reads as before
            del d["columns"]
            del d["tables"]
        else:
            d["columns"] = self.columns.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunPlan":
        if d.get("version") != PLAN_VERSION:
            raise BnslError(f"run plan version {d.get('version')!r} is not supported (this build reads {PLAN_VERSION})")
        kw = dict(d)
        kw["names"] = tuple(d["names"])
        kw["participants"] = tuple(ParticipantShape(**p) for p in d["participants"])
        kw["penalty"] = PenaltyPlan(**d["penalty"])
        kw["privacy"] = None if d["privacy"] is None else PrivacyPlan.from_dict(d["privacy"])
        c = d.get("columns")
        kw["columns"] = None if c is None else ColumnKinds.from_dict(c)
        k = d.get("knowledge")
        kw["knowledge"] = None if k is None else Knowledge.from_dict(
            k, kw["names"] if kw["columns"] is None else kw["columns"].names)
        return cls(**kw)

    def options_dict(self) -> dict:
        """The resolved options as the report's ``options`` shows them."""
        return {
            "method": self.method, "lam": self.lam, "threshold": self.threshold, "rounds": self.rounds,
            "steps": self.steps, "rho1": self.penalty.rho1, "rho2": self.penalty.rho2,
            "rho1_growth": self.penalty.growth1, "rho2_growth": self.penalty.growth2, "rho_max": self.penalty.cap,
            "tol": self.tol, "h_tol": self.h_tol, "gap_tol": self.gap_tol, "seed": self.seed, "snap": self.snap,
            "polish": self.polish, "server_ftol": self.server_ftol, "workers": self.workers,
            "personal": self.personal, "standardize": self.standardize, "trace": self.trace,
            "acyclicity": self.acyclicity,
        }


def check_verdict(plan: "RunPlan") -> None:
    """Refuse (:class:`PrivacyBudgetError`, exit 5) a private plan whose releases are expected to be lost
    in their noise, and warn (:class:`NoisyReleaseWarning`) for one expected to be weak — the method's
    ``plan_verdict``, from public inputs only, the rule ``privacy-budget`` answers with — so that whether
    a run works, warns or is refused is decided before any value is drawn. The coordinator's
    entry points call it (``learn``, and the session that ``serve`` and the Flower ServerApp share)
    before a participant is built or a plan is sent."""
    spec = plan.spec
    if plan.private and spec.plan_verdict is not None:
        verdict, why = spec.plan_verdict(plan)
        if verdict == "refused":
            raise PrivacyBudgetError(why)
        if verdict == "warns":
            warnings.warn(why, NoisyReleaseWarning, stacklevel=2)


def default_acyclicity(method: str, private: bool) -> str:
    """The acyclicity function of ``--acyclicity auto`` (the registry's ``default_acyclicity``, or
    ``dp_acyclicity`` under --dp): logdet for non-private fed-sparse, expm otherwise. Measured
    (benchmarks/RESULTS.md, "Acyclicity default"): on the 24 fed-sparse groups of the accuracy grid
    logdet met the rule set in advance on all 20 non-private groups (mean SHD change −0.25) but not
    on one DP group (SF2 ε = 1: +6.3 ± 0.7), so private runs keep expm; the other methods' solvers
    use expm."""
    spec = method_spec(method)
    return spec.dp_acyclicity if private else spec.default_acyclicity


def check_kinds(spec, columns: ColumnKinds, private: bool, standardize: bool) -> None:
    """A plan with categorical columns, checked against what the method declares it takes
    (``MethodSpec.column_kinds``; ``dp_column_kinds`` in a private run). One line naming the first
    categorical column and the methods that take it."""
    first = next(n for n in columns.names if columns.kind(n) == CATEGORICAL)
    if private:
        if CATEGORICAL not in spec.dp_column_kinds:
            raise OptionError(
                f"column {first!r} is categorical: under --dp a categorical column's levels must be public input (a "
                "schema), which this version does not take yet; run without --dp, or code the column as numbers "
                "you are willing to treat as continuous"
            )
        return
    if CATEGORICAL not in spec.column_kinds:
        takes = methods_where(lambda s: CATEGORICAL in s.column_kinds)
        raise OptionError(
            f"column {first!r} is categorical; --method {spec.name} takes continuous columns only "
            f"({', '.join(takes)} takes categorical columns)"
        )
    if standardize:
        raise OptionError(
            f"--standardize: with categorical columns ({first!r}) the score is unit-free already; leave --standardize out"
        )
