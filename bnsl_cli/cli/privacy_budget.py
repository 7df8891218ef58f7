"""`bnsl privacy-budget`: the noise a target (epsilon, delta) allows, or the (epsilon, delta) a noise level spends.

A thin layer: options are parsed here, the numbers come from ``bnsl_cli.privacy`` (imported lazily so
that ``bnsl --help`` stays fast), the table goes to stderr and ``--json`` to stdout.
"""

# No ``from __future__ import annotations``: typer reads the option types at runtime.

import math
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from bnsl_cli.privacy.defaults import DP_ROUNDS, MEAN_SHARE, MOMENT_SHARE, POLISH_SHARE, SELECTION_SHARE


class Conversion(str, Enum):
    tight = "tight"
    simple = "simple"


_DELTA_HELP = (
    "`bnsl learn --dp` uses delta = 1/n_p**2 by default (n_p = rows of the smallest participant); "
    "give --delta D or --samples N (delta = 1/N**2)."
)


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
    samples: Optional[int] = typer.Option(
        None, "--samples", show_default=False,
        help="Rows N of the smallest participant; sets delta = 1/N**2 (learn's default).",
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

    The result table goes to stdout (--json: JSON instead), the assumptions block to stderr (-q: left out).
    Exit code 5 when the budget is invalid or cannot be met.
    """
    from bnsl_cli.cli.common import fail
    from bnsl_cli.federated.methods import METHODS, PRIVATE_METHODS, method_spec

    conv = conversion.value
    meth = method
    if meth is None:  # learn --dp's default method
        from bnsl_cli.federated.methods import default_method

        meth = default_method(True)
    if accountant not in ("pld", "zcdp"):
        raise fail(f"--accountant: unknown accountant {accountant!r}; use pld or zcdp", 2)
    if meth not in PRIVATE_METHODS:
        what = "has no private variant" if meth in METHODS else "is not a method"
        raise fail(f"--method: {meth!r} {what}; choose one of {', '.join(PRIVATE_METHODS)}", 2)
    spec = method_spec(meth)
    _check_method_options(ctx, meth)
    spend_mode = gumbel_multiplier is not None or sigma_multiplier is not None
    if releases_file is not None:
        if spend_mode or rho is not None or max_rho or epsilon is not None:
            raise fail("--releases computes the spend of a release list; give it alone (with --delta/--samples, --conversion)", 2)
        result = _spend_list(releases_file, delta, samples, conv, fail, accountant)
        if json_out:
            from bnsl_cli.cli.common import print_json

            print_json(result["json"])
        else:
            _render(result, quiet)
        return

    # ---- which direction ---------------------------------------------------------------------
    if rho is not None and (spend_mode or max_rho):
        raise fail("--rho converts a given rho; do not combine it with noise multipliers or --max-rho", 2)
    if spend_mode and max_rho:
        raise fail("--max-rho needs --epsilon, not noise multipliers", 2)
    if rho is None and not spend_mode and epsilon is None:
        raise fail(
            "say what to compute: --epsilon E (noise for a target budget), --gumbel-multiplier G "
            "--sigma-multiplier S (budget spent by given noise), or --rho R (epsilon of rho-zCDP)",
            2,
        )

    delta_value, delta_source = _resolve_delta(delta, samples, fail)

    if rho is not None:
        if not math.isfinite(rho):
            raise fail(f"--rho must be a finite number, got {rho}", 2)
        result = _convert(rho, delta_value, conv)
    elif spend_mode:
        result = _spend(
            spec, gumbel_multiplier, sigma_multiplier, moment_multiplier, mean_multiplier, rounds, steps,
            nodes, delta_value, conv, public_means, fail, polish_multiplier, value_bound is not None, accountant,
        )
    elif max_rho or (
        not spec.distributed_noise and not spec.one_matrix and rounds is None and steps is None and nodes is None
    ):
        result = _max_rho(epsilon, delta_value, conv)
    else:
        from bnsl_cli.plan.options import DPConfig

        # the privacy options exactly as `learn --dp` passes them to the plan
        dp = DPConfig(
            epsilon=epsilon, delta=delta_value, selection_share=selection_share, conversion=conv,
            public_means=public_means, value_bound=value_bound, polish_share=polish_share, accountant=accountant,
            collusion_tolerance=collusion_tolerance,
        )
        result = _calibrate(spec, dp, rounds=rounds, steps=steps, nodes=nodes, mean_share=mean_share,
                            moment_share=moment_share, sites=sites, fail=fail, samples=samples)
    result["assumptions"]["delta"] = delta_source

    if json_out:
        from bnsl_cli.cli.common import print_json

        print_json(result["json"])
    else:
        _render(result, quiet)


# ------------------------------------------------------------------------------------------------
# resolving options
# ------------------------------------------------------------------------------------------------


def _check_method_options(ctx, meth: str) -> None:
    """Refuse an option typed on the command line that ``meth`` does not take (the registry's
    ``budget_options``); a value from a ``BNSL_*`` variable, or the default typed out, is not refused
    (as in learn)."""
    from bnsl_cli.federated.method_options import BUDGET_OPTIONS
    from bnsl_cli.federated.methods import check_budget_options

    defaults = {p.name: p.default for p in ctx.command.params}
    typed = {}
    for flag, opt in BUDGET_OPTIONS.items():
        src = ctx.get_parameter_source(opt.attr)
        typed[flag] = src is not None and src.name == "COMMANDLINE" and ctx.params.get(opt.attr) != defaults.get(opt.attr)
    check_budget_options(meth, typed)


def _resolve_delta(delta, samples, fail):
    if delta is not None and samples is not None:
        raise fail("give either --delta or --samples (delta = 1/N**2), not both", 2)
    if delta is not None:
        return float(delta), f"{delta:g} (given)"
    if samples is not None:
        if samples < 1:
            raise fail(f"--samples must be a positive row count, got {samples}", 2)
        return 1.0 / float(samples) ** 2, f"1/N**2 with N = {samples} rows"
    raise fail(f"delta is missing. {_DELTA_HELP}", 2)


def _rounds_steps(rounds, steps, nodes, fail):
    from bnsl_cli.privacy.defaults import dp_steps

    k = DP_ROUNDS if rounds is None else rounds
    if steps is not None:
        return k, steps, "given"
    if nodes is not None:
        if nodes < 1:
            raise fail(f"--nodes must be >= 1, got {nodes}", 2)
        return k, dp_steps(nodes), f"max(20, d // 2) with d = {nodes}"
    raise fail("the steps per round are missing: give --steps T, or --nodes d to use T = max(20, d // 2)", 2)


def _base_assumptions(conv: str) -> dict:
    from bnsl_cli.privacy.accountant import CONVERSION_DESCRIPTIONS
    from bnsl_cli.privacy.ledger import NEIGHBOURING_RELATION

    return {
        "neighbouring relation": NEIGHBOURING_RELATION,
        "privacy model": "zCDP; releases add up; the run's guarantee is the largest participant's spend",
        "conversion": CONVERSION_DESCRIPTIONS[conv],
    }


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


# ------------------------------------------------------------------------------------------------
# the four computations
# ------------------------------------------------------------------------------------------------


def _convert(rho: float, delta: float, conv: str) -> dict:
    from bnsl_cli.privacy.accountant import epsilon_from_rho, validate_delta

    validate_delta(delta)
    eps = epsilon_from_rho(rho, delta, conv)
    tight = epsilon_from_rho(rho, delta, "tight")
    simple = epsilon_from_rho(rho, delta, "simple")
    data = {
        "mode": "convert",
        "epsilon": eps,
        "delta": delta,
        "rho": float(rho),
        "conversion": conv,
        "epsilon_tight": tight,
        "epsilon_simple": simple,
    }
    rows = [
        ("rho (zCDP)", rho, "given"),
        ("delta", delta, ""),
        ("epsilon", eps, f"{conv} conversion"),
        ("epsilon (tight)", tight, "Canonne-Kamath-Steinke 2020"),
        ("epsilon (simple)", simple, "rho + 2 sqrt(rho ln(1/delta))"),
    ]
    return {"title": "zCDP -> (epsilon, delta)", "assumptions": _base_assumptions(conv), "rows": rows,
            "json": data}


def _max_rho(epsilon: float, delta: float, conv: str) -> dict:
    from bnsl_cli.privacy.accountant import epsilon_from_rho, rho_for_epsilon

    r = rho_for_epsilon(epsilon, delta, conv)
    data = {
        "mode": "max-rho",
        "epsilon": float(epsilon),
        "delta": delta,
        "rho": r,
        "conversion": conv,
        "epsilon_at_rho": epsilon_from_rho(r, delta, conv),
    }
    rows = [
        ("epsilon", epsilon, "target"),
        ("delta", delta, ""),
        ("rho (zCDP)", r, f"largest rho with epsilon(rho, delta) <= target ({conv})"),
    ]
    return {"title": "Largest zCDP budget for (epsilon, delta)", "assumptions": _base_assumptions(conv),
            "rows": rows, "json": data}


def _release_rows(releases) -> list:
    """One table row per planned release: its noise multiplier, count and zCDP cost."""
    return [
        (f"{r.kind.value} multiplier", r.multiplier,
         f"noise / sensitivity ({r.mechanism}); {r.count} × rho {r.rho_each:.4g} = {r.rho:.4g}"
         + (f"; noise split over {r.split} sites (each adds 1/{r.split} of the variance)" if r.split > 1 else ""))
        for r in releases
    ]


def _events(releases, delta, conv) -> list:
    from bnsl_cli.privacy.release_plan import ledger_of

    return ledger_of(releases).to_dict(delta, conv)["participants"][0]["events"]


def _accountants(releases, delta, conv, acc) -> tuple[list, dict]:
    """Rows and JSON fields with the ε of ``releases`` by both accountants (``acc`` is the one used)."""
    from bnsl_cli.privacy.release_plan import spend_of

    eps = {a: spend_of(releases, delta, conv, a)[0] for a in ("pld", "zcdp")}
    rows = [
        (f"epsilon ({a})", eps[a], ("used: " if a == acc else "for comparison: ")
         + ("privacy-loss distributions" if a == "pld" else f"zCDP, {conv} conversion"))
        for a in ("pld", "zcdp")
    ]
    return rows, {"accountant": acc, "epsilon_pld": eps["pld"], "epsilon_zcdp": eps["zcdp"]}


def _calibrate(spec, dp, *, rounds, steps, nodes, mean_share, moment_share, sites, fail, samples=None) -> dict:
    """Calibrate mode: the privacy plan `learn --dp` resolves for these options, from the same
    function (:func:`~bnsl_cli.plan.privacy_plan.resolve_privacy`, which builds and calibrates the
    release list with the method's release builder), then its table.

    The release list of DP-PGCD (fed-sparse) depends on the rounds K and steps T (learn --dp's
    defaults: K = DP_ROUNDS, T from the number of variables) and, as a what-if that learn does not
    offer, on the mean and second-moment shares; the one-matrix methods and fed-suffstats use
    learn's shares and make no per-step release."""
    from bnsl_cli.plan.privacy_plan import resolve_privacy

    if spec.distributed_noise:
        _check_sites(sites, dp.collusion_tolerance, fail)
    if spec.one_matrix or spec.distributed_noise:
        k = t = None
        t_source = ""
        pv = resolve_privacy(spec.name, dp, delta=dp.delta, rounds=1, steps=1, polish=False, d=nodes)
    else:
        k, t, t_source = _rounds_steps(rounds, steps, nodes, fail)
        pv = resolve_privacy(spec.name, dp, delta=dp.delta, rounds=k, steps=t, polish=dp.polish_share > 0, d=nodes,
                             mean_share=0.0 if dp.public_means else mean_share, moment_share=moment_share)
    if spec.distributed_noise:
        return _suffstats_table(spec, pv, nodes=nodes, sites=sites, tolerance=dp.collusion_tolerance, samples=samples)
    return _calibration_table(spec, pv, k=k, t=t, t_source=t_source, nodes=nodes)


def _calibration_table(spec, pv, *, k, t, t_source, nodes) -> dict:
    """The table and JSON of a DP-PGCD or one-matrix privacy plan ``pv``."""
    meth = spec.name
    delta, conv, acc, a = pv.delta, pv.conversion, pv.accountant, pv.selection_share
    public_means, value_bound = pv.public_means, pv.value_bound
    summary = pv.summary()
    data = {"mode": "calibrate", "method": meth, **summary}
    data.update(
        nodes=nodes,
        public_means=public_means,
        epsilon_spent=summary["epsilon_planned"],
        rho_spent=summary["rho_planned"],
        neighbouring_relation=_base_assumptions(conv)["neighbouring relation"],
        events=_events(pv.releases, delta, conv),
    )
    assumptions = _base_assumptions(conv)
    if spec.one_matrix:
        assumptions.update({
            "releases": "one-off releases, then X_p^T X_p once (rows clipped to L2 norm C_x, symmetric Gaussian noise)",
            "sensitivity": "sqrt(2) C_x**2 (replace-one)",
            "budget split": f"column means {pv.mean_share:g}, second moments {pv.moment_share:g} of rho*, covariance the rest",
        })
    else:
        assumptions.update({
            "rounds K": f"{k}",
            "steps T": f"{t} ({t_source})",
            "budget split": (
                f"second moments {pv.moment_share:g}, column means {pv.mean_share:g}"
                + (" (public means: no release)" if public_means else "")
                + f", polish second moments {pv.polish_share:g}"
                + f", iterations the rest; per step: selection a = {a:g}, update 1 - a = {1 - a:g}"
            ),
        })
    title = f"{spec.dp_title} noise plan"
    assumptions["value ranges"] = (
        "public --value-bound: no value-range release" if value_bound is not None
        else "each one-off release spends half its share on a noisy value-range histogram first"
    )
    rows = [
        ("epsilon", pv.epsilon, "target"),
        ("delta", pv.delta, ""),
        ("rho* (zCDP)", pv.rho_target, "whole budget per participant"),
        ("rho second moments", summary["rho_moments"], f"{pv.moment_share:g} of rho* (with its value range)"),
        ("rho column means", summary["rho_means"], f"{pv.mean_share:g} of rho* (with its value range)"),
    ]
    if not spec.one_matrix:
        rows += [
            ("rho polish", summary["rho_polish"], f"{pv.polish_share:g} of rho* (once, after the rounds)"),
            ("rho per step", summary["rho_per_step"], f"(rho* - one-off - polish) / (K T), K T = {k * t}"),
            ("rho selection / step", summary["rho_selection_per_step"], f"a = {a:g}"),
            ("rho update / step", summary["rho_update_per_step"], f"1 - a = {1 - a:g}"),
            ("Gumbel multiplier", summary["gumbel_multiplier"], "b / Delta_S = 1/sqrt(2 rho_sel)"),
            ("eps_s per selection", summary["selection_epsilon_per_step"], "2 Delta_S / b (pure DP of one selection)"),
            ("sigma multiplier", summary["sigma_multiplier"], "sigma / Delta = 1/sqrt(2 rho_upd)"),
        ]
    else:
        rows += [
            (f"rho {spec.matrix_release.value.replace('-', ' ')}",
             summary["rho_covariance"] + summary.get("rho_moment_matrix", 0.0), ""),
            ("sigma multiplier", summary["sigma_multiplier"], "sigma / Delta = 1/sqrt(2 rho_cov)"),
        ]
    rows += _release_rows(pv.releases)
    rows.append(("epsilon spent (check)", summary["epsilon_planned"], f"accounted from the planned ledger ({acc})"))
    both_rows, both = _accountants(pv.releases, delta, conv, acc)
    rows += both_rows
    data.update(both)
    return {"title": title, "assumptions": assumptions, "rows": rows, "json": data}


def _check_sites(sites, tolerance, fail) -> None:
    if sites is not None and sites < 1:
        raise fail("--sites must be >= 1", 2)
    if tolerance < 0 or (sites is not None and tolerance >= max(sites, 1) and tolerance > 0):
        raise fail("--collusion-tolerance must be >= 0 and below --sites", 2)


def _suffstats_table(spec, pv, *, nodes, sites, tolerance, samples=None) -> dict:
    """fed-suffstats: the releases of the privacy plan ``pv`` (what `learn --dp --method
    fed-suffstats` plans), and the noise each site adds and the pooled sum carries under per-site
    and under distributed noise (the split `learn --noise distributed` gives its releases)."""
    from bnsl_cli.privacy.defaults import SUFFSTATS_CENTRE_SHARE as CENTRE_SHARE
    from bnsl_cli.privacy.defaults import SUFFSTATS_HIST_SHARE as HIST_SHARE
    from bnsl_cli.privacy.defaults import SUFFSTATS_STAGE_SHARES as STAGE_SHARES
    from bnsl_cli.privacy.split_noise import distribute_noise

    CLIP = spec.clip_multiplier
    delta, conv = pv.delta, pv.conversion
    summary = pv.summary()
    P = sites
    # the distributed calibration: each release's split as learn --noise distributed plans it
    distributed = pv.releases if P is None else distribute_noise(pv, spec.name, spec.distributed_noise, P, "distributed", tolerance).releases
    rows = [
        ("epsilon", pv.epsilon, "target"),
        ("delta", pv.delta, ""),
        ("rho* (zCDP)", pv.rho_target, "whole budget per participant"),
    ]
    rows += _release_rows(pv.releases)
    from bnsl_cli.federated.methods.suffstats import release_sensitivity
    from bnsl_cli.privacy.releases import ReleaseKind

    calib = []
    stage = 0
    for r, shared in zip(pv.releases, distributed):
        name = r.kind.value
        if r.kind == ReleaseKind.WHITENED_MOMENTS:
            stage += 1
            name = f"{name} (stage {stage})"
        sens = None if nodes is None else release_sensitivity(r.kind, nodes)
        sigma = None if sens is None else r.multiplier * sens
        entry = {"release": r.kind.value, "noise_multiplier": r.multiplier, "sensitivity": sens, "sigma": sigma}
        if P is not None:
            k = 1.0 if sigma is None else sigma
            share = shared.split
            entry["per_site"] = {"each_site_std": k, "pooled_sum_std": k * math.sqrt(P)}
            entry["distributed"] = {"each_site_std": k / math.sqrt(share), "pooled_sum_std": k * math.sqrt(P / share),
                                    "collusion_tolerance": tolerance}
            unit = "σ" if sigma is None else ""
            rows.append((f"{name} pooled noise, per-site", entry["per_site"]["pooled_sum_std"],
                         f"{unit} every site adds σ; the sum of {P} carries σ·√{P}"))
            rows.append((f"{name} pooled noise, distributed", entry["distributed"]["pooled_sum_std"],
                         f"{unit} each site adds σ/√{share}; any {share} shares carry σ (t = {tolerance})"))
        calib.append(entry)
    scales = None
    if nodes is not None and P is not None and samples is not None and calib:
        # the last stage's noise scale 2·τ·√(d + 1) that learn warns above 1, as expected when the basis
        # whitens: τ = pooled noise / clipped weight, the weight that of whitened rows (a poorer basis keeps less)
        from bnsl_cli.federated.methods.suffstats import clipped_weight_fraction, noise_scale

        last = calib[-1]
        weight = clipped_weight_fraction(nodes) * float(samples) * P
        scales = {"per_site": noise_scale(last["per_site"]["pooled_sum_std"] / weight, nodes),
                  "distributed": noise_scale(last["distributed"]["pooled_sum_std"] / weight, nodes)}
        for mode, label in (("per_site", "per-site"), ("distributed", "distributed")):
            rows.append((f"last stage noise scale, {label}", scales[mode],
                         f"expected with {P} × {samples} rows and a whitening basis (a poorer one: larger); above 1 learn warns"))
    rows.append(("epsilon spent (check)", summary["epsilon_planned"], "accounted from the planned ledger; the same under both calibrations"))
    assumptions = _base_assumptions(conv)
    assumptions.update({
        "releases": f"scale histograms, centre histograms, then {len(STAGE_SHARES)} stages of whitened second moments "
                    "(sums over the rows)",
        "sensitivity": "scale histograms 2·sqrt(d); centre histograms sqrt(2·d); moments sqrt(2)·C**2 with "
                       "C = %g·sqrt(d + 1) (replace-one)" % CLIP,
        "budget split": f"scale histograms {HIST_SHARE:g} of rho*, centre histograms {CENTRE_SHARE:g}, stages "
                        f"{', '.join(f'{f:g}' for f in STAGE_SHARES)} of the rest",
        "value ranges": "none: the scale histograms have fixed bins, no row count is too small for them",
        "calibrations": "per-site: every site adds all of the noise; distributed: shares under a secure sum "
                        "(honest-but-curious coordinator; holds against it with up to T colluding sites)",
    })
    data = {"mode": "calibrate", "method": spec.name, **summary, "nodes": nodes, "sites": P,
            "collusion_tolerance": tolerance, "calibrations": calib, "noise_scale": scales,
            "epsilon_spent": summary["epsilon_planned"], "rho_spent": summary["rho_planned"],
            "events": _events(pv.releases, delta, conv)}
    return {"title": f"{spec.dp_title} noise plan", "assumptions": assumptions, "rows": rows, "json": data}


def _spend_list(path: Path, delta, samples, conv, fail, acc="pld") -> dict:
    """The (ε, δ) a run's release list spends: ``privacy.plan.releases`` of a report, or
    ``releases`` of a privacy-budget --json output."""
    import json as _json

    from bnsl_cli.errors import InputDataError
    from bnsl_cli.privacy.release_plan import spend_of
    from bnsl_cli.privacy.releases import PlannedRelease

    try:
        doc = _json.loads(path.read_text(encoding="utf-8"))
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
    if delta is None and samples is None:
        if plan.get("delta") is None:
            raise fail(f"delta is missing and {path} has none. {_DELTA_HELP}", 2)
        delta_value, source = float(plan["delta"]), f"{plan['delta']:g} (from {path})"
    else:
        delta_value, source = _resolve_delta(delta, samples, fail)
    eps, r = spend_of(releases, delta_value, conv, acc)
    assumptions = _base_assumptions(conv)
    assumptions["releases"] = f"{len(releases)} kinds from {path}"
    assumptions["delta"] = source
    if any(rel.split > 1 for rel in releases):
        from bnsl_cli.privacy.ledger import SPLIT_ASSUMPTION

        assumptions["split releases"] = SPLIT_ASSUMPTION
    data = {
        "mode": "spend", "source": str(path), "epsilon": eps, "delta": delta_value, "rho": r, "conversion": conv,
        "releases": [rel.to_dict() for rel in releases],
        "neighbouring_relation": assumptions["neighbouring relation"],
        "events": _events(releases, delta_value, conv),
    }
    rows = _release_rows(releases) + [
        ("rho (zCDP)", r, "sum over the releases"),
        ("delta", delta_value, ""),
        ("epsilon", eps, f"{acc} accountant" + (f", {conv} conversion" if acc == "zcdp" else "")),
    ]
    both_rows, both = _accountants(releases, delta_value, conv, acc)
    rows += both_rows
    data.update(both)
    return {"title": "Budget spent by a release list", "assumptions": assumptions, "rows": rows, "json": data}


def _spend_releases(spec, g, s, m, mean, pol, k, t, value_bound_given):
    """The release list `learn --dp` makes with these multipliers (built by the function the
    calibration builds its lists with): without a public value bound, each one-off release is
    preceded by its value-range release, which spends the same share of that release's budget as in
    learn."""
    from bnsl_cli.privacy.release_plan import range_multiplier, release_list

    one_offs = {
        key: (None if value_bound_given else range_multiplier(mult), mult)
        for key, mult in (("means", mean), ("moments", m)) if mult is not None
    }
    if spec.one_matrix:
        return release_list(**one_offs, matrix=(spec.matrix_release, s))
    return release_list(**one_offs, iterations=(g, s, k * t), polish=pol)


def _spend(spec, g, s, m, mean, rounds, steps, nodes, delta, conv, public_means, fail, pol=None,
           value_bound_given=False, acc="pld") -> dict:
    from bnsl_cli.errors import PrivacyBudgetError
    from bnsl_cli.privacy.accountant import validate_delta
    from bnsl_cli.privacy.release_plan import spend_of

    if public_means and mean is not None:
        raise fail("--public-means means no mean release; drop --mean-multiplier", 2)
    for name, v in (("gumbel", g), ("sigma", s), ("moment", m), ("mean", mean), ("polish", pol)):
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise PrivacyBudgetError(f"the {name} noise multiplier must be a finite number > 0, got {v!r}")
    validate_delta(delta)
    assumptions = _base_assumptions(conv)
    meth = spec.name
    if spec.distributed_noise:
        raise fail(
            f"spend mode by noise multipliers covers DP-PGCD and one-matrix releases; {meth}'s releases are "
            "histograms and stages: give their list with --releases FILE (a report.json or privacy-budget --json output)",
            2,
        )
    if spec.one_matrix:
        if g is not None:
            raise fail(f"{meth} makes no coordinate selections; drop --gumbel-multiplier", 2)
        if pol is not None:
            raise fail(f"{meth} has no polish release; drop --polish-multiplier", 2)
        if s is None:
            raise fail(f"spend mode for {meth} needs --sigma-multiplier (the covariance's / moment matrix's)", 2)
        k = t = None
        t_source = ""
    else:
        if g is None or s is None:
            raise fail("spend mode needs both --gumbel-multiplier and --sigma-multiplier", 2)
        k, t, t_source = _rounds_steps(rounds, steps, nodes, fail)
    from bnsl_cli.privacy.releases import ReleaseKind as K

    releases = _spend_releases(spec, g, s, m, mean, pol, k, t, value_bound_given)
    eps, r = spend_of(releases, delta, conv, acc)
    by = {}
    for rel in releases:
        by[rel.kind] = by.get(rel.kind, 0.0) + rel.rho
    data = {
        "mode": "spend", "method": meth, "epsilon": eps, "delta": delta, "rho": r, "conversion": conv,
        "rounds": k, "steps": t, "nodes": nodes,
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
        "events": _events(releases, delta, conv),
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
    rows = _release_rows(releases) + [
        ("rho (zCDP)", r, "sum over the releases"),
        ("delta", delta, ""),
        ("epsilon", eps, f"{acc} accountant" + (f", {conv} conversion" if acc == "zcdp" else "")),
    ]
    both_rows, both = _accountants(releases, delta, conv, acc)
    rows += both_rows
    data.update(both)
    title = f"{spec.dp_title} budget spent"
    return {"title": title, "assumptions": assumptions, "rows": rows, "json": data}


# ------------------------------------------------------------------------------------------------
# rendering
# ------------------------------------------------------------------------------------------------


def _render(result: dict, quiet: bool = False) -> None:
    from rich.table import Table

    from bnsl_cli.cli.common import err_console, print_table

    assumptions = Table(title="Assumptions", show_header=False, title_justify="left", box=None, pad_edge=False)
    assumptions.add_column(style="bold")
    assumptions.add_column(overflow="fold")
    for key, value in result["assumptions"].items():
        assumptions.add_row(key, value)

    table = Table(title=result["title"], title_justify="left")
    table.add_column("quantity", style="bold")
    table.add_column("value", justify="right")
    table.add_column("how", overflow="fold")
    for name, value, note in result["rows"]:
        table.add_row(name, _fmt(value), note)

    if not quiet:
        print_table(assumptions, to_stderr=True)
        err_console.print()
    print_table(table)  # the result, like evaluate's table
