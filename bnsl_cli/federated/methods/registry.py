"""The method registry: every fact about a method in one :class:`MethodSpec` entry.

A method is a pair of roles and the facts the rest of the package asks about it:

- ``participant(plan, pid, X, rng)`` — the site side, built from the run plan, the participant's
  index, its own rows and its own noise source only (what a remote site calls). The object answers
  encoded messages (``handle(bytes) -> bytes | None``) and ends with a JSON-able ``summary()``.
- ``drive(spec, plan, fleet, progress) -> Outcome`` — the coordinator side: the exchanges through
  the fleet, ending with ``fleet.finish()``; it never sees rows.
- what its rounds are, where its column statistics come from, its λ defaults and scaling, the
  acyclicity functions it can use, its private variant (release builder, mechanism, one matrix or
  iterative), whether the polish applies, whether its rows are pooled or it is federated at all.

Every other module reads these attributes; none compares a method's name (a test keeps it so).
Adding a method = one more entry in ``_SPECS`` and its roles in a module of this package (the
coordinator side in a module that imports no participant code).

Modules: :mod:`~bnsl_cli.federated.methods.admm` (fed-sparse, fed-bnsl),
:mod:`~bnsl_cli.federated.methods.moments` (fed-moments), :mod:`~bnsl_cli.federated.methods.suffstats`
(fed-suffstats), :mod:`~bnsl_cli.federated.methods.pooled` (notears, local-notears).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Optional

import numpy as np

from bnsl_cli.errors import OptionError, PrivacyBudgetError
from bnsl_cli.federated.methods.admm.dp_site import DPDenseParticipant, DPSparseParticipant, rho2_schedule
from bnsl_cli.federated import method_options
from bnsl_cli.federated.method_spec import MethodSpec, Rounds, Statistics
from bnsl_cli.federated.methods.admm.sequence import CONSENSUS_ROUNDS
from bnsl_cli.federated.methods.moments.site import make_moment_site
from bnsl_cli.federated.methods.suffstats.site import make_suffstats_site
from bnsl_cli.federated.audit import means_case, second_moments_case, value_range_case
from bnsl_cli.federated.methods.admm.audit import (
    covariance_case,
    pgcd_step_case,
    polish_case,
    selection_case,
    update_case,
)
from bnsl_cli.federated.methods.moments.audit import moment_matrix_case
from bnsl_cli.federated.methods.suffstats.audit import suffstats_cases
from bnsl_cli.federated.methods.admm.budget import dp_fed_bnsl_budget, dp_pgcd_budget
from bnsl_cli.federated.methods.moments.budget import dp_fed_moments_budget
from bnsl_cli.federated.methods.suffstats.budget import budget_table as fed_suffstats_budget
from bnsl_cli.federated.methods.suffstats.budget import plan_verdict as fed_suffstats_verdict
from bnsl_cli.federated.methods.suffstats.releases import plan_exchanges as suffstats_exchanges
from bnsl_cli.federated.site_sequence import POLISH_REQUEST, STATS_EXCHANGE
from bnsl_cli.federated.methods import admm, moments, pooled, suffstats
from bnsl_cli.federated.methods.admm.site import DenseParticipant, SparseParticipant
from bnsl_cli.federated.standardize import with_stats
from bnsl_cli.privacy.defaults import DP_LAMBDA
from bnsl_cli.privacy.releases import ReleaseKind

__all__ = [
    "MethodSpec",
    "Rounds",
    "Statistics",
    "METHODS",
    "PRIVATE_METHODS",
    "DEFAULT_METHOD",
    "DP_DEFAULT_METHOD",
    "default_method",
    "check_method_options",
    "check_budget_options",
    "method_spec",
    "methods_where",
    "registered",
    "make_participant",
    "audit_cases",
    "broken_audit_cases",
]



# -- the site side of the ADMM methods (their coordinator side, admm.py, imports no participant code)


def _fed_sparse_participant(plan, pid: int, X: np.ndarray, rng, preprocessed=None):
    """A Fed-Sparse-BNSL participant (DP-PGCD under a private plan)."""
    if plan.private:
        return DPSparseParticipant.from_plan(plan, pid, X, rng, preprocessed=preprocessed)
    return SparseParticipant(
        pid, X, plan.n_total, plan.lam, plan.steps, plan.tol,
        forbidden=plan.forbidden_mask(), required=plan.required_mask(), report_B=plan.personal,
        rho2_schedule=rho2_schedule(plan),
    )


def _fed_bnsl_participant(plan, pid: int, X: np.ndarray, rng, preprocessed=None):
    """A Fed-BNSL participant (one noisy covariance under a private plan)."""
    if plan.private:
        return DPDenseParticipant.from_plan(plan, pid, X, rng, preprocessed=preprocessed)
    return DenseParticipant(pid, X, plan.n_total, report_B=plan.personal, rho2_schedule=rho2_schedule(plan))


#: Method-specific options (:mod:`bnsl_cli.federated.method_options`): the ADMM penalty schedule,
#: the ℓ₁ weight, the output threshold, the acyclicity function, the standardisation; under --dp the
#: one-off releases' options (a public value bound, public means, the row clip multiplier).
_ADMM = frozenset({"--rounds", "--rho1", "--rho2", "--rho1-growth", "--rho2-growth"})
_GRAPH = frozenset({"--lambda", "--threshold", "--acyclicity", "--standardize"})
_ONE_OFFS = frozenset({"--clip", "--public-means", "--value-bound"})
#: privacy-budget: the one-off releases (their multipliers in spend mode, public means, a value bound)
_BUDGET_ONE_OFFS = frozenset({"--sigma-multiplier", "--moment-multiplier", "--mean-multiplier", "--public-means",
                              "--value-bound"})

def _fed_sparse_sequence(plan) -> tuple:
    """fed-sparse's sites: the column-statistics exchange, the consensus rounds, the polish request."""
    return (STATS_EXCHANGE, CONSENSUS_ROUNDS, POLISH_REQUEST)


def _fed_bnsl_sequence(plan) -> tuple:
    """fed-bnsl's sites: the column-statistics exchange and the consensus rounds."""
    return (STATS_EXCHANGE, CONSENSUS_ROUNDS)

_POLISH_MECHANISM = (
    "; polish: one Gaussian release of clipped second moments on the pairs the consensus selects"
)

#: Default λ per method. For the federated methods the local losses are normalised by the public
#: total n, so Fed-Sparse-BNSL's per-participant λ acts as P·λ in centralized NOTEARS units.
_SPECS = (
    MethodSpec(
        "fed-sparse", "Fed-Sparse-BNSL: ADMM + PGCD",
        participant=with_stats(_fed_sparse_participant), drive=admm.drive_admm, reply_rules=admm.reply_rules,
        rounds=Rounds.ADMM, statistics=Statistics.EXCHANGE,
        default_lambda=0.005, dp_lambda=DP_LAMBDA,
        # Non-private: the default per-participant λ is the method's default × 8 / P, i.e. the
        # same total ℓ₁ strength (0.04 in pooled-NOTEARS units) for any number of sites. Measured
        # (CHANGELOG, d = 20 ER1, 40 000 rows): consensus SHD 13.0 → 3.3 at P = 200, unchanged at P = 8.
        lambda_sites=8,
        sparse_updates=True,
        # logdet for non-private runs, expm under --dp (benchmarks/RESULTS.md, "Acyclicity default")
        acyclicities=("expm", "logdet"), default_acyclicity="logdet", dp_acyclicity="expm",
        private=True, release_builder=admm.dp_pgcd_builder,
        mechanism="DP-PGCD: exponential-mechanism selection (Gumbel-max) + Gaussian noisy update per step",
        polish_mechanism=_POLISH_MECHANISM,
        dp_title="DP-Fed-Sparse-BNSL",
        polishable=True,
        options=_ADMM | _GRAPH | _ONE_OFFS | {"--steps", "--snap", "--polish", "--personal", "--selection-share",
                                              "--polish-share", "--clip-levels"},
        budget_options=_BUDGET_ONE_OFFS | {"--rounds", "--steps", "--selection-share", "--moment-share", "--mean-share",
                                           "--polish-share", "--gumbel-multiplier", "--polish-multiplier"},
        budget_table=dp_pgcd_budget,
        site_sequence=_fed_sparse_sequence,
    ),
    MethodSpec(
        "fed-bnsl", "Fed-BNSL (Ng & Zhang 2022)",
        participant=with_stats(_fed_bnsl_participant), drive=admm.drive_admm, reply_rules=admm.reply_rules,
        rounds=Rounds.ADMM, statistics=Statistics.EXCHANGE,
        default_lambda=0.03,
        private=True, release_builder=admm.dp_fed_bnsl_builder,
        one_matrix=True, matrix_release=ReleaseKind.COVARIANCE,
        mechanism="one Gaussian release of the clipped covariance per participant, then Fed-BNSL (post-processing)",
        dp_title="DP-Fed-BNSL",
        options=_ADMM | _GRAPH | _ONE_OFFS | {"--personal"},
        budget_options=_BUDGET_ONE_OFFS, budget_table=dp_fed_bnsl_budget,
        site_sequence=_fed_bnsl_sequence,
    ),
    MethodSpec(
        "fed-moments", "NOTEARS on pooled second moments (two sum-shaped exchanges)",
        participant=make_moment_site, drive=moments.drive_moments, reply_rules=moments.reply_rules,
        rounds=Rounds.SOLVER, statistics=Statistics.POOLED_MOMENTS,
        default_lambda=0.1,
        private=True, release_builder=moments.dp_fed_moments_builder,
        one_matrix=True, matrix_release=ReleaseKind.MOMENT_MATRIX,
        mechanism="one Gaussian release of the clipped moment matrix per participant, then NOTEARS on the pooled moments (post-processing)",
        dp_title="DP fed-moments",
        options=_GRAPH | _ONE_OFFS,
        budget_options=_BUDGET_ONE_OFFS, budget_table=dp_fed_moments_budget,
        site_sequence=moments.site_sequence,
    ),
    MethodSpec(
        "fed-suffstats", "private sufficient statistics: whitened second moments in stages, a noise-aware score search",
        participant=make_suffstats_site, drive=suffstats.drive_suffstats,
        reply_rules=suffstats.reply_rules,
        rounds=Rounds.SOLVER, statistics=Statistics.POOLED_MOMENTS,
        default_lambda=0.0,
        private=True, release_builder=suffstats.release_builder,
        mechanism=suffstats.MECHANISM,
        dp_title="DP fed-suffstats",
        distributed_noise=True,
        resamples_releases=True,
        # its finished graph: Fed-Sparse-BNSL's learner on the released moments (issue 27)
        moment_learner="fed-sparse",
        clip_multiplier=suffstats.CLIP,
        clip_text="row L2 norm of [1, whitened row], C = multiplier·sqrt(d + 1)",
        # the --dp default: on the private accuracy grid (benchmarks/RESULTS.md, "Private learners
        # (issue 19)") it beat DP-Fed-Sparse-BNSL on every simulated cell; Sachs is the reported miss
        dp_default=True,
        # no ℓ₁ weight, no rounds, no acyclicity function, no polish: a score search on the released
        # moments; its clip is fixed and its value ranges come from fixed-bin histograms
        options=frozenset({"--threshold", "--standardize", "--noise", "--collusion-tolerance"}),
        budget_options=frozenset({"--sites", "--collusion-tolerance"}),
        budget_table=fed_suffstats_budget,
        plan_verdict=fed_suffstats_verdict,
        plan_exchanges=suffstats_exchanges,
        column_kinds=("continuous", "categorical"),
        site_sequence=suffstats.site_sequence,
    ),
    MethodSpec(
        "notears", "NOTEARS on all rows pooled (not federated)",
        participant=pooled.pooled_site, drive=pooled.drive_notears,
        rounds=Rounds.SOLVER, statistics=Statistics.SITE,
        default_lambda=0.1, pooled=True, federated=False,
        options=_GRAPH,
    ),
    MethodSpec(
        "local-notears", "NOTEARS on each participant's rows alone",
        participant=pooled.local_site, drive=pooled.drive_notears,
        rounds=Rounds.SOLVER, statistics=Statistics.SITE,
        default_lambda=0.1, federated=False, per_participant_graphs=True,
        options=_GRAPH,
    ),
)

_REGISTRY: dict[str, MethodSpec] = {spec.name: spec for spec in _SPECS}

#: Every method, in the order help texts and listings show them.
METHODS = tuple(_REGISTRY)
#: The methods with a private variant (``--dp``).
PRIVATE_METHODS = tuple(name for name, spec in _REGISTRY.items() if spec.private)
#: The method of ``learn`` when none is given (non-private runs).
DEFAULT_METHOD = METHODS[0]
#: The method of ``learn --dp`` (and of ``privacy-budget``) when none is given: the entry marked
#: ``dp_default``.
DP_DEFAULT_METHOD = next(name for name, spec in _REGISTRY.items() if spec.dp_default)


def default_method(private: bool, categorical: bool = False) -> str:
    """The method a run uses when none is given: :data:`DP_DEFAULT_METHOD` for a private run,
    :data:`DEFAULT_METHOD` otherwise; with categorical columns, the first of those the registry
    lists that takes them (``MethodSpec.column_kinds``), the private default when none does."""
    if categorical:
        for name, spec in _REGISTRY.items():
            if "categorical" in (spec.dp_column_kinds if private else spec.column_kinds):
                return name
    return DP_DEFAULT_METHOD if private else DEFAULT_METHOD


def check_method_options(config) -> None:
    """Refuse an option ``config`` (a ``LearnConfig`` whose method is resolved) gives that its method
    does not take (:func:`bnsl_cli.federated.method_options.check_options`)."""
    method_options.check_options(config, method_spec(config.method), _SPECS, DP_DEFAULT_METHOD)


def check_budget_options(method: str, given: dict) -> None:
    """``privacy-budget``: refuse an option in ``given`` (flag -> set by the user) that ``method``
    does not take."""
    method_options.check_budget_options(given, method_spec(method), _SPECS, DP_DEFAULT_METHOD)


def method_spec(method: str) -> MethodSpec:
    """The registry entry of ``method``; an :class:`OptionError` naming the choices when unknown."""
    try:
        return _REGISTRY[method]
    except KeyError:
        raise OptionError(f"--method: unknown method {method!r}; choose one of {', '.join(METHODS)}") from None


_ABSENT = object()


@contextmanager
def registered(spec: MethodSpec):
    """While the block runs, ``spec`` is the registry's entry of its name (a method in the making, a
    test's toy method, a method's conformance checks): the run pipeline, the plan, the site guard and
    the CLI's look-ups read it. The listings computed at import (:data:`METHODS`, help texts) do not
    change. The entry it replaced, or none, is back afterwards."""
    before = _REGISTRY.get(spec.name, _ABSENT)
    _REGISTRY[spec.name] = spec
    try:
        yield spec
    finally:
        if before is _ABSENT:
            del _REGISTRY[spec.name]
        else:
            _REGISTRY[spec.name] = before


def methods_where(test) -> tuple:
    """The names of the registered methods whose spec passes ``test`` (a ``MethodSpec -> bool``), in
    the registry's order: what an error message offers in place of a method that lacks a feature."""
    return tuple(name for name, spec in _REGISTRY.items() if test(spec))


def make_participant(plan, pid: int, X: np.ndarray, rng: Optional[np.random.Generator] = None):
    """The site side of ``plan.method`` for participant ``pid`` (0-based) holding rows ``X``.

    ``rng`` is the participant's own noise source (required for a private plan)."""
    if plan.private and rng is None:
        raise PrivacyBudgetError("a private participant needs its own noise source (rng)")
    if X.shape[1] != plan.d:
        raise OptionError(f"participant {pid + 1}: {X.shape[1]} columns, the plan has {plan.d}")
    return plan.spec.participant(plan, pid, X, rng)


# -- the empirical privacy audit's cases (bnsl_cli.federated.audit; benchmarks/privacy_audit.py and
# tests/privacy/test_audit.py run them): the one-off releases' and each method package's own

def audit_cases(rng, plan) -> list:
    """Every audited mechanism: the worst-case pair, then the pair with a planted extreme row; then
    each package's site cases through a real site of ``plan`` (fed-suffstats: its releases and the
    crafted basis). The order is fixed: the cases draw their noise from ``rng`` in turn. The
    random-message batches are each package's own (audited with
    :func:`~bnsl_cli.federated.audit.audit_batch`)."""
    out = []
    for make in (means_case, second_moments_case, update_case, selection_case, pgcd_step_case, polish_case,
                 moment_matrix_case, covariance_case, value_range_case):
        out.append(make(rng))
        out.append(make(rng, extreme=True))
    out.append(value_range_case(rng, centred=True))
    out.append(value_range_case(rng, extreme=True, centred=True))
    out.append(update_case(rng, extreme="overflow"))
    return out + suffstats_cases(rng, plan)


def broken_audit_cases(rng) -> list:
    """Deliberately broken releases the audit must catch: column means with a tenth and with half
    of the claimed noise (the second only the μ bound shows)."""
    return [means_case(rng, broken=True), means_case(rng, broken=2)]
