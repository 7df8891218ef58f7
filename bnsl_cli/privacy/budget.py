"""``privacy-budget``'s answers as typed tables, computed here and only rendered by the command.

:class:`BudgetQuery` holds the public inputs of one question (ε, δ or the rows it comes from, the
shares, rounds, steps, nodes, sites, noise multipliers, a release list's file); :class:`BudgetTable` is
the answer: a title, the notes (the assumptions the numbers rest on), rows of three columns
(quantity, value, how) and the ``--json`` document.

The tables every method shares stand here: a conversion (:func:`convert_table`), the largest ρ
(:func:`max_rho_table`), the spend of a release list (:func:`release_list_table`), the plan and the
spend of a private variant whose releases are the one-off releases and then one matrix
(:func:`one_matrix_budget`), and the blocks a method's own table is built from. A method's table is
its ``MethodSpec.budget_table`` (``methods/<family>/budget.py``), ``(spec, query, delta, resolve) ->
BudgetTable``: ``delta`` the resolved δ, ``resolve(**kw)`` the privacy plan ``learn --dp`` would make
(calibrate mode) or ``None`` (spend mode: ``query`` gives noise multipliers).
:func:`bnsl_cli.plan.budget.budget_table` picks the table a query asks for.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from bnsl_cli.errors import InputDataError, OptionError, PrivacyBudgetError
from bnsl_cli.privacy.accountant import (
    ACCOUNTANTS,
    CONVERSION_DESCRIPTIONS,
    epsilon_from_rho,
    get_accountant,
    rho_for_epsilon,
    validate_delta,
)
from bnsl_cli.privacy.defaults import (
    DP_ROUNDS,
    MEAN_SHARE,
    MOMENT_SHARE,
    POLISH_SHARE,
    SELECTION_SHARE,
    dp_steps,
    default_delta,
)
from bnsl_cli.privacy.ledger import NEIGHBOURING_RELATION, SPLIT_ASSUMPTION
from bnsl_cli.privacy.release_plan import ledger_of, range_multiplier, release_list, spend_of
from bnsl_cli.privacy.releases import PlannedRelease, ReleaseKind

__all__ = [
    "BudgetQuery",
    "BudgetTable",
    "COLUMNS",
    "DELTA_HELP",
    "resolve_delta",
    "rounds_steps",
    "check_multipliers",
    "base_assumptions",
    "release_rows",
    "events_of",
    "accountant_rows",
    "convert_table",
    "max_rho_table",
    "release_list_table",
    "one_off_plan_table",
    "multiplier_spend_table",
    "one_matrix_budget",
]

#: The columns of every table's rows.
COLUMNS = ("quantity", "value", "how")

DELTA_HELP = (
    "`bnsl learn --dp` uses delta = 1/n_p**2 by default (n_p = rows of the smallest participant); "
    "give --delta D or --samples N (delta = 1/N**2)."
)


@dataclass(frozen=True)
class BudgetQuery:
    """The public inputs of one ``privacy-budget`` question, as given (``None``: not given)."""

    epsilon: Optional[float] = None
    delta: Optional[float] = None
    samples: Optional[int] = None
    rounds: Optional[int] = None
    steps: Optional[int] = None
    nodes: Optional[int] = None
    rho: Optional[float] = None
    max_rho: bool = False
    gumbel_multiplier: Optional[float] = None
    sigma_multiplier: Optional[float] = None
    moment_multiplier: Optional[float] = None
    mean_multiplier: Optional[float] = None
    polish_multiplier: Optional[float] = None
    selection_share: float = SELECTION_SHARE
    moment_share: float = MOMENT_SHARE
    mean_share: float = MEAN_SHARE
    polish_share: float = POLISH_SHARE
    public_means: bool = False
    value_bound: Optional[float] = None
    conversion: str = "tight"
    accountant: str = "pld"
    sites: Optional[int] = None
    collusion_tolerance: int = 0
    #: a release list's file (a report.json of learn --dp or a privacy-budget --json output)
    releases: Optional[Path] = None
    #: each site's rows (``--samples n1,n2,...``): the sites P, δ as learn sets it, what a run makes of them
    site_rows: Optional[tuple] = None

    @property
    def spend_mode(self) -> bool:
        """The query gives the noise of the iterations or of the one matrix: the budget they spend."""
        return self.gumbel_multiplier is not None or self.sigma_multiplier is not None


@dataclass(frozen=True)
class BudgetTable:
    """One answer: ``title``, ``notes`` (the assumptions block, name → text, in order), ``rows``
    (``(quantity, value, how)`` each, :data:`COLUMNS`) and ``data`` (the ``--json`` document)."""

    title: str
    notes: dict
    rows: tuple
    data: dict
    columns: tuple = field(default=COLUMNS)

    def with_note(self, name: str, text: str) -> "BudgetTable":
        """The same table with the note ``name`` set to ``text`` (appended when new)."""
        return BudgetTable(self.title, {**self.notes, name: text}, self.rows, self.data, self.columns)


# ------------------------------------------------------------------------------------------------
# resolving the inputs
# ------------------------------------------------------------------------------------------------


def resolve_delta(delta, samples) -> tuple[float, str]:
    """``(δ, where it comes from)``: ``--delta`` as given, or ``1/N²`` from ``--samples N``."""
    if delta is not None and samples is not None:
        raise OptionError("give either --delta or --samples (delta = 1/N**2), not both")
    if delta is not None:
        return float(delta), f"{delta:g} (given)"
    if samples is not None:
        if samples < 1:
            raise OptionError(f"--samples must be a positive row count, got {samples}")
        delta = default_delta([samples])
        if delta == 1.0 / float(samples) ** 2:
            return delta, f"1/N**2 with N = {samples} rows"
        return delta, f"0.01/N with N = {samples} rows (learn's default: min(1/N**2, 0.01/N))"
    raise OptionError(f"delta is missing. {DELTA_HELP}")


def rounds_steps(rounds, steps, nodes) -> tuple:
    """``(K, T, where T comes from)`` of DP-PGCD: ``--rounds`` (learn --dp's default), ``--steps`` or
    ``T = max(20, d // 2)`` from ``--nodes d``."""
    k = DP_ROUNDS if rounds is None else rounds
    if steps is not None:
        return k, steps, "given"
    if nodes is not None:
        if nodes < 1:
            raise OptionError(f"--nodes must be >= 1, got {nodes}")
        return k, dp_steps(nodes), f"max(20, d // 2) with d = {nodes}"
    raise OptionError("the steps per round are missing: give --steps T, or --nodes d to use T = max(20, d // 2)")


def check_multipliers(query: BudgetQuery, delta: float) -> None:
    """Spend mode's checks that hold for every method: the noise multipliers given are finite and > 0,
    no mean release with public means, δ in (0, 1)."""
    if query.public_means and query.mean_multiplier is not None:
        raise OptionError("--public-means means no mean release; drop --mean-multiplier")
    for name, v in (("gumbel", query.gumbel_multiplier), ("sigma", query.sigma_multiplier),
                    ("moment", query.moment_multiplier), ("mean", query.mean_multiplier),
                    ("polish", query.polish_multiplier)):
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise PrivacyBudgetError(f"the {name} noise multiplier must be a finite number > 0, got {v!r}")
    validate_delta(delta)


# ------------------------------------------------------------------------------------------------
# building blocks
# ------------------------------------------------------------------------------------------------


def base_assumptions(conversion: str) -> dict:
    """The notes every table starts with."""
    return {
        "neighbouring relation": NEIGHBOURING_RELATION,
        "privacy model": "zCDP; releases add up; the run's guarantee is the largest participant's spend",
        "conversion": CONVERSION_DESCRIPTIONS[conversion],
    }


def release_rows(releases) -> list:
    """One row per planned release: its noise multiplier, count and zCDP cost."""
    return [
        (f"{r.kind.value} multiplier", r.multiplier,
         f"noise / sensitivity ({r.mechanism}); {r.count} × rho {r.rho_each:.4g} = {r.rho:.4g}"
         + (f"; noise split over {r.split} sites (each adds 1/{r.split} of the variance)" if r.split > 1 else ""))
        for r in releases
    ]


def events_of(releases, delta, conversion) -> list:
    """The ledger events one participant's ``releases`` make (the JSON's ``events``)."""
    return ledger_of(releases).to_dict(delta, conversion)["participants"][0]["events"]


def accountant_rows(releases, delta, conversion, accountant) -> tuple[list, dict]:
    """Rows and JSON fields with the ε of ``releases`` by every accountant (``accountant`` the one used)."""
    used = get_accountant(accountant)
    every = [get_accountant(name) for name in ACCOUNTANTS]
    eps = {a.name: spend_of(releases, delta, conversion, a)[0] for a in every}
    rows = [
        (f"epsilon ({a.name})", eps[a.name], ("used: " if a is used else "for comparison: ") + a.label(conversion))
        for a in every
    ]
    return rows, {"accountant": used.name, **{f"epsilon_{a.name}": eps[a.name] for a in every}}


def _spend_rows(releases, rho, delta, eps, conversion, accountant) -> list:
    return release_rows(releases) + [
        ("rho (zCDP)", rho, "sum over the releases"),
        ("delta", delta, ""),
        ("epsilon", eps, get_accountant(accountant).spend_note(conversion)),
    ]


# ------------------------------------------------------------------------------------------------
# the tables every method shares
# ------------------------------------------------------------------------------------------------


def convert_table(rho: float, delta: float, conversion: str) -> BudgetTable:
    """zCDP ρ → (ε, δ) under the conversion, and under both for comparison."""
    validate_delta(delta)
    eps = epsilon_from_rho(rho, delta, conversion)
    tight = epsilon_from_rho(rho, delta, "tight")
    simple = epsilon_from_rho(rho, delta, "simple")
    data = {
        "mode": "convert",
        "epsilon": eps,
        "delta": delta,
        "rho": float(rho),
        "conversion": conversion,
        "epsilon_tight": tight,
        "epsilon_simple": simple,
    }
    rows = [
        ("rho (zCDP)", rho, "given"),
        ("delta", delta, ""),
        ("epsilon", eps, f"{conversion} conversion"),
        ("epsilon (tight)", tight, "Canonne-Kamath-Steinke 2020"),
        ("epsilon (simple)", simple, "rho + 2 sqrt(rho ln(1/delta))"),
    ]
    return BudgetTable("zCDP -> (epsilon, delta)", base_assumptions(conversion), tuple(rows), data)


def max_rho_table(epsilon: float, delta: float, conversion: str) -> BudgetTable:
    """The largest zCDP ρ whose conversion stays within (ε, δ)."""
    r = rho_for_epsilon(epsilon, delta, conversion)
    data = {
        "mode": "max-rho",
        "epsilon": float(epsilon),
        "delta": delta,
        "rho": r,
        "conversion": conversion,
        "epsilon_at_rho": epsilon_from_rho(r, delta, conversion),
    }
    rows = [
        ("epsilon", epsilon, "target"),
        ("delta", delta, ""),
        ("rho (zCDP)", r, f"largest rho with epsilon(rho, delta) <= target ({conversion})"),
    ]
    return BudgetTable("Largest zCDP budget for (epsilon, delta)", base_assumptions(conversion), tuple(rows), data)


def release_list_table(path: Path, delta, samples, conversion: str, accountant: str,
                       resolved: Optional[tuple] = None) -> BudgetTable:
    """The (ε, δ) a run's release list spends: ``privacy.plan.releases`` of a report, or
    ``releases`` of a privacy-budget --json output (δ from the file unless given, or ``resolved``:
    ``(δ, where it comes from)``)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputDataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise InputDataError(f"{path}: not JSON ({exc})") from None
    src = doc.get("privacy") if isinstance(doc, dict) and "privacy" in doc else None
    plan = src.get("plan") if isinstance(src, dict) else doc
    if not isinstance(plan, dict) or not isinstance(plan.get("releases"), list):
        raise InputDataError(
            f"{path}: no release list (expected a learn --dp report.json or a privacy-budget --json output)"
        )
    try:
        releases = [PlannedRelease.from_dict(r) for r in plan["releases"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise InputDataError(f"{path}: a release entry is malformed ({exc})") from None
    if resolved is not None:
        delta_value, source = resolved
    elif delta is None and samples is None:
        if plan.get("delta") is None:
            raise OptionError(f"delta is missing and {path} has none. {DELTA_HELP}")
        delta_value, source = float(plan["delta"]), f"{plan['delta']:g} (from {path})"
    else:
        delta_value, source = resolve_delta(delta, samples)
    eps, r = spend_of(releases, delta_value, conversion, accountant)
    assumptions = base_assumptions(conversion)
    assumptions["releases"] = f"{len(releases)} kinds from {path}"
    assumptions["delta"] = source
    if any(rel.split > 1 for rel in releases):
        assumptions["split releases"] = SPLIT_ASSUMPTION
    data = {
        "mode": "spend", "source": str(path), "epsilon": eps, "delta": delta_value, "rho": r, "conversion": conversion,
        "releases": [rel.to_dict() for rel in releases],
        "neighbouring_relation": assumptions["neighbouring relation"],
        "events": events_of(releases, delta_value, conversion),
    }
    rows = _spend_rows(releases, r, delta_value, eps, conversion, accountant)
    both_rows, both = accountant_rows(releases, delta_value, conversion, accountant)
    rows += both_rows
    data.update(both)
    return BudgetTable("Budget spent by a release list", assumptions, tuple(rows), data)


def one_off_plan_table(spec, pv, *, nodes, notes: dict, rows: list) -> BudgetTable:
    """The noise plan of a private variant that makes the one-off releases (column means, second
    moments, each with its value range unless a public bound is given) before its own: the privacy
    plan ``pv``, with the method's own ``notes`` (after the common ones) and ``rows`` (after the
    one-offs' budgets)."""
    delta, conv, acc = pv.delta, pv.conversion, pv.accountant
    summary = pv.summary()
    data = {"mode": "calibrate", "method": spec.name, **summary}
    data.update(
        nodes=nodes,
        public_means=pv.public_means,
        epsilon_spent=summary["epsilon_planned"],
        rho_spent=summary["rho_planned"],
        neighbouring_relation=NEIGHBOURING_RELATION,
        events=events_of(pv.releases, delta, conv),
    )
    assumptions = base_assumptions(conv)
    assumptions.update(notes)
    assumptions["value ranges"] = (
        "public --value-bound: no value-range release" if pv.value_bound is not None
        else "each one-off release spends half its share on a noisy value-range histogram first"
    )
    table = [
        ("epsilon", pv.epsilon, "target"),
        ("delta", pv.delta, ""),
        ("rho* (zCDP)", pv.rho_target, "whole budget per participant"),
        ("rho second moments", summary["rho_moments"], f"{pv.moment_share:g} of rho* (with its value range)"),
        ("rho column means", summary["rho_means"], f"{pv.mean_share:g} of rho* (with its value range)"),
    ]
    table += rows
    table += release_rows(pv.releases)
    table.append(("epsilon spent (check)", summary["epsilon_planned"], f"accounted from the planned ledger ({acc})"))
    both_rows, both = accountant_rows(pv.releases, delta, conv, acc)
    table += both_rows
    data.update(both)
    return BudgetTable(f"{spec.dp_title} noise plan", assumptions, tuple(table), data)


def multiplier_spend_table(spec, query: BudgetQuery, delta: float, *, k=None, t=None, t_source="",
                           **own) -> BudgetTable:
    """The budget `learn --dp` spends with the noise multipliers of ``query``: the one-off releases
    given (each preceded by its value-range release unless a public bound is given, which spends the
    same share of that release's budget as in learn), then the method's ``own`` releases
    (:func:`~bnsl_cli.privacy.release_plan.release_list`'s ``matrix`` or ``iterations`` and ``polish``),
    over ``k`` rounds of ``t`` steps (``None``: no iterations)."""
    g, s, m, mean, pol = (query.gumbel_multiplier, query.sigma_multiplier, query.moment_multiplier,
                          query.mean_multiplier, query.polish_multiplier)
    conv, acc, value_bound_given = query.conversion, query.accountant, query.value_bound is not None
    assumptions = base_assumptions(conv)
    one_offs = {
        key: (None if value_bound_given else range_multiplier(mult), mult)
        for key, mult in (("means", mean), ("moments", m)) if mult is not None
    }
    releases = release_list(**one_offs, **own)
    eps, r = spend_of(releases, delta, conv, acc)
    by: dict = {}
    for rel in releases:
        by[rel.kind] = by.get(rel.kind, 0.0) + rel.rho
    K = ReleaseKind
    data = {
        "mode": "spend", "method": spec.name, "epsilon": eps, "delta": delta, "rho": r, "conversion": conv,
        "rounds": k, "steps": t, "nodes": query.nodes,
        "gumbel_multiplier": g, "sigma_multiplier": s, "moment_multiplier": m, "mean_multiplier": mean,
        "polish_multiplier": pol,
        "rho_selection_per_step": None if g is None else 0.5 / g**2,
        "rho_update_per_step": None if (g is None or s is None) else 0.5 / s**2,
        "rho_moments": by.get(K.RANGE_CENTRED, 0.0) + by.get(K.SECOND_MOMENTS, 0.0),
        "rho_means": by.get(K.RANGE_RAW, 0.0) + by.get(K.COLUMN_MEANS, 0.0),
        "rho_polish": by.get(K.POLISH, 0.0),
        "rho_covariance": by.get(K.COVARIANCE, 0.0),
        "rho_moment_matrix": by.get(K.MOMENT_MATRIX, 0.0),
        "releases": [rel.to_dict() for rel in releases],
        "neighbouring_relation": assumptions["neighbouring relation"],
        "events": events_of(releases, delta, conv),
    }
    one_off = [
        name for name, v in (("second moments", m), ("column means", mean), ("polish second moments", pol))
        if v is not None
    ]
    if k is not None:
        assumptions.update({"rounds K": f"{k}", "steps T": f"{t} ({t_source})"})
    assumptions["one-off releases"] = (
        ", ".join(one_off) + ("" if value_bound_given or not (m or mean) else
                              "; each with its value-range release first, as learn --dp makes it")
        if one_off else
        "none counted (add --moment-multiplier / --mean-multiplier / --polish-multiplier to count them)"
    )
    rows = _spend_rows(releases, r, delta, eps, conv, acc)
    both_rows, both = accountant_rows(releases, delta, conv, acc)
    rows += both_rows
    data.update(both)
    return BudgetTable(f"{spec.dp_title} budget spent", assumptions, tuple(rows), data)


def one_matrix_budget(spec, query: BudgetQuery, delta: float, resolve) -> BudgetTable:
    """The table of a private variant that makes the one-off releases, then one noisy matrix per
    participant (``spec.matrix_release``): its noise plan (``resolve``: learn's shares, no per-step
    release), or the budget its multipliers spend (spend mode)."""
    name = spec.name
    if resolve is None:
        if query.gumbel_multiplier is not None:
            raise OptionError(f"{name} makes no coordinate selections; drop --gumbel-multiplier")
        if query.polish_multiplier is not None:
            raise OptionError(f"{name} has no polish release; drop --polish-multiplier")
        if query.sigma_multiplier is None:
            raise OptionError(f"spend mode for {name} needs --sigma-multiplier (the covariance's / moment matrix's)")
        return multiplier_spend_table(spec, query, delta, matrix=(spec.matrix_release, query.sigma_multiplier))
    pv = resolve(rounds=1, steps=1, polish=False)
    summary = pv.summary()
    notes = {
        "releases": "one-off releases, then X_p^T X_p once (rows clipped to L2 norm C_x, symmetric Gaussian noise)",
        "sensitivity": "sqrt(2) C_x**2 (replace-one)",
        "budget split": f"column means {pv.mean_share:g}, second moments {pv.moment_share:g} of rho*, covariance the rest",
    }
    rows = [
        (f"rho {spec.matrix_release.value.replace('-', ' ')}",
         summary["rho_covariance"] + summary.get("rho_moment_matrix", 0.0), ""),
        ("sigma multiplier", summary["sigma_multiplier"], "sigma / Delta = 1/sqrt(2 rho_cov)"),
    ]
    return one_off_plan_table(spec, pv, nodes=query.nodes, notes=notes, rows=rows)
