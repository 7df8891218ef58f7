"""``privacy-budget``'s question answered: which table a :class:`~bnsl_cli.privacy.budget.BudgetQuery`
asks for, computed by the library (``bnsl privacy-budget`` only renders it).

The direction is read from the inputs: a release list's file (its spend), ``--rho`` (its (ε, δ)), noise
multipliers (the budget they spend: the method's table), ``--max-rho`` (the largest ρ), otherwise ε
(the noise plan ``learn --dp`` resolves for it: the method's table, from
:func:`~bnsl_cli.plan.privacy_plan.resolve_privacy`). The method's own tables are its
``MethodSpec.budget_table``; nothing here compares a method.

Each site's rows (``query.site_rows``, ``--samples n1,n2,...``) give the number of sites and, unless
``--delta`` is given, δ as ``learn`` sets it (:func:`~bnsl_cli.plan.run_plan.default_delta`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

from bnsl_cli.errors import OptionError
from bnsl_cli.federated.method_spec import MethodSpec
from bnsl_cli.federated.methods.registry import METHODS, PRIVATE_METHODS, default_method, method_spec
from bnsl_cli.plan.options import DPConfig
from bnsl_cli.plan.privacy_plan import resolve_privacy
from bnsl_cli.plan.run_plan import default_delta
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
    if query.site_rows is not None:
        query = _with_sites(query)
    conv, spend_mode = query.conversion, query.spend_mode
    if query.releases is not None:
        if spend_mode or query.rho is not None or query.max_rho or query.epsilon is not None:
            raise OptionError(
                "--releases computes the spend of a release list; give it alone (with --delta/--samples, --conversion)"
            )
        resolved = None if query.site_rows is None or query.delta is not None else _delta_of(query)
        return _with_rows(release_list_table(query.releases, query.delta, query.samples, conv, query.accountant,
                                             resolved=resolved), query)
    if query.rho is not None and (spend_mode or query.max_rho):
        raise OptionError("--rho converts a given rho; do not combine it with noise multipliers or --max-rho")
    if spend_mode and query.max_rho:
        raise OptionError("--max-rho needs --epsilon, not noise multipliers")
    if query.rho is None and not spend_mode and query.epsilon is None:
        raise OptionError(
            "say what to compute: --epsilon E (noise for a target budget), --gumbel-multiplier G "
            "--sigma-multiplier S (budget spent by given noise), or --rho R (epsilon of rho-zCDP)"
        )
    delta, source = _delta_of(query)
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
    return _with_rows(table, query).with_note("delta", source)


def _with_sites(query: BudgetQuery) -> BudgetQuery:
    """``query`` with ``sites`` the number of its sites' row counts (:class:`OptionError` when ``--sites``
    says another number)."""
    rows = tuple(query.site_rows)
    if query.samples is not None:
        raise OptionError("give --samples once: N (the smallest participant's rows) or each site's rows n1,n2,...")
    if not rows or any(isinstance(n, bool) or int(n) != n or n < 1 for n in rows):
        raise OptionError(f"--samples: every site needs a whole number of rows >= 1, got {list(rows)}")
    if query.sites is not None and query.sites != len(rows):
        raise OptionError(f"--sites {query.sites} disagrees with --samples {','.join(map(str, rows))} "
                          f"({len(rows)} sites); give one of them")
    return replace(query, site_rows=tuple(int(n) for n in rows), sites=len(rows))


def _delta_of(query: BudgetQuery) -> tuple[float, str]:
    """``(δ, where it comes from)``: ``--delta``, ``--samples N`` (``1/N²``), or from each site's rows
    learn's default ``1/n_p²`` of the smallest."""
    if query.site_rows is None or query.delta is not None:
        return resolve_delta(query.delta, query.samples)
    rows = query.site_rows
    delta = default_delta(rows)
    if delta == 1.0 / float(min(rows)) ** 2:
        return delta, f"1/n_p**2 with n_p = {min(rows)} rows, the smallest of the {len(rows)} sites' (learn's default)"
    return delta, (f"0.01/n_p with n_p = {max(rows)} rows, the largest of the {len(rows)} sites' (learn's default "
                   "min(1/n_min**2, 0.01/n_max): no site's n_p·δ above 0.01)")


def _with_rows(table: BudgetTable, query: BudgetQuery) -> BudgetTable:
    """The table with the sites' row counts in its JSON (``site_rows``) when the query gives them."""
    if query.site_rows is None:
        return table
    return replace(table, data={**table.data, "site_rows": list(query.site_rows)})
