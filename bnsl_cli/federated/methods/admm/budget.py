"""``privacy-budget`` for the ADMM methods' private variants (``MethodSpec.budget_table``):
DP-Fed-Sparse-BNSL's noise plan over its K × T DP-PGCD steps, or the budget its noise multipliers
spend; DP-Fed-BNSL's, whose releases are the one-offs and one noisy covariance per participant
(:func:`bnsl_cli.privacy.budget.one_matrix_budget`)."""

from __future__ import annotations

from bnsl_cli.errors import OptionError
from bnsl_cli.privacy.budget import (
    BudgetQuery,
    BudgetTable,
    max_rho_table,
    multiplier_spend_table,
    one_matrix_budget,
    one_off_plan_table,
    rounds_steps,
)

__all__ = ["dp_pgcd_budget", "dp_fed_bnsl_budget"]


def dp_pgcd_budget(spec, query: BudgetQuery, delta: float, resolve) -> BudgetTable:
    """DP-Fed-Sparse-BNSL (DP-PGCD). Calibrate mode (``resolve`` given): the release list depends on
    the rounds K and steps T (learn --dp's defaults: K = DP_ROUNDS, T from the number of variables)
    and, as a what-if that learn does not offer, on the mean and second-moment shares; with none of
    K, T, d given the table is the largest ρ of (ε, δ). Spend mode: the budget the selection, update,
    one-off and polish multipliers spend over K × T steps."""
    if resolve is None:
        if query.gumbel_multiplier is None or query.sigma_multiplier is None:
            raise OptionError("spend mode needs both --gumbel-multiplier and --sigma-multiplier")
        k, t, t_source = rounds_steps(query.rounds, query.steps, query.nodes)
        return multiplier_spend_table(
            spec, query, delta, k=k, t=t, t_source=t_source,
            iterations=(query.gumbel_multiplier, query.sigma_multiplier, k * t), polish=query.polish_multiplier,
        )
    if query.rounds is None and query.steps is None and query.nodes is None:
        return max_rho_table(query.epsilon, delta, query.conversion)
    k, t, t_source = rounds_steps(query.rounds, query.steps, query.nodes)
    pv = resolve(rounds=k, steps=t, polish=query.polish_share > 0,
                 mean_share=0.0 if query.public_means else query.mean_share, moment_share=query.moment_share)
    summary = pv.summary()
    a = pv.selection_share
    notes = {
        "rounds K": f"{k}",
        "steps T": f"{t} ({t_source})",
        "budget split": (
            f"second moments {pv.moment_share:g}, column means {pv.mean_share:g}"
            + (" (public means: no release)" if pv.public_means else "")
            + f", polish second moments {pv.polish_share:g}"
            + f", iterations the rest; per step: selection a = {a:g}, update 1 - a = {1 - a:g}"
        ),
    }
    rows = [
        ("rho polish", summary["rho_polish"], f"{pv.polish_share:g} of rho* (once, after the rounds)"),
        ("rho per step", summary["rho_per_step"], f"(rho* - one-off - polish) / (K T), K T = {k * t}"),
        ("rho selection / step", summary["rho_selection_per_step"], f"a = {a:g}"),
        ("rho update / step", summary["rho_update_per_step"], f"1 - a = {1 - a:g}"),
        ("Gumbel multiplier", summary["gumbel_multiplier"], "b / Delta_S = 1/sqrt(2 rho_sel)"),
        ("eps_s per selection", summary["selection_epsilon_per_step"], "2 Delta_S / b (pure DP of one selection)"),
        ("sigma multiplier", summary["sigma_multiplier"], "sigma / Delta = 1/sqrt(2 rho_upd)"),
    ]
    return one_off_plan_table(spec, pv, nodes=query.nodes, notes=notes, rows=rows)


def dp_fed_bnsl_budget(spec, query: BudgetQuery, delta: float, resolve) -> BudgetTable:
    """DP-Fed-BNSL: the one-off releases, then one noisy covariance per participant."""
    return one_matrix_budget(spec, query, delta, resolve)
