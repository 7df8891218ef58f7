"""Every method's audit cases in one list (the empirical privacy audit, :mod:`bnsl_cli.federated.audit`;
``benchmarks/privacy_audit.py`` and ``tests/privacy/test_audit.py`` run it): the one-off releases' cases from
the audit itself, each method package's own (``methods/*/audit.py``), in a fixed order (the cases draw their
noise from one generator in turn)."""

from __future__ import annotations

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

__all__ = ["all_cases", "broken_cases"]

def all_cases(rng, plan) -> list:
    """Every audited mechanism: the worst-case pair, then the pair with a planted extreme row; then
    fed-suffstats' releases through a real site of ``plan`` and the crafted basis (:func:`suffstats_cases`).
    The random-message batches are :func:`random_basis_cases` and :func:`random_centre_cases`
    (audited with :func:`audit_batch`)."""
    out = []
    for make in (means_case, second_moments_case, update_case, selection_case, pgcd_step_case, polish_case,
                 moment_matrix_case, covariance_case, value_range_case):
        out.append(make(rng))
        out.append(make(rng, extreme=True))
    out.append(value_range_case(rng, centred=True))
    out.append(value_range_case(rng, extreme=True, centred=True))
    out.append(update_case(rng, extreme="overflow"))
    return out + suffstats_cases(rng, plan)


def broken_cases(rng) -> list:
    """Deliberately broken releases the audit must catch: column means with a tenth and with half
    of the claimed noise (the second only the μ bound shows)."""
    return [means_case(rng, broken=True), means_case(rng, broken=2)]
