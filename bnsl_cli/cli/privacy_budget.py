"""`bnsl privacy-budget`: the noise a target (epsilon, delta) allows, or the (epsilon, delta) a noise level spends.

A thin layer: options are parsed here; the library picks and computes the table
(:func:`bnsl_cli.plan.budget.budget_table`, each method's own from its ``MethodSpec.budget_table``;
imported lazily so that ``bnsl --help`` stays fast); this module renders it: the result table to
stdout (``--json``: the JSON document instead), the assumptions block to stderr.
"""

# No ``from __future__ import annotations``: typer reads the option types at runtime.

import math
import re
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from bnsl_cli.privacy.defaults import DP_ROUNDS, MEAN_SHARE, MOMENT_SHARE, POLISH_SHARE, SELECTION_SHARE


class Conversion(str, Enum):
    tight = "tight"
    simple = "simple"


_WHOLE = re.compile(r"[+-]?[0-9][0-9_]*(?:\.0*)?")
#: The message ``--samples`` has always given for one value that is not a whole number.
NOT_AN_INTEGER = "Input should be a valid integer, unable to parse string as an integer"


def _whole(text: str) -> Optional[int]:
    """A whole number as ``--samples`` has always read one (``None`` otherwise)."""
    s = text.strip()
    return int(s.split(".")[0]) if _WHOLE.fullmatch(s) else None


def parse_samples(text: Optional[str]) -> tuple:
    """``--samples`` as typed: ``(N, None)`` for one row count N (the smallest participant's, checked by
    :func:`resolve_delta` as ever), ``(None, (n1, n2, ...))`` for each site's rows separated by commas,
    ``(None, None)`` when not given. ``ValueError`` (one line, the option's usage error) for one value
    that is not a whole number (:data:`NOT_AN_INTEGER`) or a list with an empty entry, a non-number or
    a count below 1."""
    if text is None:
        return None, None
    if "," not in text:
        n = _whole(text)
        if n is None:
            raise ValueError(NOT_AN_INTEGER)
        return n, None
    counts = []
    for part in text.split(","):
        n = None if not part.strip() else _whole(part)
        if n is None:
            what = "an empty entry" if not part.strip() else f"{part.strip()!r}, not a row count"
            raise ValueError(f"{text!r} has {what}; give each site's rows as whole numbers separated by commas, "
                             "e.g. 221,133,88")
        if n < 1:
            raise ValueError(f"{text!r}: every site needs at least one row, got {n}")
        counts.append(n)
    return None, tuple(counts)


def _samples_option(text: str) -> tuple:
    """``--samples N`` or ``n1,n2,...``: ``(N, None)`` or ``(None, rows)``; a bad value is the option's
    usage error (one line, exit 2). Parsed here, without the accountant: a huge --epsilon is answered
    at start-up speed."""
    try:
        return parse_samples(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def command(
    ctx: typer.Context,
    epsilon: Optional[float] = typer.Option(
        None, "--epsilon", envvar="BNSL_EPSILON", show_default=False,
        help="Target epsilon (> 0): calibrate the noise, or with --max-rho give the largest zCDP rho.",
    ),
    delta: Optional[float] = typer.Option(
        None, "--delta", envvar="BNSL_DELTA", show_default=False,
        help="delta in (0, 1). learn uses 1/n_p**2 by default (n_p = smallest participant's rows).",
    ),
    samples: Optional[tuple] = typer.Option(
        None, "--samples", metavar="N[,N...]", show_default=False, parser=_samples_option,
        help="Rows N of the smallest participant; sets delta as learn does, min(1/N**2, 0.01/N). Or each site's rows "
        "n1,n2,...: P sites, delta as learn sets it; fed-suffstats with --nodes adds the last stage's noise, n_eff, "
        "the verdict of learn's check and the smallest epsilon that works.",
    ),
    rounds: Optional[int] = typer.Option(
        None, "--rounds", show_default=False,
        help=f"ADMM rounds K the budget is spread over \\[default: {DP_ROUNDS}, the DP default of learn].",
    ),
    steps: Optional[int] = typer.Option(
        None, "--steps", show_default=False, help="DP-PGCD steps T per round."
    ),
    nodes: Optional[int] = typer.Option(
        None, "--nodes", show_default=False,
        help="Number of variables d; sets T = max(20, d // 2) (learn --dp default) when --steps is not given.",
    ),
    rho: Optional[float] = typer.Option(
        None, "--rho", show_default=False, help="Convert this zCDP rho to (epsilon, delta)."
    ),
    max_rho: bool = typer.Option(
        False, "--max-rho", help="With --epsilon/--delta: print the largest zCDP rho they allow."
    ),
    gumbel_multiplier: Optional[float] = typer.Option(
        None, "--gumbel-multiplier", show_default=False,
        help="Spend mode: Gumbel scale / score sensitivity (b / Delta_S) of each coordinate selection.",
    ),
    sigma_multiplier: Optional[float] = typer.Option(
        None, "--sigma-multiplier", show_default=False,
        help="Spend mode: Gaussian std / sensitivity of each coordinate update (fed-bnsl: of the covariance).",
    ),
    moment_multiplier: Optional[float] = typer.Option(
        None, "--moment-multiplier", show_default=False,
        help="Spend mode: std / sensitivity of the one-off second-moment release (omit: not counted).",
    ),
    mean_multiplier: Optional[float] = typer.Option(
        None, "--mean-multiplier", show_default=False,
        help="Spend mode: std / sensitivity of the one-off column-mean release (omit: not counted).",
    ),
    selection_share: float = typer.Option(
        SELECTION_SHARE, "--selection-share", envvar="BNSL_SELECTION_SHARE",
        help="Share a of each step's budget spent on the coordinate selection (rest: the update).",
    ),
    moment_share: float = typer.Option(
        MOMENT_SHARE, "--moment-share", help="fed-sparse: share of the whole budget for the second-moment release (learn --dp uses the default)."
    ),
    mean_share: float = typer.Option(
        MEAN_SHARE, "--mean-share", help="fed-sparse: share of the whole budget for the column-mean release (learn --dp uses the default)."
    ),
    polish_share: float = typer.Option(
        POLISH_SHARE, "--polish-share",
        help="fed-sparse: share of the whole budget for the polish's second moments (learn --dp uses the default; 0 matches learn --dp --no-polish).",
    ),
    polish_multiplier: Optional[float] = typer.Option(
        None, "--polish-multiplier", show_default=False,
        help="Spend mode: std / sensitivity of the polish's second-moment release (omit: not counted).",
    ),
    public_means: bool = typer.Option(
        False, "--public-means", envvar="BNSL_PUBLIC_MEANS",
        help="The column means are public / the data centred: no mean release (mean share 0).",
    ),
    value_bound: Optional[float] = typer.Option(
        None, "--value-bound",
        help="As in learn --dp: a public bound on |x|; then no value-range histograms are released.",
    ),
    conversion: Conversion = typer.Option(
        Conversion.tight, "--conversion", envvar="BNSL_CONVERSION",
        help="zCDP -> (epsilon, delta): tight (Canonne-Kamath-Steinke 2020) or simple (Bun-Steinke 2016).",
    ),
    accountant: str = typer.Option(
        "pld", "--accountant", envvar="BNSL_ACCOUNTANT", metavar="[pld|zcdp]",
        help="How a release list's spend is read (calibration and spend modes): privacy-loss distributions or "
        "zCDP; the table shows both.",
    ),
    method: Optional[str] = typer.Option(
        None, "--method", metavar="METHOD", show_default=False,
        help="A method with a private variant. fed-suffstats: scale histograms + staged whitened moments; fed-sparse: "
        "DP-PGCD selection + update noise; fed-bnsl: one Gaussian release of X^T X; "
        "fed-moments: one Gaussian release of the (scaled) moment matrix \\[default: fed-suffstats, learn --dp's].",
    ),
    sites: Optional[int] = typer.Option(
        None, "--sites", show_default=False,
        help="fed-suffstats: the number of sites P (the noise of the pooled sum under both calibrations).",
    ),
    collusion_tolerance: int = typer.Option(
        0, "--collusion-tolerance", metavar="T",
        help="fed-suffstats, distributed noise: each share has variance σ²/(P − T) (learn --collusion-tolerance).",
    ),
    releases_file: Optional[Path] = typer.Option(
        None, "--releases", metavar="FILE", show_default=False,
        help="Spend mode for a whole release list: a run's report.json (learn --dp) or a privacy-budget --json "
        "output; prints the (epsilon, delta) those releases spend (delta from the file unless given).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Write the result as JSON on stdout."),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", envvar="BNSL_QUIET", help="Only the result (no assumptions block on stderr)."
    ),
) -> None:
    """Privacy budget <-> noise for `learn --dp` (zCDP, replace-one row of one participant).

    * Noise for a target: --epsilon E --delta D --rounds K --steps T (or --nodes d).

    * Budget spent by given noise: --gumbel-multiplier G --sigma-multiplier S --steps T --delta D.

    * Budget spent by a run's release list: --releases report.json.

    * Conversions: --rho R --delta D gives epsilon; --epsilon E --delta D --max-rho gives the largest rho.

    * Before a run: --epsilon E --samples n1,n2,... --nodes d (each site's rows): will learn --dp refuse, how noisy.

    The result table goes to stdout (--json: JSON instead), the assumptions block to stderr (-q: left out).
    Exit code 5 when the budget is invalid or cannot be met.
    """
    if epsilon is not None:  # the public bound first: a huge ε is answered before the accountant loads
        from bnsl_cli.privacy.limits import validate_epsilon

        validate_epsilon(epsilon)
    from bnsl_cli.plan.budget import BudgetQuery, budget_method, budget_table

    samples_n, site_rows = samples or (None, None)
    for opt, value, least in (("--nodes", nodes, 2), ("--rounds", rounds, 1), ("--steps", steps, 1)):
        if value is not None and value < least:
            from bnsl_cli.errors import OptionError

            raise OptionError(f"{opt} must be at least {least}, got {value}")
    spec = budget_method(method, accountant)
    _check_method_options(ctx, spec.name)
    query = BudgetQuery(
        epsilon=epsilon, delta=delta, samples=samples_n, rounds=rounds, steps=steps, nodes=nodes, rho=rho,
        max_rho=max_rho, gumbel_multiplier=gumbel_multiplier, sigma_multiplier=sigma_multiplier,
        moment_multiplier=moment_multiplier, mean_multiplier=mean_multiplier, polish_multiplier=polish_multiplier,
        selection_share=selection_share, moment_share=moment_share, mean_share=mean_share, polish_share=polish_share,
        public_means=public_means, value_bound=value_bound, conversion=conversion.value, accountant=accountant,
        sites=sites, collusion_tolerance=collusion_tolerance, releases=releases_file, site_rows=site_rows,
    )
    table = budget_table(spec, query)
    if json_out:
        from bnsl_cli.cli.common import print_json

        print_json(table.data)
    else:
        _render(table, quiet)


def _check_method_options(ctx, meth: str) -> None:
    """Refuse an option typed on the command line that ``meth`` does not take (the registry's
    ``budget_options``); a value from a ``BNSL_*`` variable, or the default typed out, is not refused
    (as in learn)."""
    from bnsl_cli.federated.method_options import BUDGET_OPTIONS
    from bnsl_cli.federated.methods.registry import check_budget_options

    defaults = {p.name: p.default for p in ctx.command.params}
    typed = {}
    for flag, opt in BUDGET_OPTIONS.items():
        src = ctx.get_parameter_source(opt.attr)
        typed[flag] = src is not None and src.name == "COMMANDLINE" and ctx.params.get(opt.attr) != defaults.get(opt.attr)
    check_budget_options(meth, typed)


# ------------------------------------------------------------------------------------------------
# rendering
# ------------------------------------------------------------------------------------------------


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isinf(x):
            return "inf"
        return f"{x:.6g}"
    return str(x)


def _render(table, quiet: bool = False) -> None:
    """The assumptions (``table.notes``) on stderr unless ``quiet``, the rows on stdout."""
    from rich.table import Table

    from bnsl_cli.cli.common import err_console, print_table

    assumptions = Table(title="Assumptions", show_header=False, title_justify="left", box=None, pad_edge=False)
    assumptions.add_column(style="bold")
    assumptions.add_column(overflow="fold")
    for key, value in table.notes.items():
        assumptions.add_row(key, value)

    result = Table(title=table.title, title_justify="left")
    quantity, value, how = table.columns
    result.add_column(quantity, style="bold")
    result.add_column(value, justify="right")
    result.add_column(how, overflow="fold")
    for name, number, note in table.rows:
        result.add_row(name, _fmt(number), note)

    if not quiet:
        print_table(assumptions, to_stderr=True)
        err_console.print()
    print_table(result)  # the result, like evaluate's table
