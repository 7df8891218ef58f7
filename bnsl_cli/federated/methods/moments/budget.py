"""``privacy-budget`` for DP fed-moments (``MethodSpec.budget_table``): the one-off releases, then one
noisy moment matrix per participant (:func:`bnsl_cli.privacy.budget.one_matrix_budget`)."""

from __future__ import annotations

from bnsl_cli.privacy.budget import BudgetQuery, BudgetTable, one_matrix_budget

__all__ = ["dp_fed_moments_budget"]


def dp_fed_moments_budget(spec, query: BudgetQuery, delta: float, resolve) -> BudgetTable:
    """DP fed-moments: its noise plan (``resolve`` given) or the budget its multipliers spend."""
    return one_matrix_budget(spec, query, delta, resolve)
