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

import math
from dataclasses import asdict, dataclass, fields
from typing import Optional, Sequence

from bnsl_cli.errors import BnslError, OptionError, PrivacyBudgetError
from bnsl_cli.federated.methods import METHODS, PRIVATE_METHODS, check_method_options, default_method, method_spec
from bnsl_cli.knowledge import Knowledge, KnowledgeSource
from bnsl_cli.privacy.accountant import validate_delta, validate_epsilon
from bnsl_cli.privacy.defaults import DP_ROUNDS, MEAN_SHARE, MOMENT_SHARE, POLISH_SHARE, dp_steps
from bnsl_cli.privacy.release_plan import calibrate_releases, ledger_of, spend_of
from bnsl_cli.privacy.releases import PlannedRelease, ReleaseKind
from bnsl_cli.privacy.split_noise import distribute_noise

__all__ = [
    "LearnConfig",
    "DPConfig",
    "ParticipantShape",
    "Shapes",
    "PenaltyPlan",
    "PrivacyPlan",
    "RunPlan",
    "CLIP_LEVELS",
    "CONVERSIONS",
    "PLAN_VERSION",
    "default_delta",
    "default_steps",
    "resolve_privacy",
]

PLAN_VERSION = 1
CLIP_LEVELS = ("auto", "adaptive", "static")
CONVERSIONS = ("tight", "simple")
#: ``clip_levels="auto"`` uses adaptive clip levels below this many variables, static ones from it on.
AUTO_STATIC_FROM_D = 50
#: Weight threshold when ``threshold`` is not given.
DEFAULT_THRESHOLD = 0.3
#: Rounds of a non-private run when ``rounds`` is not given.
DEFAULT_ROUNDS = 80


def default_steps(d: int) -> int:
    """PGCD steps per round (non-private): ``3d``. Measured at d = 20 (ER1, P = 8, 5000 rows,
    5 seeds): mean SHD 3.0 / 2.6 / 2.0 / 1.4 with T = d / 2d / 3d / 5d, bytes rising with T
    (CHANGELOG)."""
    return 3 * d


def default_delta(rows: Sequence[int]) -> float:
    """``1 / n_p²`` of the smallest participant."""
    return 1.0 / float(min(rows)) ** 2


# ----------------------------------------------------------------------------------------------
# the user's choices
# ----------------------------------------------------------------------------------------------


@dataclass
class DPConfig:
    """Privacy options. ``delta=None`` means ``1/n_p²`` of the smallest participant."""

    epsilon: float
    delta: Optional[float] = None
    clip: float = 1.5
    selection_share: float = 0.5
    conversion: str = "tight"
    public_means: bool = False
    value_bound: Optional[float] = None
    clip_levels: str = "auto"
    polish_share: float = POLISH_SHARE  # of the whole budget, for the polish's second moments (fed-sparse)
    #: "auto" | "distributed" | "per-site": who adds the noise of a summed release (fed-suffstats;
    #: :func:`bnsl_cli.privacy.split_noise.distribute_noise`)
    noise: str = "auto"
    #: distributed noise: the guarantee holds against this many colluding sites
    collusion_tolerance: int = 0
    accountant: str = "pld"  # pld | zcdp: reads the ledger for the calibration, the report and privacy-budget


@dataclass
class LearnConfig:
    """Options of a learning run (``None`` means the method's default)."""

    #: ``None``: the registry's default (:func:`~bnsl_cli.federated.methods.default_method`), filled
    #: in by :meth:`check` once: fed-sparse, or with ``dp`` the ``--dp`` default (fed-suffstats)
    method: Optional[str] = None
    lam: Optional[float] = None
    #: ``None``: :data:`DEFAULT_THRESHOLD` for the consensus, and the polish's score alone decides
    #: the final edges of a non-private fed-sparse run; a value given is applied after the polish too
    threshold: Optional[float] = None
    rounds: Optional[int] = None
    steps: Optional[int] = None
    rho1: float = 1e-3
    rho2: float = 1e-3
    rho1_growth: float = 1.75
    rho2_growth: float = 1.25
    rho_max: float = 1e16
    tol: float = 1e-5
    h_tol: float = 1e-8
    gap_tol: float = 1e-3
    seed: Optional[int] = None
    #: fed-sparse: consensus entries |W_ij| < snap are set to exactly 0 before the broadcast (a hard
    #: threshold inside the ADMM, far below the output threshold). Measured (CHANGELOG): 0.05 against
    #: 1e-3 gives the same or lower SHD with about 3× fewer bytes down and fewer rounds; 0.1 costs
    #: accuracy.
    snap: float = 0.05
    #: fed-sparse: after the rounds, a score-based local search on the consensus DAG with pooled
    #: second moments on the pairs it needs (:mod:`bnsl_cli.federated.polish`). Measured
    #: (CHANGELOG, benchmarks/bench_learn.py): mean SHD 1.8 → 0.6 at d = 20 (5 seeds), 26.7 → 4.7 at
    #: d = 200 (3 seeds), for about 2 % more bytes.
    polish: bool = True
    server_ftol: float = 1e-6
    #: the coordinator's acyclicity function: "expm" (NOTEARS), "logdet" (DAGMA), see bnsl_cli.numerics,
    #: or "auto" (:func:`default_acyclicity`, resolved in :meth:`RunPlan.resolve`)
    acyclicity: str = "auto"
    workers: Optional[int] = 1  # participant worker processes (None: one per available CPU, at most P)
    personal: bool = False
    #: a pre-round exchange of column statistics; every participant standardises its columns
    standardize: bool = False
    #: keep every per-round record in the report (otherwise summarised)
    trace: bool = False
    dp: Optional[DPConfig] = None
    #: prior knowledge as given (``--require``/``--forbid``/``--knowledge``), checked against the
    #: columns in :meth:`RunPlan.resolve`
    knowledge: Optional[KnowledgeSource] = None

    def check(self) -> None:
        """The checks that need no data (the CLI calls this before reading the shards;
        :meth:`RunPlan.resolve` calls it too). Resolves ``method`` when ``None``; refuses an option
        the method does not take (:func:`~bnsl_cli.federated.methods.check_method_options`)."""
        if self.method is None:
            self.method = default_method(self.dp is not None)
        spec = method_spec(self.method)
        _whole("--rounds", self.rounds, allow_none=True)
        _whole("--steps", self.steps, allow_none=True)
        _whole("--workers", self.workers, allow_none=True)
        if self.seed is not None:
            _whole("--seed", self.seed, low=0)
        if self.threshold is not None:
            _at_least("--threshold", self.threshold, 0.0)
        _at_least("--snap", self.snap, 0.0)
        if self.acyclicity not in ("auto", "expm", "logdet"):
            raise OptionError(f"--acyclicity: unknown function {self.acyclicity!r}; choose auto, expm or logdet")
        if self.acyclicity != "auto" and self.acyclicity not in spec.acyclicities:
            able = " or ".join(m for m in METHODS if self.acyclicity in method_spec(m).acyclicities)
            raise OptionError(
                f"--acyclicity {self.acyclicity} works with --method {able} only ({self.method} uses NOTEARS' "
                f"{'/'.join(spec.acyclicities)} function); drop the option"
            )
        if self.lam is not None:
            _at_least("--lambda", self.lam, 0.0)
        for name, v in (("--rho1", self.rho1), ("--rho2", self.rho2), ("rho_max", self.rho_max)):
            _positive(name, v)
        _at_least("--rho1-growth", self.rho1_growth, 1.0)
        _at_least("--rho2-growth", self.rho2_growth, 1.0)
        for name, v in (("tol", self.tol), ("h_tol", self.h_tol), ("gap_tol", self.gap_tol), ("server_ftol", self.server_ftol)):
            _positive(name, v)
        if self.dp is not None:
            if not spec.private:
                private = ", ".join(PRIVATE_METHODS)
                raise OptionError(
                    f"--dp is not possible with --method {self.method}: it would use the raw rows without any "
                    f"privacy mechanism; use --method {private.replace(', ', ' or ')}"
                )
            _check_dp(self.dp)
            if spec.polishable and self.polish and self.dp.polish_share == 0.0:
                raise PrivacyBudgetError("--polish-share 0 leaves the polish no budget; use --no-polish to skip it")
        check_method_options(self)


def _whole(name, v, *, allow_none=False, low=1):
    if v is None and allow_none:
        return
    try:
        ok = not isinstance(v, bool) and float(v).is_integer() and int(v) >= low
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise OptionError(f"{name} must be a whole number ≥ {low}, got {v!r}")


def _finite(name, v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise OptionError(f"{name} must be a number, got {v!r}") from None
    if not math.isfinite(x):
        raise OptionError(f"{name} must be a finite number, got {v!r}")
    return x


def _at_least(name, v, low):
    if not _finite(name, v) >= low:
        raise OptionError(f"{name} must be ≥ {low:g}, got {v!r}")


def _positive(name, v):
    if not _finite(name, v) > 0:
        raise OptionError(f"{name} must be > 0, got {v!r}")


def _check_dp(dp: DPConfig) -> None:
    validate_epsilon(dp.epsilon)
    if dp.delta is not None:
        validate_delta(dp.delta)
    if dp.conversion not in CONVERSIONS:
        raise OptionError(f"--conversion: unknown conversion {dp.conversion!r}; use tight or simple")
    if dp.accountant not in ("pld", "zcdp"):
        raise OptionError(f"--accountant: unknown accountant {dp.accountant!r}; use pld or zcdp")
    if dp.clip_levels not in CLIP_LEVELS:
        raise OptionError(f"--clip-levels: unknown value {dp.clip_levels!r}; use auto, adaptive or static")
    if not (isinstance(dp.clip, (int, float)) and math.isfinite(dp.clip) and dp.clip > 0):
        raise PrivacyBudgetError(f"--clip must be a finite number > 0, got {dp.clip!r}")
    if dp.value_bound is not None and not (math.isfinite(dp.value_bound) and dp.value_bound > 0):
        raise PrivacyBudgetError(f"--value-bound must be a finite number > 0, got {dp.value_bound!r}")
    if not 0.0 <= dp.polish_share < 1.0:
        raise PrivacyBudgetError(f"--polish-share must lie in [0, 1), got {dp.polish_share:g}")
    if not 0.0 < dp.selection_share < 1.0:
        raise PrivacyBudgetError(f"--selection-share must lie in (0, 1), got {dp.selection_share:g}")


# ----------------------------------------------------------------------------------------------
# the data's public shape
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParticipantShape:
    """What is public about one participant: its label (file), its row count, and the file's
    SHA-256 when known."""

    label: str
    rows: int
    sha256: Optional[str] = None

    def to_dict(self) -> dict:
        return {"label": self.label, "rows": self.rows, "sha256": self.sha256}


@dataclass(frozen=True)
class Shapes:
    """Column names and the participants' public shapes."""

    names: tuple
    participants: tuple

    @classmethod
    def of_tables(cls, tables) -> "Shapes":
        if not tables:
            raise OptionError("no participants: give at least one shard")
        names = tuple(tables[0].names)
        return cls(
            names,
            tuple(ParticipantShape(str(t.path), int(t.n), getattr(t, "sha256", None)) for t in tables),
        )


# ----------------------------------------------------------------------------------------------
# the plan
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PenaltyPlan:
    """ρ₁ (acyclicity) and ρ₂ (consensus) start values, growth factors and cap."""

    rho1: float
    rho2: float
    growth1: float
    growth2: float
    cap: float


@dataclass(frozen=True)
class PrivacyPlan:
    """The privacy part of a plan: the target, the options that shape the releases, and the
    verified release list (one participant's releases; every participant makes the same)."""

    epsilon: float
    delta: float
    delta_given: bool
    conversion: str
    rho_target: float  # ρ* of (ε, δ)
    clip: float
    clip_levels: str  # resolved: adaptive | static (fed-sparse), row-l2 (fed-bnsl)
    selection_share: float
    mean_share: float
    moment_share: float
    polish_share: float
    public_means: bool
    value_bound: Optional[float]
    rounds: Optional[int]  # the K × T the DP-PGCD steps are planned for (None: no iterative release)
    steps: Optional[int]
    releases: tuple  # of PlannedRelease
    accountant: str = "zcdp"  # how the release list's spend is read (pld | zcdp)

    def multiplier(self, kind: ReleaseKind) -> Optional[float]:
        """Noise multiplier of the planned release ``kind`` (``None`` when not planned)."""
        for r in self.releases:
            if r.kind == kind:
                return r.multiplier
        return None

    def count(self, kind: ReleaseKind) -> int:
        return sum(r.count for r in self.releases if r.kind == kind)

    @property
    def rho(self) -> float:
        """Planned zCDP spend of one participant (all releases)."""
        return ledger_of(self.releases).max_rho()

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["releases"] = [r.to_dict() for r in self.releases]
        return d

    def summary(self) -> dict:
        """The plan as the report's ``privacy.plan`` and ``privacy-budget --json`` print it: the
        target, the budget split, the release list (the noise every release uses) and, by name, the
        multipliers and budgets read from that list."""
        K = ReleaseKind
        rel = self.releases
        sel = [r for r in rel if r.kind == K.SELECTION]
        upd = [r for r in rel if r.kind == K.UPDATE]
        eps_spent, rho_spent = self.spend()
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho_target,
            "conversion": self.conversion,
            "accountant": self.accountant,
            "rounds": self.rounds,
            "steps": self.steps,
            "selection_share": self.selection_share,
            "moment_share": self.moment_share,
            "mean_share": self.mean_share,
            "polish_share": self.polish_share,
            "releases": [r.to_dict() for r in rel],
            "rho_per_step": (sel[0].rho_each + upd[0].rho_each) if sel else None,
            "rho_selection_per_step": sel[0].rho_each if sel else None,
            "rho_update_per_step": upd[0].rho_each if upd else None,
            "rho_iterations": sum(r.rho for r in sel + upd) if sel else None,
            "selection_epsilon_per_step": 2.0 / sel[0].multiplier if sel else None,
            "rho_means": sum(r.rho for r in rel if r.kind in (K.RANGE_RAW, K.COLUMN_MEANS)),
            "rho_moments": sum(r.rho for r in rel if r.kind in (K.RANGE_CENTRED, K.SECOND_MOMENTS)),
            "rho_polish": sum(r.rho for r in rel if r.kind == K.POLISH),
            "rho_covariance": sum(r.rho for r in rel if r.kind == K.COVARIANCE),
            "gumbel_multiplier": self.multiplier(K.SELECTION),
            "sigma_multiplier": self.multiplier(K.UPDATE) or self.multiplier(K.COVARIANCE) or self.multiplier(K.MOMENT_MATRIX),
            "rho_moment_matrix": sum(r.rho for r in rel if r.kind == K.MOMENT_MATRIX),
            "moment_multiplier": self.multiplier(K.SECOND_MOMENTS),
            "mean_multiplier": self.multiplier(K.COLUMN_MEANS),
            "range_multipliers": {
                r.kind.value: r.multiplier for r in rel if r.kind in (K.RANGE_RAW, K.RANGE_CENTRED)
            },
            "polish_multiplier": self.multiplier(K.POLISH),
            "epsilon_planned": eps_spent,
            "rho_planned": rho_spent,
        }

    def spend(self) -> tuple[float, float]:
        """``(ε, ρ)`` of the whole release list, read from its ledger by the accountant."""
        return spend_of(self.releases, self.delta, self.conversion, self.accountant)

    @classmethod
    def from_dict(cls, d: dict) -> "PrivacyPlan":
        kw = dict(d)
        kw["releases"] = tuple(PlannedRelease.from_dict(r) for r in d["releases"])
        return cls(**kw)


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
    def P(self) -> int:
        return len(self.participants)

    @property
    def rows(self) -> list:
        return [p.rows for p in self.participants]

    @property
    def private(self) -> bool:
        return self.privacy is not None

    # -- resolution -----------------------------------------------------------------------------
    @classmethod
    def resolve(cls, options: LearnConfig, shapes: Shapes) -> "RunPlan":
        """Check every option against the method and the data's shape; fill in the defaults;
        for a private run calibrate and verify the noise. Raises :class:`OptionError` (a bad
        option), :class:`PrivacyBudgetError` (a privacy request that cannot be honoured) or
        :class:`BnslError`."""
        options.check()
        spec = method_spec(options.method)
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
        lam = options.lam
        if lam is None:
            lam = spec.dp_lambda if (dp is not None and spec.dp_lambda is not None) else spec.default_lambda
            if spec.lambda_sites is not None and dp is None:
                # the local losses are normalised by the total n, so the consensus problem carries
                # Σ_p λ_p: keep that total fixed (λ_p = default at P = lambda_sites) whatever the number of sites
                lam = lam * spec.lambda_sites / len(parts)
        rounds = options.rounds if options.rounds is not None else (DP_ROUNDS if dp is not None else DEFAULT_ROUNDS)
        steps = options.steps if options.steps is not None else (dp_steps(d) if dp is not None else default_steps(d))
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
            acyclicity=default_acyclicity(options.method, dp is not None)
            if options.acyclicity == "auto" else str(options.acyclicity),
            knowledge=None if options.knowledge is None else options.knowledge.resolve(names),
        )
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
        k = d.get("knowledge")
        kw["knowledge"] = None if k is None else Knowledge.from_dict(k, kw["names"])
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


def default_acyclicity(method: str, private: bool) -> str:
    """The acyclicity function of ``--acyclicity auto`` (the registry's ``default_acyclicity``, or
    ``dp_acyclicity`` under --dp): logdet for non-private fed-sparse, expm otherwise. Measured
    (benchmarks/RESULTS.md, "Acyclicity default"): on the 24 fed-sparse groups of the accuracy grid
    logdet met the rule set in advance on all 20 non-private groups (mean SHD change −0.25) but not
    on one DP group (SF2 ε = 1: +6.3 ± 0.7), so private runs keep expm; the other methods' solvers
    use expm."""
    spec = method_spec(method)
    return spec.dp_acyclicity if private else spec.default_acyclicity


def resolve_privacy(
    method: str,
    dp: DPConfig,
    *,
    delta: float,
    rounds: int,
    steps: int,
    polish: bool,
    d: Optional[int] = None,
    mean_share: Optional[float] = None,
    moment_share: Optional[float] = None,
) -> PrivacyPlan:
    """The privacy part of a plan for ``method``: the verified release list for (ε, δ) — what
    ``learn --dp`` runs and ``privacy-budget`` prints. ``mean_share``/``moment_share`` default to
    ``learn``'s (``MEAN_SHARE``, 0 with public means; ``MOMENT_SHARE``)."""
    spec = method_spec(method)
    if not spec.private:
        raise OptionError(f"--dp is not possible with --method {method}")
    _check_dp(dp)
    delta = validate_delta(delta)
    if mean_share is None:
        mean_share = 0.0 if dp.public_means else MEAN_SHARE
    if moment_share is None:
        moment_share = MOMENT_SHARE
    for name, v in (("the mean share", mean_share), ("the second-moment share", moment_share)):
        if not 0.0 <= v < 1.0:
            raise PrivacyBudgetError(f"{name} must lie in [0, 1), got {v!r}")
    if dp.public_means and mean_share:
        raise PrivacyBudgetError("public means make no mean release; the mean share must be 0")
    if moment_share <= 0:
        raise PrivacyBudgetError("the second-moment share must be > 0: the clip levels need the second moments")
    _whole("--rounds", rounds)
    _whole("--steps", steps)
    polish_share = float(dp.polish_share) if (polish and spec.polishable) else 0.0
    build = spec.release_builder(
        rounds=int(rounds), steps=int(steps), selection_share=float(dp.selection_share), mean_share=float(mean_share),
        moment_share=float(moment_share), polish_share=polish_share, value_bound_given=dp.value_bound is not None,
    )
    releases, rho_star = calibrate_releases(build, dp.epsilon, delta, dp.conversion, dp.accountant)
    iterative = any(r.kind == ReleaseKind.SELECTION for r in releases)
    levels = dp.clip_levels
    if not spec.one_matrix:  # DP-PGCD: clip levels per coordinate
        if levels == "auto" and d is not None:
            levels = "adaptive" if d < AUTO_STATIC_FROM_D else "static"
    else:
        levels = "row-l2"
    return PrivacyPlan(
        epsilon=float(dp.epsilon), delta=float(delta), delta_given=dp.delta is not None, conversion=dp.conversion,
        rho_target=float(rho_star), clip=float(dp.clip), clip_levels=levels,
        selection_share=float(dp.selection_share), mean_share=float(mean_share), moment_share=float(moment_share),
        polish_share=polish_share, public_means=bool(dp.public_means),
        value_bound=None if dp.value_bound is None else float(dp.value_bound),
        rounds=int(rounds) if iterative else None, steps=int(steps) if iterative else None,
        releases=tuple(releases), accountant=dp.accountant,
    )
