"""Empirical privacy audit: run a real mechanism many times on two neighbouring data sets and
lower-bound the ε its outputs reveal (Jagielski, Ullman & Oprea 2020; Nasr, Song, Thakurta,
Papernot & Carlini 2021).

A *distinguisher* guesses "D′" when a statistic of the output exceeds a threshold. For any
(ε, δ)-DP mechanism its false-positive rate α (guessing D′ on D) and false-negative rate β obey
``α + e^ε β ≥ 1 − δ`` and ``β + e^ε α ≥ 1 − δ``, so

    ε ≥ max( ln((1 − δ − α)/β), ln((1 − δ − β)/α) ).

With ``α_up``, ``β_up`` one-sided Clopper–Pearson upper bounds on the two rates (each at confidence
``1 − (1 − confidence)/2``, jointly ``confidence``), the same expression is a lower bound on the ε of
the mechanism that holds with that confidence. The threshold (and the direction of the test) is
chosen on one half of the trials and the bound computed on the other half, so that the choice does
not bias the bound.

Each mechanism is run through its real code (:mod:`bnsl_cli.privacy.one_off`,
:mod:`bnsl_cli.federated.dp_participant`, :mod:`bnsl_cli.federated.methods.moments`). The statistic is the
likelihood ratio of the ideal mechanism, computed from the two noise-free outputs, which are
obtained by running the same code with a generator that draws zeros (:class:`ZeroNoise`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from bnsl_cli.federated.dp_participant import private_polish_moments
from bnsl_cli.solvers.dp_pgcd import ClippedGradients, dp_pgcd
from bnsl_cli.federated.methods.moments import private_moment_matrix
from bnsl_cli.federated.methods.suffstats import CLIP as SUFFSTATS_CLIP
from bnsl_cli.federated.methods.suffstats import CENTRE_BINS, centre_histogram_release, whitened_moments_release
from bnsl_cli.privacy.defaults import POLISH_CLIP
from bnsl_cli.privacy.one_off import release_means, release_second_moments
from bnsl_cli.privacy.pld import accountant_epsilon
from bnsl_cli.privacy.releases import ReleaseKind as K
from bnsl_cli.stats import upper_triangle

__all__ = ["ZeroNoise", "AuditResult", "clopper_pearson_upper", "epsilon_lower_bound", "audit", "project"]


class ZeroNoise:
    """A stand-in generator whose normal and Gumbel draws are all 0 (the noise-free output)."""

    def standard_normal(self, size=None):
        return 0.0 if size is None else np.zeros(size)

    def gumbel(self, loc=0.0, scale=1.0, size=None):
        return 0.0 if size is None else np.zeros(size)


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided upper confidence bound at level ``1 − alpha`` on a binomial rate with ``k`` of ``n``."""
    from scipy.stats import beta

    if k >= n:
        return 1.0
    return float(beta.ppf(1.0 - alpha, k + 1, n - k))


def epsilon_lower_bound(fp: int, n0: int, fn: int, n1: int, delta: float, confidence: float = 0.95) -> float:
    """The ε lower bound from ``fp`` false positives of ``n0`` trials on D and ``fn`` false negatives
    of ``n1`` trials on D′ (see the module docstring); 0 when the test shows nothing."""
    a = (1.0 - confidence) / 2.0
    fpr = clopper_pearson_upper(fp, n0, a)
    fnr = clopper_pearson_upper(fn, n1, a)
    best = 0.0
    for x, y in ((fpr, fnr), (fnr, fpr)):
        num = 1.0 - delta - x
        if num > 0 and y > 0:
            best = max(best, math.log(num / y))
    return best


def _best_threshold(s0: np.ndarray, s1: np.ndarray, delta: float, confidence: float) -> tuple[float, int]:
    """Threshold and direction (+1: guess D′ when s > τ; −1: when s < τ) with the largest bound on
    these trials (candidates: 200 quantiles of the pooled statistics)."""
    pooled = np.concatenate([s0, s1])
    cands = np.unique(np.quantile(pooled[np.isfinite(pooled)], np.linspace(0.0, 1.0, 201))) if np.isfinite(pooled).any() else np.array([0.0])
    s0s, s1s = np.sort(s0), np.sort(s1)
    best = (-1.0, 0.0, 1)
    for tau in cands:
        above0 = s0s.size - np.searchsorted(s0s, tau, side="right")
        above1 = s1s.size - np.searchsorted(s1s, tau, side="right")
        for direction in (1, -1):
            fp = above0 if direction == 1 else s0s.size - above0
            fn = s1s.size - above1 if direction == 1 else above1
            e = epsilon_lower_bound(int(fp), s0s.size, int(fn), s1s.size, delta, confidence)
            if e > best[0]:
                best = (e, float(tau), direction)
    return best[1], best[2]


@dataclass
class AuditResult:
    """One audit: trials per data set, the chosen test, its error rates on the held-out half, the
    ε lower bound and the ε the accountant claims."""

    name: str
    trials: int
    threshold: float
    direction: int
    fpr: float
    fnr: float
    epsilon_lower: float
    epsilon_claimed: float
    delta: float

    @property
    def passed(self) -> bool:
        return self.epsilon_lower <= self.epsilon_claimed


def audit(
    name: str,
    run_d: Callable[[], float],
    run_d1: Callable[[], float],
    trials: int,
    epsilon_claimed: float,
    delta: float,
    confidence: float = 0.95,
) -> AuditResult:
    """Run ``run_d`` (a statistic of one output on D) and ``run_d1`` (on D′) ``trials`` times each;
    choose the threshold test on the first half, bound ε on the second half. NaN statistics count
    as ``+inf`` (a crash or NaN is observable too)."""
    s0 = np.array([run_d() for _ in range(trials)], dtype=float)
    s1 = np.array([run_d1() for _ in range(trials)], dtype=float)
    s0[np.isnan(s0)] = np.inf
    s1[np.isnan(s1)] = np.inf
    h = trials // 2
    tau, direction = _best_threshold(s0[:h], s1[:h], delta, confidence)
    e0, e1 = s0[h:], s1[h:]
    if direction == 1:
        fp, fn = int(np.sum(e0 > tau)), int(np.sum(e1 <= tau))
    else:
        fp, fn = int(np.sum(e0 <= tau)), int(np.sum(e1 > tau))
    eps = epsilon_lower_bound(fp, e0.size, fn, e1.size, delta, confidence)
    return AuditResult(name, trials, tau, direction, fp / e0.size, fn / e1.size, eps, float(epsilon_claimed), delta)


def project(out_d: np.ndarray, out_d1: np.ndarray, std: np.ndarray) -> Callable[[np.ndarray], float]:
    """The Gaussian likelihood-ratio statistic for outputs ``N(out_d, diag std²)`` against
    ``N(out_d1, diag std²)``: ``Σ (x − out_d)(out_d1 − out_d)/std²``."""
    a = np.asarray(out_d, dtype=float).ravel()
    w = (np.asarray(out_d1, dtype=float).ravel() - a) / np.asarray(std, dtype=float).ravel() ** 2

    def stat(x) -> float:
        return float(np.dot(np.asarray(x, dtype=float).ravel() - a, w))

    return stat


# ----------------------------------------------------------------------------------------------
# the mechanisms, each on a worst-case neighbouring pair (D, D′ differ in their last row)
# ----------------------------------------------------------------------------------------------

#: δ at which the claims are read.
AUDIT_DELTA = 1e-5
#: Noise multiplier of the audited Gaussian releases and Gumbel multiplier of the selection; chosen
#: so that the claimed ε is about 1–2 at δ = 1e-5, where a test with 10⁴–10⁵ trials can come close.
GAUSS_MULT = 2.0
GUMBEL_MULT = 2.0


@dataclass
class Case:
    """An audit case: a name, the trials' statistic on D and on D′ (closures over the real
    mechanism and a generator), and the claimed ε of what one trial releases."""

    name: str
    run_d: Callable[[], float]
    run_d1: Callable[[], float]
    epsilon_claimed: float


def _claim(events) -> float:
    return accountant_epsilon(list(events), AUDIT_DELTA, "pld")


def _safe(f: Callable[[], float]) -> Callable[[], float]:
    def g() -> float:
        try:
            with np.errstate(all="ignore"):
                return float(f())
        except Exception:  # a data-dependent error is an observable outcome
            return math.nan

    return g


def _base(n: int, d: int, scale: float = 0.3) -> np.ndarray:
    """Fixed, ordinary rows (deterministic: no generator outside the mechanisms' own)."""
    return scale * np.sin(1.0 + np.arange(n * d, dtype=float) * 2.39996).reshape(n, d)


def _with_last(X: np.ndarray, row) -> np.ndarray:
    Y = X.copy()
    Y[-1] = row
    return Y


def _gaussian_case(name, release, X0, X1, ref0, ref1, std_out, mult, rng, claim_mult=None):
    """A Gaussian release ``release(X, multiplier, generator) -> (output, event)`` on D = X0, D′ = X1;
    the statistic's direction comes from the noise-free outputs on the (non-extreme) pair ref0/ref1."""
    out0, ev = release(ref0, mult if claim_mult is None else claim_mult, ZeroNoise())
    out1, _ = release(ref1, mult if claim_mult is None else claim_mult, ZeroNoise())
    stat = project(out0, out1, std_out)
    return Case(name, _safe(lambda: stat(release(X0, mult, rng)[0])), _safe(lambda: stat(release(X1, mult, rng)[0])),
                _claim([ev]))


def means_case(rng, extreme=False, broken=False) -> Case:
    n, d = 60, 3
    bound = np.full(d, 2.0)
    X = _base(n, d)
    ref0, ref1 = _with_last(X, -3 * bound), _with_last(X, 3 * bound)
    X0, X1 = (_with_last(X, np.full(d, -1.7e308)), _with_last(X, np.full(d, 1.7e308))) if extreme else (ref0, ref1)
    sens = 2 * math.sqrt(d)
    mult = GAUSS_MULT / 10 if broken else GAUSS_MULT

    def rel(Y, m, g):
        return release_means(Y, bound, m, g)

    return _gaussian_case(K.COLUMN_MEANS.value + (" (extreme row)" if extreme else "") + (" BROKEN: noise / 10" if broken else ""),
                          rel, X0, X1, ref0, ref1, bound * GAUSS_MULT * sens / n, mult, rng, claim_mult=GAUSS_MULT)


def second_moments_case(rng, extreme=False) -> Case:
    n, d = 200, 3
    bound = np.full(d, 1.0)
    X = _base(n, d, 0.5)
    ref0, ref1 = _with_last(X, np.zeros(d)), _with_last(X, np.full(d, 5.0))
    X0, X1 = (ref0, _with_last(X, np.full(d, 1e160))) if extreme else (ref0, ref1)
    std_out = bound**2 * GAUSS_MULT * math.sqrt(d) / n

    def rel(Y, m, g):
        return release_second_moments(Y, bound, m, g)

    return _gaussian_case(K.SECOND_MOMENTS.value + (" (extreme row)" if extreme else ""), rel, X0, X1, ref0, ref1,
                          std_out, GAUSS_MULT, rng)


def _pgcd_setup(X, beta, steps=1, gumbel=GUMBEL_MULT, sigma=GAUSS_MULT):
    """``run(generator) -> (B_new, events)``: one call of the real DP-PGCD on centred rows ``X``
    (d = 2, B = W = 0, λ = 0, M = 1, clip level 1 on both rows)."""
    d = X.shape[1]
    levels = np.ones(d)
    zeros = np.zeros((d, d))

    def run(g):
        grads = ClippedGradients(X)
        return dp_pgcd(grads, levels, zeros, beta, zeros, 0.0, 0.0, np.ones(d), steps, X.shape[0], gumbel, sigma, g)

    return run


def update_case(rng, extreme=False) -> Case:
    """The noisy coordinate update alone: the selection is made certain (coordinate (0, 1) leads by
    far more than the Gumbel draws can reach, on D and D′ alike), so only the update's noise hides the row."""
    n = 50
    X = _base(n, 2)
    beta = np.array([[0.0, 100.0], [0.0, 0.0]])
    ref0, ref1 = _with_last(X, [10.0, 10.0]), _with_last(X, [10.0, -10.0])  # x₀r₁ = −x₀x₁: −C vs +C
    if extreme == "overflow":  # 1e39 is inf in float32: inf·0 = NaN in DP-PGCD's products
        X0, X1 = ref0, _with_last(X, [1e39, 0.0])
    elif extreme:
        X0, X1 = _with_last(X, [1e160, 1e160]), _with_last(X, [1e160, -1e160])
    else:
        X0, X1 = ref0, ref1
    B0, ev = _pgcd_setup(ref0, beta)(ZeroNoise())
    B1, _ = _pgcd_setup(ref1, beta)(ZeroNoise())
    upd = [e for e in ev if e.release == K.UPDATE]
    stat = project(B0[0, 1], B1[0, 1], upd[0].noise_scale)  # M = 1: the value moves by the noise
    r0, r1 = _pgcd_setup(X0, beta), _pgcd_setup(X1, beta)
    name = K.UPDATE.value + {False: "", True: " (extreme row)", "overflow": " (extreme row 1e39, 0)"}[extreme]
    return Case(name, _safe(lambda: stat(r0(rng)[0][0, 1])), _safe(lambda: stat(r1(rng)[0][0, 1])), _claim(upd))


def _selection_pair(extreme):
    n = 50
    X = _base(n, 2)
    beta = np.array([[0.0, 5.0], [-5.0, 0.0]])  # |G₀₁| grows and |G₁₀| shrinks with the clipped sums
    ref0, ref1 = _with_last(X, [10.0, 10.0]), _with_last(X, [10.0, -10.0])  # both products −C vs +C
    if extreme:
        return X, beta, ref0, ref1, _with_last(X, [1e160, 1e160]), _with_last(X, [1e160, -1e160])
    return X, beta, ref0, ref1, ref0, ref1


def selection_case(rng, extreme=False) -> Case:
    """The Gumbel-max selection alone: the observation is which coordinate moved (a function of the
    selection only; the update's value is ignored)."""
    _, beta, ref0, _, X0, X1 = _selection_pair(extreme)
    _, ev = _pgcd_setup(ref0, beta)(ZeroNoise())
    sel = [e for e in ev if e.release == K.SELECTION]
    r0, r1 = _pgcd_setup(X0, beta), _pgcd_setup(X1, beta)

    def which(B):
        return 1.0 if B[0, 1] != 0 else 0.0

    return Case(K.SELECTION.value + " (Gumbel-max)" + (" (extreme row)" if extreme else ""),
                _safe(lambda: which(r0(rng)[0])), _safe(lambda: which(r1(rng)[0])), _claim(sel))


def pgcd_step_case(rng, extreme=False) -> Case:
    """One whole DP-PGCD step (selection + update): the statistic is the likelihood ratio of the
    observed (coordinate, value) under the ideal mechanisms."""
    _, beta, ref0, ref1, X0, X1 = _selection_pair(extreme)
    _, ev = _pgcd_setup(ref0, beta)(ZeroNoise())
    sel = next(e for e in ev if e.release == K.SELECTION)
    upd = next(e for e in ev if e.release == K.UPDATE)
    n = ref0.shape[0]

    def gradient(X):
        g = ClippedGradients(X)
        g.set_levels(np.ones(2))
        return g.sums / n + beta

    G0, G1 = gradient(ref0), gradient(ref1)
    coords = ((0, 1), (1, 0))

    def log_probs(G):
        s = np.array([abs(G[c]) for c in coords]) / sel.noise_scale
        return s - np.logaddexp(s[0], s[1])

    lp0, lp1 = log_probs(G0), log_probs(G1)
    sd = upd.noise_scale  # of the new value (M = 1)

    def stat(B):
        k = 0 if B[0, 1] != 0 else 1
        v = B[coords[k]]
        m0, m1 = -G0[coords[k]], -G1[coords[k]]
        return lp1[k] - lp0[k] + ((v - m0) ** 2 - (v - m1) ** 2) / (2 * sd * sd)

    r0, r1 = _pgcd_setup(X0, beta), _pgcd_setup(X1, beta)
    return Case("one DP-PGCD step (selection + update)" + (" (extreme row)" if extreme else ""),
                _safe(lambda: stat(r0(rng)[0])), _safe(lambda: stat(r1(rng)[0])), _claim([sel, upd]))


def polish_case(rng, extreme=False) -> Case:
    n = 50
    X = _base(n, 2)
    v_hat = np.ones(2)
    pairs = np.array([1])  # the pair (0, 1)
    ref0, ref1 = _with_last(X, [10.0, -10.0]), _with_last(X, [10.0, 10.0])  # u = ∓100: clipped to ∓κ
    X0, X1 = (ref0, _with_last(X, [1e160, 1e160])) if extreme else (ref0, ref1)  # u = 1e320 overflows
    std_out = GAUSS_MULT * 2 * POLISH_CLIP / n

    def rel(Y, m, g):
        return private_polish_moments(Y, v_hat, pairs, POLISH_CLIP, m, n, g)

    return _gaussian_case(K.POLISH.value + (" (extreme row)" if extreme else ""), rel, X0, X1, ref0, ref1,
                          std_out, GAUSS_MULT, rng)


def moment_matrix_case(rng, extreme=False) -> Case:
    """Fed-moments' release: rows standardised with public centre and spreads as the site does
    (``z = (x − ĉ)/s``), clipped to ℓ₂ norm c√d, summed as ``Σ z zᵀ`` plus symmetric noise."""
    n, d, clip = 50, 2, 1.5
    X = _base(n, d)
    centre, spread = np.zeros(d), np.full(d, 0.5)
    ref0, ref1 = _with_last(X, [10.0, 0.0]), _with_last(X, [0.0, 10.0])  # C e₁ against C e₂
    X0, X1 = (ref0, _with_last(X, [1.7e308, 0.0])) if extreme else (ref0, ref1)
    sens = math.sqrt(2) * (clip * math.sqrt(d)) ** 2

    def rel(Y, m, g):
        Z = (Y - centre[None, :]) / spread[None, :]
        M, ev = private_moment_matrix(Z, clip, m, g)
        return upper_triangle(M), ev

    return _gaussian_case(K.MOMENT_MATRIX.value + " (fed-moments)" + (" (extreme row)" if extreme else ""), rel, X0, X1, ref0,
                          ref1, np.full(d * (d + 1) // 2, GAUSS_MULT * sens), GAUSS_MULT, rng)


def whitened_moments_case(rng, extreme=False) -> Case:
    """Fed-suffstats' stage release: rows in a broadcast basis ``a = [1; L⁻¹(x − m̃)/s̃]``, clipped to
    ℓ₂ norm ``C = √(d + 1)``, summed as ``Σ a aᵀ`` plus symmetric noise."""
    n, d = 50, 2
    X = _base(n, d)
    centre, scale, L = np.zeros(d), np.full(d, 0.5), np.eye(d)
    ref0, ref1 = _with_last(X, [10.0, 0.0]), _with_last(X, [0.0, 10.0])
    X0, X1 = (ref0, _with_last(X, [1.7e308, -1e160])) if extreme else (ref0, ref1)
    sens = math.sqrt(2) * (SUFFSTATS_CLIP * math.sqrt(d + 1)) ** 2

    def rel(Y, m, g):
        M, ev = whitened_moments_release(Y, centre, scale, L, m, g)
        return upper_triangle(M), ev

    return _gaussian_case(K.WHITENED_MOMENTS.value + " (fed-suffstats)" + (" (extreme row)" if extreme else ""), rel,
                          X0, X1, ref0, ref1, np.full((d + 1) * (d + 2) // 2, GAUSS_MULT * sens), GAUSS_MULT, rng)


def centre_histogram_case(rng, extreme=False) -> Case:
    """Fed-suffstats' centre histograms: per column the rows' counts in ``CENTRE_BINS`` linear bins
    placed by a broadcast (``lo``, ``width``), plus Gaussian noise; the replaced row moves from the
    first bin of each column to the last."""
    n, d = 50, 2
    X = _base(n, d)
    lo, width = np.full(d, -1.0), np.full(d, 2.0 / CENTRE_BINS)
    ref0, ref1 = _with_last(X, [-5.0, -5.0]), _with_last(X, [5.0, 5.0])
    X0, X1 = (ref0, _with_last(X, [1.7e308, -1.7e308])) if extreme else (ref0, ref1)
    sens = math.sqrt(2.0 * d)

    def rel(Y, m, g):
        return centre_histogram_release(Y, lo, width, m, g)

    return _gaussian_case(K.CENTRE_HISTOGRAM.value + " (fed-suffstats)" + (" (extreme row)" if extreme else ""), rel,
                          X0, X1, ref0, ref1, np.full(d * CENTRE_BINS, GAUSS_MULT * sens), GAUSS_MULT, rng)


def all_cases(rng) -> list:
    """Every audited mechanism: the worst-case pair, then the pair with a planted extreme row."""
    out = []
    for make in (means_case, second_moments_case, update_case, selection_case, pgcd_step_case, polish_case,
                 moment_matrix_case, whitened_moments_case, centre_histogram_case):
        out.append(make(rng))
        out.append(make(rng, extreme=True))
    out.append(update_case(rng, extreme="overflow"))
    return out
