"""When fed-suffstats' releases are usable and how noisy they are, from the plan's calibration alone
(the ε and rows per site that work, the last stage's noise scale and its warning), and its
``privacy-budget`` table (``MethodSpec.budget_table``: :func:`budget_table`)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from bnsl_cli.federated.methods.suffstats.bins import _P_STEPS
from bnsl_cli.federated.methods.suffstats.fits import pair_fractions
from bnsl_cli.errors import OptionError
from bnsl_cli.federated.methods.suffstats.releases import CLIP, pooled_noise_std, release_sensitivity, stage_releases
from bnsl_cli.privacy.budget import BudgetQuery, BudgetTable, base_assumptions, events_of, release_rows
from bnsl_cli.federated.methods.suffstats.releases import CENTRE_SHARE, HIST_SHARE, STAGE_SHARES, planned_releases
from bnsl_cli.privacy.release_plan import spend_of
from bnsl_cli.privacy.releases import ReleaseKind
from bnsl_cli.privacy.split_noise import distribute_noise


def clipped_weight_fraction(d: int) -> float:
    """The expected share of a row's weight kept by the stages' clip when the basis whitens the data
    (``a = [1; z]``, ``z`` standard normal in ``d`` dimensions, ``‖a‖ ≤ CLIP·√(d + 1)``):
    ``E min(1, C² / (1 + χ²_d))``. A stage is usable when its clipped weight clears 3 noise stds."""
    from scipy import integrate
    from scipy.stats import chi2

    c2 = CLIP**2 * (d + 1)
    t = c2 - 1.0
    below = chi2.cdf(t, d) if t > 0 else 0.0
    above, _ = integrate.quad(lambda x: c2 / (1.0 + x) * chi2.pdf(x, d), max(t, 0.0), np.inf, limit=200)
    return float(below + above)


#: The scale histograms are taken as readable when a Gaussian column's expected pair histogram stands
#: this many noise stds (of the pooled sum) out of the noise (its ℓ₂ norm over the bins).
HIST_SNR = 5.0


def pair_signal(n_pairs: float) -> float:
    """The ℓ₂ norm over the bins of a Gaussian column's expected pair histogram with ``n_pairs`` pairs
    (the mean over the bins' alignment: the same for any scale)."""
    fr = pair_fractions(np.arange(0.0, 1.0 / _P_STEPS, 1.0 / 16.0))
    return float(n_pairs) * float(np.mean(np.sqrt(np.sum(fr**2, axis=1))))


def usable_at(plan, d: int) -> tuple[float, int]:
    """``(ε, rows per site)``: the smallest ε (at this plan's δ, rows and sites) and the fewest rows per
    site (at this ε) with which fed-suffstats' releases are expected to be usable — the scale
    histograms' pair signal (:func:`pair_signal`) ``HIST_SNR`` noise stds above their pooled noise, and
    the last (largest) whitened-moment stage's clipped weight of whitened rows
    (:func:`clipped_weight_fraction`) 3 noise stds above its pooled noise — from the same calibration as
    ``privacy-budget --method fed-suffstats`` (the noise multipliers scale as ``1/√ρ*``)."""
    pv = plan.privacy
    n, P = float(plan.n_total), plan.P
    last = stage_releases(pv)[-1]
    hist = next(r for r in pv.releases if r.kind == ReleaseKind.SCALE_HISTOGRAM)
    # pooled noise std per unit multiplier
    stage_unit = pooled_noise_std(last, d, P) / last.multiplier
    hist_unit = pooled_noise_std(hist, d, P) / hist.multiplier
    q = clipped_weight_fraction(d)
    p1 = pair_signal(1.0)  # per pair
    # rows: the stage needs q·n ≥ 3·std; the histograms need p1·n/2 ≥ HIST_SNR·std (pairs = rows / 2)
    rows = max(3.0 * last.multiplier * stage_unit / q, 2.0 * HIST_SNR * hist.multiplier * hist_unit / p1) / P
    # ε: the largest multiplier each release may have at these rows, then the ρ* that gives it
    unit = planned_releases(1.0)
    m_stage = q * n / (3.0 * stage_unit)
    m_hist = p1 * (n / 2.0) / (HIST_SNR * hist_unit)
    rho_star = max((unit[-1].multiplier / m_stage) ** 2, (unit[0].multiplier / m_hist) ** 2)
    return _epsilon_at(pv, rho_star), int(math.ceil(rows))


def _epsilon_at(pv, rho_star: float) -> float:
    """The ε that fed-suffstats' releases calibrated to ``rho_star`` spend, at the plan's δ, conversion
    and accountant."""
    return float(spend_of(planned_releases(rho_star), pv.delta, pv.conversion, pv.accountant)[0])


def unusable_message(plan, d: int) -> str:
    eps, rows = usable_at(plan, d)
    pv = plan.privacy
    return (
        f"fed-suffstats: at ε = {pv.epsilon:g} the released statistics of {plan.n_total} rows over {plan.P} sites "
        f"(d = {d}) are lost in their noise (no whitened-moment stage kept the rows' weight); expected to be usable "
        f"with ε ≥ {eps:.3g} at these rows, or with ≥ {rows} rows per site at this ε "
        "(privacy-budget --method fed-suffstats shows the noise)"
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


# ------------------------------------------------------------------------------------------------
# privacy-budget
# ------------------------------------------------------------------------------------------------


def budget_table(spec, query: BudgetQuery, delta: float, resolve) -> BudgetTable:
    """``privacy-budget --method fed-suffstats``: the releases of the privacy plan ``learn --dp``
    makes (learn's shares, no per-step release), and the noise each site adds and the pooled sum
    carries under per-site and under distributed noise (the split ``learn --noise distributed`` gives
    its releases over ``--sites P`` tolerating ``--collusion-tolerance T``), with the last stage's
    noise scale when the rows (``--samples``) and sites are given. Spend mode by noise multipliers
    does not apply: its releases are histograms and stages (``--releases FILE`` reads their list)."""
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
    return _noise_table(spec, pv, nodes=query.nodes, sites=sites, tolerance=tolerance, samples=query.samples)


def _noise_table(spec, pv, *, nodes, sites, tolerance, samples=None) -> BudgetTable:
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
    scales = None
    if nodes is not None and P is not None and samples is not None and calib:
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
    data = {"mode": "calibrate", "method": spec.name, **summary, "nodes": nodes, "sites": P,
            "collusion_tolerance": tolerance, "calibrations": calib, "noise_scale": scales,
            "epsilon_spent": summary["epsilon_planned"], "rho_spent": summary["rho_planned"],
            "events": events_of(pv.releases, delta, conv)}
    return BudgetTable(f"{spec.dp_title} noise plan", assumptions, tuple(rows), data)
