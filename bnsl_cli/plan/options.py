"""The user's choices of a learning run: :class:`LearnConfig` (with an optional :class:`DPConfig`)
and the checks that need no data (:meth:`LearnConfig.check`; :meth:`RunPlan.resolve
<bnsl_cli.plan.run_plan.RunPlan.resolve>` calls them too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from bnsl_cli.errors import OptionError, PrivacyBudgetError
from bnsl_cli.federated.methods.registry import (
    PRIVATE_METHODS,
    check_method_options,
    default_method,
    method_spec,
    methods_where,
)
from bnsl_cli.knowledge import KnowledgeSource
from bnsl_cli.privacy.accountant import accountant_option, validate_delta
from bnsl_cli.privacy.limits import validate_epsilon
from bnsl_cli.privacy.defaults import POLISH_SHARE

__all__ = ["LearnConfig", "DPConfig", "check_dp", "CLIP_LEVELS", "CONVERSIONS"]

CLIP_LEVELS = ("auto", "adaptive", "static")
CONVERSIONS = ("tight", "simple")


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
    #: "auto" | "distributed" | "per-site": who adds the noise of a summed release (a method whose sites sum their releases;
    #: :func:`bnsl_cli.privacy.split_noise.distribute_noise`)
    noise: str = "auto"
    #: distributed noise: the guarantee holds against this many colluding sites
    collusion_tolerance: int = 0
    accountant: str = "pld"  # pld | zcdp: reads the ledger for the calibration, the report and privacy-budget


@dataclass
class LearnConfig:
    """Options of a learning run (``None`` means the method's default)."""

    #: ``None``: the registry's default (:func:`~bnsl_cli.federated.methods.default_method`), filled
    #: in by :meth:`check` once: fed-sparse, or with ``dp`` the registry's ``--dp`` default
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
    #: edge confidence: this many replicates (0: none; :mod:`bnsl_cli.bootstrap`)
    bootstrap: int = 0
    #: the averaged network's strength threshold in (0, 1], ``"auto"`` (estimated from the strengths,
    #: :func:`bnsl_cli.confidence.estimated_threshold`) or ``None`` (the run's own graph, annotated)
    min_strength: Optional[object] = None

    @property
    def spec(self):
        """The method's registry entry (its default's while ``method`` is ``None``, as :meth:`check`
        resolves it): code that holds the options asks them, not the registry."""
        return method_spec(self.method if self.method is not None else default_method(self.dp is not None))

    def check(self) -> None:
        """The checks that need no data (the CLI calls this before reading the shards;
        :meth:`RunPlan.resolve` calls it too). Resolves ``method`` when ``None``; refuses an option
        the method does not take (:func:`~bnsl_cli.federated.methods.check_method_options`)."""
        if self.method is None:
            self.method = default_method(self.dp is not None)
        spec = self.spec
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
            able = " or ".join(methods_where(lambda s: self.acyclicity in s.acyclicities))
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
            check_dp(self.dp)
            if spec.polishable and self.polish and self.dp.polish_share == 0.0:
                raise PrivacyBudgetError("--polish-share 0 leaves the polish no budget; use --no-polish to skip it")
        check_method_options(self)
        self._check_confidence(spec)

    def _check_confidence(self, spec) -> None:
        _whole("--bootstrap", self.bootstrap, low=0)
        if int(self.bootstrap) > MAX_BOOTSTRAP:
            raise OptionError(f"--bootstrap must be at most {MAX_BOOTSTRAP}, got {self.bootstrap}")
        if self.min_strength is not None:
            if not self.bootstrap:
                raise OptionError("--min-strength needs --bootstrap B (the strengths come from B replicates)")
            if self.min_strength != "auto":
                x = _finite("--min-strength", self.min_strength)
                if not 0.0 < x <= 1.0:
                    raise OptionError(f"--min-strength must lie in (0, 1] or be auto, got {self.min_strength!r}")
                self.min_strength = x
        if not self.bootstrap:
            return
        if spec.per_participant_graphs:
            raise OptionError(f"--bootstrap: --method {self.method} learns one graph per participant; it has no "
                              "consensus whose edges could be counted")
        if self.dp is not None and not spec.resamples_releases:
            able = " or ".join(methods_where(lambda s: s.resamples_releases))
            raise OptionError(
                f"--bootstrap with --dp: the private {self.method} cannot resample its releases, and resampling the "
                f"rows would release them again; use --method {able} (its releases are resampled as post-processing)"
            )


#: the most replicates ``--bootstrap`` runs
MAX_BOOTSTRAP = 10000


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


def check_dp(dp: DPConfig) -> None:
    """The check of the privacy options that needs no data — the one place ``--epsilon`` is validated:
    :meth:`LearnConfig.check` runs it up front (before any data is read), and
    :func:`~bnsl_cli.plan.privacy_plan.resolve_privacy` runs it for the callers that bring their own
    :class:`DPConfig` (``privacy-budget``, a site recomputing a coordinator's plan, library users)."""
    validate_epsilon(dp.epsilon)
    if dp.delta is not None:
        validate_delta(dp.delta)
    if dp.conversion not in CONVERSIONS:
        raise OptionError(f"--conversion: unknown conversion {dp.conversion!r}; use tight or simple")
    accountant_option(dp.accountant)
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
