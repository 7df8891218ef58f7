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

from typing import Optional

import numpy as np

from bnsl_cli.errors import OptionError, PrivacyBudgetError
from bnsl_cli.federated.dp_participant import DPDenseParticipant, DPSparseParticipant
from bnsl_cli.federated.method_spec import MethodSpec, Rounds, Statistics
from bnsl_cli.federated.methods import admm, moments, pooled, suffstats
from bnsl_cli.federated.participant import DenseParticipant, SparseParticipant
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
    "method_spec",
    "make_participant",
]



# -- the site side of the ADMM methods (their coordinator side, admm.py, imports no participant code)


def _fed_sparse_participant(plan, pid: int, X: np.ndarray, rng, preprocessed=None):
    """A Fed-Sparse-BNSL participant (DP-PGCD under a private plan)."""
    if plan.private:
        return DPSparseParticipant.from_plan(plan, pid, X, rng, preprocessed=preprocessed)
    return SparseParticipant(
        pid, X, plan.n_total, plan.lam, plan.steps, plan.tol,
        forbidden=plan.forbidden_mask(), required=plan.required_mask(), report_B=plan.personal,
    )


def _fed_bnsl_participant(plan, pid: int, X: np.ndarray, rng, preprocessed=None):
    """A Fed-BNSL participant (one noisy covariance under a private plan)."""
    if plan.private:
        return DPDenseParticipant.from_plan(plan, pid, X, rng, preprocessed=preprocessed)
    return DenseParticipant(pid, X, plan.n_total, report_B=plan.personal)


_POLISH_MECHANISM = (
    "; polish: one Gaussian release of clipped second moments on the pairs the consensus selects"
)

#: Default λ per method. For the federated methods the local losses are normalised by the public
#: total n, so Fed-Sparse-BNSL's per-participant λ acts as P·λ in centralized NOTEARS units.
_SPECS = (
    MethodSpec(
        "fed-sparse", "Fed-Sparse-BNSL: ADMM + PGCD",
        participant=with_stats(_fed_sparse_participant), drive=admm.drive_admm,
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
    ),
    MethodSpec(
        "fed-bnsl", "Fed-BNSL (Ng & Zhang 2022)",
        participant=with_stats(_fed_bnsl_participant), drive=admm.drive_admm,
        rounds=Rounds.ADMM, statistics=Statistics.EXCHANGE,
        default_lambda=0.03,
        private=True, release_builder=admm.dp_fed_bnsl_builder,
        one_matrix=True, matrix_release=ReleaseKind.COVARIANCE,
        mechanism="one Gaussian release of the clipped covariance per participant, then Fed-BNSL (post-processing)",
        dp_title="DP-Fed-BNSL",
    ),
    MethodSpec(
        "fed-moments", "NOTEARS on pooled second moments (two sum-shaped exchanges)",
        participant=moments.make_moment_site, drive=moments.drive_moments,
        rounds=Rounds.SOLVER, statistics=Statistics.POOLED_MOMENTS,
        default_lambda=0.1,
        private=True, release_builder=moments.dp_fed_moments_builder,
        one_matrix=True, matrix_release=ReleaseKind.MOMENT_MATRIX,
        mechanism="one Gaussian release of the clipped moment matrix per participant, then NOTEARS on the pooled moments (post-processing)",
        dp_title="DP fed-moments",
    ),
    MethodSpec(
        "fed-suffstats", "private sufficient statistics: whitened second moments in stages, a noise-aware score search",
        participant=suffstats.make_suffstats_site, drive=suffstats.drive_suffstats,
        rounds=Rounds.SOLVER, statistics=Statistics.POOLED_MOMENTS,
        default_lambda=0.0,
        private=True, release_builder=suffstats.release_builder,
        mechanism=suffstats.MECHANISM,
        dp_title="DP fed-suffstats",
        distributed_noise=True,
        clip_multiplier=suffstats.CLIP,
        clip_text="row L2 norm of [1, whitened row], C = multiplier·sqrt(d + 1)",
    ),
    MethodSpec(
        "notears", "NOTEARS on all rows pooled (not federated)",
        participant=pooled.pooled_site, drive=pooled.drive_notears,
        rounds=Rounds.SOLVER, statistics=Statistics.SITE,
        default_lambda=0.1, pooled=True, federated=False,
    ),
    MethodSpec(
        "local-notears", "NOTEARS on each participant's rows alone",
        participant=pooled.local_site, drive=pooled.drive_notears,
        rounds=Rounds.SOLVER, statistics=Statistics.SITE,
        default_lambda=0.1, federated=False, per_participant_graphs=True,
    ),
)

_REGISTRY: dict[str, MethodSpec] = {spec.name: spec for spec in _SPECS}

#: Every method, in the order help texts and listings show them.
METHODS = tuple(_REGISTRY)
#: The methods with a private variant (``--dp``).
PRIVATE_METHODS = tuple(name for name, spec in _REGISTRY.items() if spec.private)
#: The method of ``learn`` when none is given.
DEFAULT_METHOD = METHODS[0]


def method_spec(method: str) -> MethodSpec:
    """The registry entry of ``method``; an :class:`OptionError` naming the choices when unknown."""
    try:
        return _REGISTRY[method]
    except KeyError:
        raise OptionError(f"--method: unknown method {method!r}; choose one of {', '.join(METHODS)}") from None


def make_participant(plan, pid: int, X: np.ndarray, rng: Optional[np.random.Generator] = None):
    """The site side of ``plan.method`` for participant ``pid`` (0-based) holding rows ``X``.

    ``rng`` is the participant's own noise source (required for a private plan)."""
    if plan.private and rng is None:
        raise PrivacyBudgetError("a private participant needs its own noise source (rng)")
    if X.shape[1] != plan.d:
        raise OptionError(f"participant {pid + 1}: {X.shape[1]} columns, the plan has {plan.d}")
    return method_spec(plan.method).participant(plan, pid, X, rng)
