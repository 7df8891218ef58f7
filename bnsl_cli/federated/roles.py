"""Methods as pairs of roles: a participant factory (site side) and a coordinator driver.

A method is one :class:`MethodRoles` entry in ``_REGISTRY``:

- ``make_participant(plan, pid, X, rng)`` — the site side, built from the run plan, the
  participant's index, its own rows and its own noise source only (what a remote site calls). The
  object answers encoded messages (``handle(bytes) -> bytes | None``) and ends with a JSON-able
  ``summary()``.
- ``drive(plan, fleet, progress) -> Outcome`` — the coordinator side: the exchanges through the
  fleet, ending with ``fleet.finish()``; it never sees rows.

``PRE_ROUND_STAGES`` maps an option name (``"standardize"``) to a coordinator-side stage
``stage(plan, fleet, report)`` that :func:`bnsl_cli.run.run` calls before the driver.

Adding a method = one more entry here (and its two roles in their own module).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from bnsl_cli.errors import OptionError
from bnsl_cli.privacy.defaults import DP_LAMBDA
from bnsl_cli.federated.standardize import standardize_stage, with_stats

__all__ = ["MethodRoles", "Outcome", "METHODS", "PRE_ROUND_STAGES", "roles_for", "make_participant"]


@dataclass
class Outcome:
    """What a coordinator driver hands back: the raw estimate, the final DAG, the method's report
    fields, and every participant's summary (from ``fleet.finish()``)."""

    W_raw: Optional[np.ndarray]
    W: np.ndarray
    report: dict
    summaries: list
    local: Optional[list] = None  # per-participant DAGs (local-notears)


@dataclass(frozen=True)
class MethodRoles:
    name: str
    make_participant: Callable  # (plan, pid, X, rng) -> participant
    drive: Callable  # (plan, fleet, progress) -> Outcome
    default_lambda: float
    #: λ under --dp when it differs
    dp_lambda: Optional[float] = None
    #: a private variant exists (its releases come from ``release_builder``)
    private: bool = False
    #: the polish stage applies
    polishable: bool = False
    #: ``release_builder(**shape) -> (ρ* -> [PlannedRelease])`` for a private run
    release_builder: Optional[Callable] = None
    #: the fleet holds one participant with every row pooled (centralized NOTEARS)
    pooled: bool = False
    #: the participants exchange messages with a coordinator (report counts bytes)
    federated: bool = True
    label: str = ""


# -- site side ---------------------------------------------------------------------------------


def _fed_sparse_participant(plan, pid: int, X: np.ndarray, rng, preprocessed=None):
    if plan.private:
        from bnsl_cli.federated.dp_participant import DPSparseParticipant

        return DPSparseParticipant.from_plan(plan, pid, X, rng, preprocessed=preprocessed)
    from bnsl_cli.federated.participant import SparseParticipant

    return SparseParticipant(pid, X, plan.n_total, plan.lam, plan.steps, plan.tol)


def _fed_bnsl_participant(plan, pid: int, X: np.ndarray, rng, preprocessed=None):
    if plan.private:
        from bnsl_cli.federated.dp_participant import DPDenseParticipant

        return DPDenseParticipant.from_plan(plan, pid, X, rng, preprocessed=preprocessed)
    from bnsl_cli.federated.participant import DenseParticipant

    return DenseParticipant(pid, X, plan.n_total)


def _notears_participant(plan, pid: int, X: np.ndarray, rng):
    from bnsl_cli.notears import NotearsSite

    blocks = plan.rows if (roles_for(plan.method).pooled and sum(plan.rows) == X.shape[0]) else None
    return NotearsSite(pid, X, plan.lam, standardize=plan.standardize, blocks=blocks)


# -- coordinator side ---------------------------------------------------------------------------


def _drive_admm(plan, fleet, progress):
    from bnsl_cli.federated.protocol import drive_admm

    return drive_admm(plan, fleet, progress)


def _drive_notears(plan, fleet, progress):
    from bnsl_cli.notears import drive_notears

    return drive_notears(plan, fleet, progress)


# -- privacy ---------------------------------------------------------------------------------------


def _dp_pgcd_builder(**kw):
    from bnsl_cli.privacy.release_plan import dp_pgcd_releases

    return lambda rho_star: dp_pgcd_releases(rho_star, **kw)


def _dp_fed_bnsl_builder(*, mean_share, moment_share, value_bound_given, **_):
    from bnsl_cli.privacy.release_plan import dp_fed_bnsl_releases

    return lambda rho_star: dp_fed_bnsl_releases(
        rho_star, mean_share=mean_share, moment_share=moment_share, value_bound_given=value_bound_given
    )


def _fed_moments_participant(plan, pid: int, X: np.ndarray, rng):
    from bnsl_cli.federated.moments import make_moment_site

    return make_moment_site(plan, pid, X, rng)


def _drive_moments(plan, fleet, progress):
    from bnsl_cli.federated.moments import drive_moments

    return drive_moments(plan, fleet, progress)


def _dp_fed_moments_builder(*, mean_share, moment_share, value_bound_given, **_):
    from bnsl_cli.federated.moments import dp_fed_moments_releases

    return lambda rho_star: dp_fed_moments_releases(
        rho_star, mean_share=mean_share, moment_share=moment_share, value_bound_given=value_bound_given
    )


def _fed_suffstats_participant(plan, pid: int, X: np.ndarray, rng):
    from bnsl_cli.federated.suffstats import make_suffstats_site

    return make_suffstats_site(plan, pid, X, rng)


def _drive_suffstats(plan, fleet, progress):
    from bnsl_cli.federated.suffstats import drive_suffstats

    return drive_suffstats(plan, fleet, progress)


def _fed_suffstats_builder(**_):
    from bnsl_cli.privacy.release_plan import fed_suffstats_releases

    return fed_suffstats_releases


#: Default λ per method. For the federated methods the local losses are normalised by the public
#: total n, so Fed-Sparse-BNSL's per-participant λ acts as P·λ in centralized NOTEARS units.
_REGISTRY: dict[str, MethodRoles] = {
    "fed-sparse": MethodRoles(
        "fed-sparse", with_stats(_fed_sparse_participant), _drive_admm, default_lambda=0.005, dp_lambda=DP_LAMBDA, private=True,
        polishable=True, release_builder=_dp_pgcd_builder, label="Fed-Sparse-BNSL: ADMM + PGCD",
    ),
    "fed-bnsl": MethodRoles(
        "fed-bnsl", with_stats(_fed_bnsl_participant), _drive_admm, default_lambda=0.03, private=True,
        release_builder=_dp_fed_bnsl_builder, label="Fed-BNSL (Ng & Zhang 2022)",
    ),
    "fed-moments": MethodRoles(
        "fed-moments", _fed_moments_participant, _drive_moments, default_lambda=0.1, private=True,
        release_builder=_dp_fed_moments_builder, label="NOTEARS on pooled second moments (two sum-shaped exchanges)",
    ),
    "fed-suffstats": MethodRoles(
        "fed-suffstats", _fed_suffstats_participant, _drive_suffstats, default_lambda=0.0, private=True,
        release_builder=_fed_suffstats_builder,
        label="private sufficient statistics: whitened second moments in stages, a noise-aware score search",
    ),
    "notears": MethodRoles(
        "notears", _notears_participant, _drive_notears, default_lambda=0.1, pooled=True, federated=False,
        label="NOTEARS on all rows pooled (not federated)",
    ),
    "local-notears": MethodRoles(
        "local-notears", _notears_participant, _drive_notears, default_lambda=0.1, federated=False,
        label="NOTEARS on each participant's rows alone",
    ),
}

METHODS = tuple(_REGISTRY)

#: Coordinator-side stages run before the rounds, keyed by the plan option that turns them on.
PRE_ROUND_STAGES: dict[str, Callable] = {"standardize": standardize_stage}


def roles_for(method: str) -> MethodRoles:
    try:
        return _REGISTRY[method]
    except KeyError:
        raise OptionError(f"--method: unknown method {method!r}; choose one of {', '.join(METHODS)}") from None


def make_participant(plan, pid: int, X: np.ndarray, rng: Optional[np.random.Generator] = None):
    """The site side of ``plan.method`` for participant ``pid`` (0-based) holding rows ``X``.

    ``rng`` is the participant's own noise source (required for a private plan)."""
    from bnsl_cli.errors import PrivacyBudgetError

    if plan.private and rng is None:
        raise PrivacyBudgetError("a private participant needs its own noise source (rng)")
    if X.shape[1] != plan.d:
        raise OptionError(f"participant {pid + 1}: {X.shape[1]} columns, the plan has {plan.d}")
    p = roles_for(plan.method).make_participant(plan, pid, X, rng)
    p.report_B = plan.personal
    return p
