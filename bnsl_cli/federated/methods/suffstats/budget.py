"""When fed-suffstats' releases are usable and how noisy they are, from the plan's calibration alone
(the ε and rows per site that work, the last stage's noise scale and its warning, before a run from
the sites' row counts: :func:`site_utility`), and its ``privacy-budget`` table
(``MethodSpec.budget_table``: :func:`budget_table`)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

from bnsl_cli.federated.methods.admm.on_moments import effective_rows
from bnsl_cli.federated.methods.suffstats.bins import _P_STEPS
from bnsl_cli.federated.methods.suffstats.fits import pair_fractions
from bnsl_cli.errors import OptionError
from bnsl_cli.federated.methods.suffstats.releases import (
    CLIP,
    offdiagonal_noise_std,
    pooled_noise_std,
    release_sensitivity,
    stage_releases,
)
from bnsl_cli.privacy.budget import BudgetQuery, BudgetTable, base_assumptions, events_of, release_rows
from bnsl_cli.federated.methods.suffstats.releases import CENTRE_SHARE, HIST_SHARE, STAGE_SHARES, planned_releases
from bnsl_cli.privacy.release_plan import spend_of
from bnsl_cli.privacy.releases import ReleaseKind
from bnsl_cli.privacy.split_noise import distribute_noise


@functools.lru_cache(maxsize=256)
def clipped_weight_fraction(d: int, spread: float = 1.0) -> float:
    """The expected share of a row's weight kept by the stages' clip when the basis whitens the data
    (``a = [1; z]``, ``z`` standard normal in ``d`` dimensions, ``‖a‖ ≤ CLIP·√(d + 1)``):
    ``E min(1, C² / (1 + χ²_d))``. A stage is usable when its clipped weight clears 3 noise stds.
    ``spread``: the same for rows whose whitened part has ``spread`` times the variance
    (``E min(1, C² / (1 + spread·χ²_d))``)."""
    from scipy import integrate
    from scipy.stats import chi2

    c2 = CLIP**2 * (d + 1)
    t = (c2 - 1.0) / spread
    below = chi2.cdf(t, d) if t > 0 else 0.0
    above, _ = integrate.quad(lambda x: c2 / (1.0 + spread * x) * chi2.pdf(x, d), max(t, 0.0), np.inf, limit=200)
    return float(below + above)


def gaussian_spread(d: int, kept: float) -> float:
    """The variance factor ``s`` of whitened Gaussian rows whose clip keeps the share ``kept`` of their
    weight (:func:`clipped_weight_fraction` with ``spread = s``; decreasing in ``s``): the spread at which
    Gaussian rows lose to the clip what the released rows lost. Clamped to ``[2⁻¹⁰, 2¹⁰]``."""
    lo, hi = -10.0, 10.0
    if clipped_weight_fraction(d, 2.0**hi) >= kept:
        return 2.0**hi
    if clipped_weight_fraction(d, 2.0**lo) <= kept:
        return 2.0**lo
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if clipped_weight_fraction(d, round(2.0**mid, 6)) > kept:
            lo = mid
        else:
            hi = mid
    return float(2.0 ** (0.5 * (lo + hi)))


#: The scale histograms are taken as readable when a Gaussian column's expected pair histogram stands
#: this many noise stds (of the pooled sum) out of the noise (its ℓ₂ norm over the bins).
HIST_SNR = 5.0


def pair_signal(n_pairs: float) -> float:
    """The ℓ₂ norm over the bins of a Gaussian column's expected pair histogram with ``n_pairs`` pairs
    (the mean over the bins' alignment: the same for any scale)."""
    fr = pair_fractions(np.arange(0.0, 1.0 / _P_STEPS, 1.0 / 16.0))
    return float(n_pairs) * float(np.mean(np.sqrt(np.sum(fr**2, axis=1))))


#: A stage is usable when its released clipped weight stands this many pooled noise stds out of the
#: noise (the driver's check before it uses a stage, ``w0 > 3·std``; :func:`usable_at` expects it).
STAGE_SNR = 3.0


def _usable_terms(plan, d: int) -> tuple:
    """What :func:`usable_at` and :func:`usable_margins` read of ``plan``: ``(n, P, last stage, scale
    histograms, the pooled noise std of each per unit multiplier, clipped weight fraction, pair signal
    per pair)``."""
    pv = plan.privacy
    n, P = float(plan.n_total), plan.P
    last = stage_releases(pv)[-1]
    hist = next(r for r in pv.releases if r.kind == ReleaseKind.SCALE_HISTOGRAM)
    # pooled noise std per unit multiplier
    stage_unit = pooled_noise_std(last, d, P) / last.multiplier
    hist_unit = pooled_noise_std(hist, d, P) / hist.multiplier
    return n, P, last, hist, stage_unit, hist_unit, clipped_weight_fraction(d), pair_signal(1.0)


def usable_at(plan, d: int) -> tuple[float, int]:
    """``(ε, rows per site)``: the smallest ε (at this plan's δ, rows and sites) and the fewest rows per
    site (at this ε) with which fed-suffstats' releases are expected to be usable — the scale
    histograms' pair signal (:func:`pair_signal`) ``HIST_SNR`` noise stds above their pooled noise, and
    the last (largest) whitened-moment stage's clipped weight of whitened rows
    (:func:`clipped_weight_fraction`) ``STAGE_SNR`` noise stds above its pooled noise — from the same
    calibration as ``privacy-budget --method fed-suffstats`` (the noise multipliers scale as ``1/√ρ*``).
    The inverse of :func:`usable_margins` (both ≥ 1 from that ε on)."""
    pv = plan.privacy
    n, P, last, hist, stage_unit, hist_unit, q, p1 = _usable_terms(plan, d)
    # rows: the stage needs q·n ≥ 3·std; the histograms need p1·n/2 ≥ HIST_SNR·std (pairs = rows / 2)
    rows = max(STAGE_SNR * last.multiplier * stage_unit / q, 2.0 * HIST_SNR * hist.multiplier * hist_unit / p1) / P
    # ε: the largest multiplier each release may have at these rows, then the ρ* that gives it
    unit = planned_releases(1.0)
    m_stage = q * n / (STAGE_SNR * stage_unit)
    m_hist = p1 * (n / 2.0) / (HIST_SNR * hist_unit)
    rho_star = max((unit[-1].multiplier / m_stage) ** 2, (unit[0].multiplier / m_hist) ** 2)
    return _epsilon_at(pv, rho_star), int(math.ceil(rows))


def usable_margins(plan, d: int) -> tuple[float, float]:
    """``(stage, histograms)``: the last stage's expected clipped weight over ``STAGE_SNR`` pooled noise
    stds, and the scale histograms' expected pair signal over ``HIST_SNR`` pooled noise stds — the two
    conditions of :func:`usable_at`; the releases are expected to be usable when both are ≥ 1 (below
    that, the refusal of a run quotes :func:`usable_at`'s ε and rows)."""
    n, P, last, hist, stage_unit, hist_unit, q, p1 = _usable_terms(plan, d)
    return (q * n / (STAGE_SNR * last.multiplier * stage_unit),
            p1 * (n / 2.0) / (HIST_SNR * hist.multiplier * hist_unit))


def _epsilon_at(pv, rho_star: float) -> float:
    """The ε that fed-suffstats' releases calibrated to ``rho_star`` spend, at the plan's δ, conversion
    and accountant."""
    return float(spend_of(planned_releases(rho_star), pv.delta, pv.conversion, pv.accountant)[0])


#: A plan whose smaller margin (:func:`usable_margins`) is below this is refused; from it up to 1 it runs
#: with a warning (the releases are expected to be weak: a draw may leave the graph empty); from 1 on it
#: works. At 0.5 the scale histograms' pair signal is 2.5 noise stds (half the 5 a clean read needs) and the
#: last stage's weight 1.5: below that the releases are expected to be lost (3 sites of 221 / 133 / 88 rows,
#: d = 11, ε = 5, per-site noise, margin 0.48: three of eight unseeded runs lost every stage; 5 × 1,000 rows,
#: d = 50, ε = 1, margin 0.88: the graph below the empty graph's SHD).
REFUSE_MARGIN = 0.5


def verdict_of(margins) -> str:
    """``works``, ``warns`` or ``refused`` from :func:`usable_margins`' two margins."""
    m = min(margins)
    return "works" if m >= 1.0 else "warns" if m >= REFUSE_MARGIN else "refused"


def plan_verdict(plan) -> tuple[str, Optional[str]]:
    """``(verdict, message)`` of a private plan, from public inputs only — the rule ``privacy-budget``
    quotes (:func:`site_utility`'s verdict): ``refused`` with the refusal, ``warns`` with a one-line
    warning, ``works`` with ``None``."""
    d = len(plan.names)
    verdict = verdict_of(usable_margins(plan, d))
    if verdict == "refused":
        return verdict, unusable_message(plan, d)
    if verdict == "warns":
        eps, rows = usable_at(plan, d)
        return verdict, (
            f"fed-suffstats: at ε = {plan.privacy.epsilon:g} the released statistics of {plan.n_total} rows over "
            f"{plan.P} sites (d = {d}) are expected to be weak (below the rule's thresholds, above half of them): the "
            f"graph may be empty on some draws; ε ≥ {round_up(eps):g} or ≥ {rows} rows per site are expected to work"
        )
    return verdict, None


def empty_graph_message(plan, d: int) -> str:
    """The warning of a run whose stages all lost the rows' weight in the noise (an unlucky draw of a
    plan expected to work, or rows far from what the plan assumes): the graph is empty."""
    eps, rows = usable_at(plan, d)
    return (
        f"fed-suffstats: no whitened-moment stage kept the rows' weight above the noise (ε = {plan.privacy.epsilon:g}, "
        f"{plan.n_total} rows over {plan.P} sites, d = {d}): the graph is empty; ε ≥ {round_up(eps):g} at these rows, or "
        f"≥ {rows} rows per site at this ε, are expected to be usable"
    )


def unusable_message(plan, d: int) -> str:
    eps, rows = usable_at(plan, d)
    pv = plan.privacy
    return (
        f"fed-suffstats: at ε = {pv.epsilon:g} the released statistics of {plan.n_total} rows over {plan.P} sites "
        f"(d = {d}) are expected to be lost in their noise; refused before any noise was drawn: expected to be usable "
        f"with ε ≥ {round_up(eps):g} at these rows, or with ≥ {rows} rows per site at this ε "
        "(privacy-budget --method fed-suffstats gives the same verdict)"
    )


#: The last stage's noise scale ``2·τ·√(d + 1)`` (about the spectral norm of its noise in the whitened
#: basis, where the covariance is near the identity) above which a run warns: on issue 19's grid
#: (d = 20 … 100, 286 private runs) 247 of the 249 runs at or below 1 were below the empty graph's SHD
#: (the other two 1.04 ×); above 1, 21 of 37 had at least 0.9 × it, every run above 2.3 (benchmarks/RESULTS.md).
NOISE_SCALE_WARN = 1.0


def noise_scale(tau: float, d: int) -> float:
    """``2·τ·√(d + 1)``: the last stage's noise against the whitened covariance's unit scale."""
    return 2.0 * float(tau) * math.sqrt(d + 1.0)


def noisy_moments_warning(plan, d: int, tau: float) -> Optional[str]:
    """A one-line warning when the last stage's noise scale (:func:`noise_scale`) is above
    :data:`NOISE_SCALE_WARN`, with the ε (at these rows) and rows per site (at this ε) that bring it
    to 1 — the noise std falls as ``1/√ρ*`` and the row weight grows with the rows — and, for per-site
    noise, the scale with the secure sum (``--noise distributed``)."""
    x = noise_scale(tau, d)
    if not x > NOISE_SCALE_WARN:
        return None
    pv = plan.privacy
    eps = _epsilon_at(pv, pv.rho_target * x * x / NOISE_SCALE_WARN**2)
    rows = int(math.ceil(min(p.rows for p in plan.participants) * x / NOISE_SCALE_WARN))
    split = max(int(r.split) for r in stage_releases(pv))
    secure = (f"; with the secure sum (--noise distributed) it would be about {x / math.sqrt(plan.P):.2g}"
              if split == 1 and plan.P > 1 else "")
    return (f"fed-suffstats: the released moments are too noisy for {d} variables (noise scale {x:.2g} against 1, "
            f"at ε = {pv.epsilon:g} over {plan.n_total} rows): expect many wrong edges, the graph may be farther from "
            f"the truth than the empty graph; "
            f"about ε ≥ {eps:.3g} at these rows, or ≥ {rows} rows per site at this ε, brings it to 1{secure}")


#: The clip warning's level: the last stage's rows lost more than this many times the share of their
#: weight that whitened Gaussian rows lose to the clip (:func:`clipped_weight_fraction`), beyond 3 stds
#: of the released weight's noise. Measured with the designed clip, before it could widen
#: (benchmarks/RESULTS.md, issue 27): Gaussian grid runs at ε ≥ 5 lose at most 1.53 times it (one run at
#: ε = 5 with a basis the noise kept from whitening: 5.3); Sachs, raw, 2.75 times (its graph 34 against the
#: non-private default's 28); Sachs with its columns logged 2.0 (28.7).
CLIP_LOSS_WARN = 2.0


def clipped_rows_warning(d: int, weight: float, weight_std: float) -> Optional[str]:
    """A one-line warning when the last stage's clip kept much less of the rows' weight (``weight``:
    the released clipped weight over the rows, with noise std ``weight_std``) than whitened Gaussian
    rows keep: heavy tails or skew (or a basis the noise kept from whitening), where the noise left the
    clip no room to widen (:func:`~bnsl_cli.federated.methods.suffstats.driver.next_clip_scale`), make
    the clipped moments stand for the rows' bulk."""
    g = clipped_weight_fraction(d)
    lost = 1.0 - float(weight)
    if not lost - 3.0 * float(weight_std) > CLIP_LOSS_WARN * (1.0 - g):
        return None
    return (f"fed-suffstats: the clip kept {weight:.0%} of the rows' weight in the last stage, where whitened "
            f"Gaussian rows keep {g:.0%}: some columns have heavy tails or skew (or the noise kept the basis from "
            "whitening them), and the noise left the clip no room to widen; the released moments stand for the "
            "rows' bulk, so the graph may differ from a non-private run's by more than the noise explains; a "
            "larger ε or more rows let the clip widen, and transforming skewed columns before the run (e.g. a log) "
            "may help")


# ------------------------------------------------------------------------------------------------
# before a run: the sites' row counts
# ------------------------------------------------------------------------------------------------


class _Site(NamedTuple):
    label: str
    rows: int


@dataclass(frozen=True)
class SitesPlan:
    """What the checks above read of learn's run plan (``privacy``, ``participants`` with their
    ``rows``, ``P``, ``n_total``), made from a privacy plan and the sites' row counts before any data
    are read (``privacy-budget --samples n1,n2,...``)."""

    privacy: object
    participants: tuple  # of _Site (a participant's label and rows, as the run plan's)

    @classmethod
    def of(cls, privacy, rows) -> "SitesPlan":
        return cls(privacy, tuple(_Site(f"site {k + 1}", int(r)) for k, r in enumerate(rows)))

    @property
    def P(self) -> int:
        return len(self.participants)

    @property
    def n_total(self) -> int:
        return int(sum(p.rows for p in self.participants))


def expected_effective_rows(n: float, tau: float, d: int) -> float:
    """The ``n_eff`` a run gives the last stage's moments
    (:func:`~bnsl_cli.federated.methods.admm.on_moments.effective_rows`: ``1/(1/n + τ²)``) as expected
    when the basis whitens: standardised moments near the identity, every entry's noise std ``τ``."""
    return effective_rows(float(n), np.full((d, d), float(tau)), np.eye(d))


def round_up(x: float, digits: int = 3) -> float:
    """``x`` rounded up to ``digits`` significant digits (a value a hair below a step goes one step
    up: the number printed is never below ``x``)."""
    if not (x > 0 and math.isfinite(x)):
        return x
    step = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.ceil(x * (1.0 + 1e-9) / step) * step:.{digits}g}")


#: The calibrations of the summed releases (key, ``learn --noise``): learn's default (auto) is distributed.
CALIBRATIONS = (("per_site", "per-site"), ("distributed", "distributed"))


def site_utility(spec, pv, rows, d: int, tolerance: int = 0) -> dict:
    """Before a run with ``len(rows)`` sites of ``rows`` rows, for the privacy plan ``pv`` under each
    calibration (per-site noise, and the distributed noise learn uses by default with ``tolerance``
    colluding sites): the last stage's τ as the driver computes it (the pooled off-diagonal noise std over the
    clipped weight, here the expected weight ``q·n`` of a whitening basis), the ``n_eff`` of its
    moments (:func:`expected_effective_rows`) and ``1/τ²`` (the rows the noise alone is worth), its noise
    scale and whether a run warns (:func:`noise_scale`), the verdict of the rule a run's refusal quotes
    (:func:`usable_margins` both ≥ 1: ``works``, else ``refused``) and the smallest ε that works at these
    rows (:func:`usable_at`, the rule's inverse; ``epsilon_min`` rounded up to 3 significant digits)."""
    P = len(rows)
    q = clipped_weight_fraction(d)
    out = {}
    for key, noise in CALIBRATIONS:
        cal = distribute_noise(pv, spec.name, spec.distributed_noise, P, noise,
                               tolerance if noise == "distributed" else 0)
        plan = SitesPlan.of(cal, rows)
        n = plan.n_total
        tau = offdiagonal_noise_std(stage_releases(cal)[-1], d, P) / (q * n)
        scale = noise_scale(tau, d)
        stage_margin, hist_margin = usable_margins(plan, d)
        eps, rows_needed = usable_at(plan, d)
        out[key] = {
            "tau": tau, "n_eff": expected_effective_rows(n, tau, d), "noise_rows": 1.0 / tau**2,
            "noise_scale": scale, "warns": scale > NOISE_SCALE_WARN,
            # plan_verdict's rule (what learn --dp decides before any noise is drawn)
            "verdict": verdict_of((stage_margin, hist_margin)),
            "stage_margin": stage_margin, "histogram_margin": hist_margin,
            "epsilon_min": round_up(eps), "epsilon_min_exact": eps, "rows_per_site_min": rows_needed,
        }
    return {"rows": [int(r) for r in rows], "n_total": int(sum(rows)), "nodes": d, "clipped_weight_fraction": q,
            "learn_default": "distributed", "collusion_tolerance": tolerance, **out}


def _utility_rows(u: dict) -> list:
    """The table rows of :func:`site_utility`'s answer ``u``."""
    n = u["n_total"]
    labels = (("per_site", "per-site", "learn --noise per-site"), ("distributed", "distributed", "learn's default noise"))
    rows = [(f"last stage noise scale, {label}", u[key]["noise_scale"],
             f"expected with {' + '.join(map(str, u['rows']))} = {n} rows and a whitening basis (a poorer one: larger); "
             "above 1 learn warns")
            for key, label, _ in labels]
    rows += [(f"last stage tau, {label}", u[key]["tau"],
              f"noise std per entry of the released whitened moments: pooled noise / expected clipped weight q·n "
              f"(q = {u['clipped_weight_fraction']:.3g}), as learn computes τ")
             for key, label, _ in labels]
    rows += [(f"n_eff, {label}", u[key]["n_eff"],
              f"learn's n_eff = 1/(1/n + τ²), n = {n}: the rows whose error 1/√n_eff of a standardised second moment is "
              f"that of the rows and the noise together; the noise alone is worth 1/τ² = {u[key]['noise_rows']:.4g} rows "
              f"(the last stage alone: a run whose bases settle pools stages and can get more)")
             for key, label, _ in labels]
    for key, label, who in labels:
        v = u[key]
        margins = f"stage weight {v['stage_margin']:.3g} ×, histogram signal {v['histogram_margin']:.3g} × their thresholds"
        how = (f"{who}: expected to run ({margins}, both ≥ 1)" + ("; learn warns: noise scale above 1" if v["warns"] else "")
               if v["verdict"] == "works" else
               f"{who}: runs with a warning, expected weak ({margins}; ≥ {REFUSE_MARGIN:g} runs, ≥ 1 works); "
               f"≥ {v['rows_per_site_min']} rows per site would work"
               if v["verdict"] == "warns" else
               f"{who}: by the rule, expected lost in the noise ({margins}; below {REFUSE_MARGIN:g}: refused before "
               f"any noise); ≥ {v['rows_per_site_min']} rows per site would work")
        rows.append((f"verdict, {label}", v["verdict"], how))
    rows += [(f"smallest epsilon that works, {label}", u[key]["epsilon_min"],
              f"the same rule at these rows and delta (a refused run says ε ≥ {u[key]['epsilon_min_exact']:.3g}), "
              "rounded up to 3 significant digits")
             for key, label, _ in labels]
    return rows


# ------------------------------------------------------------------------------------------------
# privacy-budget
# ------------------------------------------------------------------------------------------------


def budget_table(spec, query: BudgetQuery, delta: float, resolve) -> BudgetTable:
    """``privacy-budget --method fed-suffstats``: the releases of the privacy plan ``learn --dp``
    makes (learn's shares, no per-step release), and the noise each site adds and the pooled sum
    carries under per-site and under distributed noise (the split ``learn --noise distributed`` gives
    its releases over ``--sites P`` tolerating ``--collusion-tolerance T``), with the last stage's
    noise scale when the rows (``--samples``) and sites are given. With the sites' row counts
    (``--samples n1,n2,...``: ``query.site_rows``) and ``--nodes``, what a run would make of them
    (:func:`site_utility`): the last stage's τ, ``n_eff``, the verdict and the smallest ε that works.
    Spend mode by noise multipliers does not apply: its releases are histograms and stages
    (``--releases FILE`` reads their list)."""
    if resolve is None:
        raise OptionError(
            f"spend mode by noise multipliers covers DP-PGCD and one-matrix releases; {spec.name}'s releases are "
            "histograms and stages: give their list with --releases FILE (a report.json or privacy-budget --json output)"
        )
    sites, tolerance = query.sites, query.collusion_tolerance
    if sites is not None and sites < 1:
        raise OptionError("--sites must be >= 1")
    if tolerance < 0 or (sites is not None and tolerance >= max(sites, 1) and tolerance > 0):
        raise OptionError("--collusion-tolerance must be >= 0 and below --sites")
    pv = resolve(rounds=1, steps=1, polish=False)
    return _noise_table(spec, pv, nodes=query.nodes, sites=sites, tolerance=tolerance, samples=query.samples,
                        site_rows=query.site_rows)


def _noise_table(spec, pv, *, nodes, sites, tolerance, samples=None, site_rows=None) -> BudgetTable:
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
    rows += release_rows(pv.releases)
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
    scales = utility = None
    if site_rows is not None and nodes is not None:
        utility = site_utility(spec, pv, site_rows, nodes, tolerance)
        scales = {key: utility[key]["noise_scale"] for key, _ in CALIBRATIONS}
        rows += _utility_rows(utility)
    elif nodes is not None and P is not None and samples is not None and calib:
        # the last stage's noise scale 2·τ·√(d + 1) that learn warns above 1, as expected when the basis
        # whitens: τ = pooled noise / clipped weight, the weight that of whitened rows (a poorer basis keeps less)
        last = calib[-1]
        weight = clipped_weight_fraction(nodes) * float(samples) * P
        scales = {"per_site": noise_scale(last["per_site"]["pooled_sum_std"] / weight, nodes),
                  "distributed": noise_scale(last["distributed"]["pooled_sum_std"] / weight, nodes)}
        for mode, label in (("per_site", "per-site"), ("distributed", "distributed")):
            rows.append((f"last stage noise scale, {label}", scales[mode],
                         f"expected with {P} × {samples} rows and a whitening basis (a poorer one: larger); above 1 learn warns"))
    rows.append(("epsilon spent (check)", summary["epsilon_planned"], "accounted from the planned ledger; the same under both calibrations"))
    assumptions = base_assumptions(conv)
    assumptions.update({
        "releases": f"scale histograms, centre histograms, then {len(STAGE_SHARES)} stages of whitened second "
                    "moments (sums over the rows)",
        "sensitivity": "scale histograms 2·sqrt(d); centre histograms sqrt(2·d); moments sqrt(2)·C**2 with "
                       "C = %g·sqrt(d + 1) (replace-one)" % spec.clip_multiplier,
        "budget split": f"scale histograms {HIST_SHARE:g} of rho*, centre histograms {CENTRE_SHARE:g}, "
                        f"stages {', '.join(f'{f:g}' for f in STAGE_SHARES)} of the rest",
        "value ranges": "none: the scale histograms have fixed bins, no row count is too small for them",
        "calibrations": "per-site: every site adds all of the noise; distributed: shares under a secure sum "
                        "(honest-but-curious coordinator; holds against it with up to T colluding sites)",
    })
    if site_rows is not None:
        assumptions["verdict"] = (
            "give --nodes d for the last stage's noise, n_eff and the verdict" if utility is None else
            "the rule learn --dp applies before any noise: the last stage's clipped weight 3 noise stds and the scale "
            "histograms' pair signal 5 noise stds above their noise, on expected values (whitening basis, Gaussian "
            f"columns): both margins ≥ 1 works, the smaller ≥ {REFUSE_MARGIN:g} runs with a warning, below is refused")
    data = {"mode": "calibrate", "method": spec.name, **summary, "nodes": nodes, "sites": P,
            "collusion_tolerance": tolerance, "calibrations": calib, "noise_scale": scales,
            "epsilon_spent": summary["epsilon_planned"], "rho_spent": summary["rho_planned"],
            "events": events_of(pv.releases, delta, conv)}
    if site_rows is not None:
        data["utility"] = utility
    return BudgetTable(f"{spec.dp_title} noise plan", assumptions, tuple(rows), data)
