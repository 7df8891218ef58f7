"""``privacy-budget``'s question answered: which table a :class:`~bnsl_cli.privacy.budget.BudgetQuery`
asks for, computed by the library (``bnsl privacy-budget`` only renders it).

The direction is read from the inputs: a release list's file (its spend), ``--rho`` (its (ε, δ)), noise
multipliers (the budget they spend: the method's table), ``--max-rho`` (the largest ρ), otherwise ε
(the noise plan ``learn --dp`` resolves for it: the method's table, from
:func:`~bnsl_cli.plan.privacy_plan.resolve_privacy`). The method's own tables are its
``MethodSpec.budget_table``; nothing here compares a method.
"""

from __future__ import annotations

import math
from typing import Optional

from bnsl_cli.errors import OptionError
from bnsl_cli.federated.method_spec import MethodSpec
from bnsl_cli.federated.methods.registry import METHODS, PRIVATE_METHODS, default_method, method_spec
from bnsl_cli.plan.options import DPConfig
from bnsl_cli.plan.privacy_plan import resolve_privacy
from bnsl_cli.privacy.accountant import accountant_option
from bnsl_cli.privacy.budget import (
    BudgetQuery,
    BudgetTable,
    check_multipliers,
    convert_table,
    max_rho_table,
    release_list_table,
    resolve_delta,
)

__all__ = ["BudgetQuery", "BudgetTable", "budget_method", "budget_table"]


def budget_method(method: Optional[str], accountant: str) -> MethodSpec:
    """The registry entry ``privacy-budget`` answers for: ``method`` (``None``: learn --dp's default),
    which must have a private variant; ``accountant`` must name an accountant. :class:`OptionError`
    otherwise."""
    name = default_method(True) if method is None else method
    accountant_option(accountant)
    if name not in PRIVATE_METHODS:
        what = "has no private variant" if name in METHODS else "is not a method"
        raise OptionError(f"--method: {name!r} {what}; choose one of {', '.join(PRIVATE_METHODS)}")
    return method_spec(name)


def budget_table(spec: MethodSpec, query: BudgetQuery) -> BudgetTable:
    """The table answering ``query`` for the method ``spec`` (:class:`OptionError` for a question
    that does not say what to compute or says two things, :class:`PrivacyBudgetError` for a budget
    that is invalid or cannot be met, :class:`InputDataError` for an unreadable release list)."""
    conv, spend_mode = query.conversion, query.spend_mode
    if query.releases is not None:
        if spend_mode or query.rho is not None or query.max_rho or query.epsilon is not None:
            raise OptionError(
                "--releases computes the spend of a release list; give it alone (with --delta/--samples, --conversion)"
            )
        return release_list_table(query.releases, query.delta, query.samples, conv, query.accountant)
    if query.rho is not None and (spend_mode or query.max_rho):
        raise OptionError("--rho converts a given rho; do not combine it with noise multipliers or --max-rho")
    if spend_mode and query.max_rho:
        raise OptionError("--max-rho needs --epsilon, not noise multipliers")
    if query.rho is None and not spend_mode and query.epsilon is None:
        raise OptionError(
            "say what to compute: --epsilon E (noise for a target budget), --gumbel-multiplier G "
            "--sigma-multiplier S (budget spent by given noise), or --rho R (epsilon of rho-zCDP)"
        )
    delta, source = resolve_delta(query.delta, query.samples)
    if query.rho is not None:
        if not math.isfinite(query.rho):
            raise OptionError(f"--rho must be a finite number, got {query.rho}")
        table = convert_table(query.rho, delta, conv)
    elif spend_mode:
        check_multipliers(query, delta)
        table = spec.budget_table(spec, query, delta, None)
    elif query.max_rho:
        table = max_rho_table(query.epsilon, delta, conv)
    else:
        # the privacy options exactly as `learn --dp` passes them to the plan
        dp = DPConfig(
            epsilon=query.epsilon, delta=delta, selection_share=query.selection_share, conversion=conv,
            public_means=query.public_means, value_bound=query.value_bound, polish_share=query.polish_share,
            accountant=query.accountant, collusion_tolerance=query.collusion_tolerance,
        )

        def resolve(**shape):
            return resolve_privacy(spec.name, dp, delta=dp.delta, d=query.nodes, **shape)

        table = spec.budget_table(spec, query, delta, resolve)
    return table.with_note("delta", source)
