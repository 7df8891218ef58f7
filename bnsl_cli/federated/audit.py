"""Empirical privacy audit: run a real mechanism many times on two neighbouring data sets and
lower-bound the privacy its outputs reveal (Jagielski, Ullman & Oprea 2020; Nasr, Song, Thakurta,
Papernot & Carlini 2021; Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini & Terzis 2023).

A *distinguisher* guesses "D′" when a statistic of the output exceeds a threshold. For any
(ε, δ)-DP mechanism its false-positive rate α (guessing D′ on D) and false-negative rate β obey
``α + e^ε β ≥ 1 − δ`` and ``β + e^ε α ≥ 1 − δ``, so

    ε ≥ max( ln((1 − δ − α)/β), ln((1 − δ − β)/α) ).

A Gaussian release of noise std σ and sensitivity Δ is μ-GDP with ``μ = Δ/σ`` (its privacy-loss
distribution, which the PLD accountant computes, is exactly that of ``N(0, 1)`` against ``N(μ, 1)``;
Dong, Roth & Su 2022): every test has ``β ≥ Φ(Φ⁻¹(1 − α) − μ)``, so

    μ ≥ Φ⁻¹(1 − α) + Φ⁻¹(1 − β).

The first bound is weak at small δ (a threshold test with 10⁴–10⁵ trials cannot certify the tail the
claimed ε rests on: about 1.0 against 1.99 for an exact Gaussian release on 10⁴ held-out trials);
the second is close (the same releases, on pairs that move them by their full sensitivity, give
0.43–0.49 against μ = 0.5), so a noise scale 20 % too small shows (column means at noise / 1.25:
μ ≥ 0.58 against 0.5 with 20,000 trials, while the ε bound stays at 1.07).

With ``α_up``, ``β_up`` one-sided Clopper–Pearson upper bounds on the two rates (each at confidence
``1 − (1 − confidence)/2``, jointly ``confidence``), both expressions are lower bounds on the
mechanism's ε and μ that hold with that confidence (each decreases in α and β). The threshold (and
the direction of the test) is chosen on one half of the trials, separately for the two bounds, and
the bounds are computed on the other half, so that the choice does not bias them.

Each mechanism is run through its real code (:mod:`bnsl_cli.privacy.one_off`,
:mod:`bnsl_cli.federated.methods.admm.dp_site`, :mod:`bnsl_cli.federated.methods.moments`, and fed-suffstats'
site :class:`~bnsl_cli.federated.methods.suffstats.SuffstatsSite` answering encoded messages). The
statistic is the likelihood ratio of the ideal mechanism, computed from the two noise-free outputs,
which are obtained by running the same code with a generator that draws zeros (:class:`ZeroNoise`).

**Adversarial inputs.** The coordinator is not trusted: what a site releases must not depend on the
rows beyond the claim *whatever message it is sent*. The site cases therefore also send crafted and
random extreme messages (a basis whose whitening overflows exactly for rows beyond a threshold,
bases and bins with entries like 1e300, 5e-324, ±float64-max) to a real site built from a real
private plan, on D and on D′. The observable outcome of a trial is the refusal (exception class and
message) or the reply bytes; :class:`OutcomeStatistic` maps a non-finite or malformed reply to
``+inf`` and each distinct refusal to its own value far below every reply, so a NaN that only D′
shows, or a refusal that differs between D and D′, is a perfect distinguisher. A site that refuses
such a message on the message alone (the same refusal on every data set) gives bound 0.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from bnsl_cli.federated.methods.admm.dp_site import private_covariance, private_polish_moments
from bnsl_cli.federated.messages import CENTRE_ROUND, BasisBroadcast, CentreRequest, FirstRequest, ShareReply
from bnsl_cli.federated.methods.moments import private_moment_matrix
from bnsl_cli.federated.methods.suffstats import CENTRE_BINS, STAGE_Z, pair_bins, value_bins
from bnsl_cli.federated.methods.suffstats.site import make_suffstats_site
from bnsl_cli.privacy.defaults import POLISH_CLIP
from bnsl_cli.privacy.ledger import PrivacyEvent
from bnsl_cli.privacy.one_off import CENTRED_QUANTILE, RAW_QUANTILE, release_means, release_range, release_second_moments
from bnsl_cli.privacy.accountant import accountant_epsilon
from bnsl_cli.privacy.mechanisms import sample_noise
from bnsl_cli.privacy.releases import GAUSSIAN
from bnsl_cli.privacy.releases import ReleaseKind as K
from bnsl_cli.solvers.dp_pgcd import ClippedGradients, dp_pgcd
from bnsl_cli.stats import upper_triangle

__all__ = [
    "ZeroNoise",
    "AuditResult",
    "Case",
    "Outcome",
    "OutcomeStatistic",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "gdp_lower_bound",
    "audit",
    "audit_batch",
    "project",
    "claims",
    "site_outcome",
    "all_cases",
    "suffstats_cases",
    "crafted_basis",
    "crafted_basis_case",
    "extreme_bases",
    "extreme_centre_bins",
    "random_basis_cases",
    "random_centre_cases",
]


class ZeroNoise:
    """A stand-in generator whose normal and Gumbel draws are all 0 (the noise-free output)."""

    def standard_normal(self, size=None):
        return 0.0 if size is None else np.zeros(size)

    def gumbel(self, loc=0.0, scale=1.0, size=None):
        return 0.0 if size is None else np.zeros(size)


# ----------------------------------------------------------------------------------------------
# the bounds
# ----------------------------------------------------------------------------------------------


def _cp_upper(k, n: int, alpha: float) -> np.ndarray:
    """Vectorised :func:`clopper_pearson_upper`."""
    from scipy.stats import beta

    k = np.atleast_1d(np.asarray(k, dtype=float))
    out = np.ones(k.shape)
    m = k < n
    if m.any():
        out[m] = beta.ppf(1.0 - alpha, k[m] + 1.0, n - k[m])
    return out


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided upper confidence bound at level ``1 − alpha`` on a binomial rate with ``k`` of ``n``."""
    return float(_cp_upper(k, n, alpha)[0])


def _eps_from_rates(x: np.ndarray, y: np.ndarray, delta: float) -> np.ndarray:
    best = np.zeros(np.broadcast(x, y).shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        for a, b in ((x, y), (y, x)):
            num = 1.0 - delta - a
            ok = (num > 0) & (b > 0)
            best = np.maximum(best, np.where(ok, np.log(np.where(ok, num, 1.0) / np.where(ok, b, 1.0)), 0.0))
    return best


def _mu_from_rates(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.stats import norm

    with np.errstate(invalid="ignore"):
        mu = norm.isf(x) + norm.isf(y)
    return np.maximum(np.nan_to_num(mu, nan=0.0, neginf=0.0), 0.0)


def _eps_score(delta: float, confidence: float):
    a = (1.0 - confidence) / 2.0
    return lambda fp, n0, fn, n1: _eps_from_rates(_cp_upper(fp, n0, a), _cp_upper(fn, n1, a), delta)


def _mu_score(confidence: float):
    a = (1.0 - confidence) / 2.0
    return lambda fp, n0, fn, n1: _mu_from_rates(_cp_upper(fp, n0, a), _cp_upper(fn, n1, a))


def epsilon_lower_bound(fp: int, n0: int, fn: int, n1: int, delta: float, confidence: float = 0.95) -> float:
    """The ε lower bound from ``fp`` false positives of ``n0`` trials on D and ``fn`` false negatives
    of ``n1`` trials on D′ (see the module docstring); 0 when the test shows nothing."""
    return float(_eps_score(delta, confidence)(fp, n0, fn, n1)[0])


def gdp_lower_bound(fp: int, n0: int, fn: int, n1: int, confidence: float = 0.95) -> float:
    """The lower bound on the Gaussian-DP parameter μ from ``fp`` false positives of ``n0`` trials on D
    and ``fn`` false negatives of ``n1`` trials on D′: ``Φ⁻¹(1 − α_up) + Φ⁻¹(1 − β_up)``, at least 0."""
    return float(_mu_score(confidence)(fp, n0, fn, n1)[0])


def _best_threshold(s0: np.ndarray, s1: np.ndarray, score) -> tuple[float, int]:
    """Threshold and direction (+1: guess D′ when s > τ; −1: when s ≤ τ) with the largest ``score``
    on these trials (candidates: 201 quantiles of the pooled finite statistics and, when there are
    at most 2,000 distinct values, every one of them)."""
    pooled = np.concatenate([s0, s1])
    fin = pooled[np.isfinite(pooled)]
    if fin.size:
        cands = np.quantile(fin, np.linspace(0.0, 1.0, 201))
        uniq = np.unique(fin)
        cands = np.unique(np.concatenate([cands, uniq])) if uniq.size <= 2000 else np.unique(cands)
    else:
        cands = np.array([0.0])
    s0s, s1s = np.sort(s0), np.sort(s1)
    above0 = s0s.size - np.searchsorted(s0s, cands, side="right")
    above1 = s1s.size - np.searchsorted(s1s, cands, side="right")
    up = score(above0, s0s.size, s1s.size - above1, s1s.size)  # guess D′ when s > τ
    down = score(s0s.size - above0, s0s.size, above1, s1s.size)  # guess D′ when s ≤ τ
    i, j = int(np.argmax(up)), int(np.argmax(down))
    return (float(cands[i]), 1) if up[i] >= down[j] else (float(cands[j]), -1)


def _held_out(e0: np.ndarray, e1: np.ndarray, tau: float, direction: int) -> tuple[int, int]:
    if direction == 1:
        return int(np.sum(e0 > tau)), int(np.sum(e1 <= tau))
    return int(np.sum(e0 <= tau)), int(np.sum(e1 > tau))


@dataclass
class AuditResult:
    """One audit: trials per data set, the ε test (threshold, direction, its error rates on the
    held-out half), the ε lower bound and the ε the accountant claims; the μ lower bound, the μ of
    the ideal mechanism on this pair (when known) and the claimed μ (Gaussian releases only);
    ``note``: what a batch of messages showed."""

    name: str
    trials: int
    threshold: float
    direction: int
    fpr: float
    fnr: float
    epsilon_lower: float
    epsilon_claimed: float
    delta: float
    mu_lower: float = 0.0
    mu_claimed: Optional[float] = None
    mu_pair: Optional[float] = None
    note: str = ""

    @property
    def passed(self) -> bool:
        return self.epsilon_lower <= self.epsilon_claimed and (self.mu_claimed is None or self.mu_lower <= self.mu_claimed)


def audit(
    name: str,
    run_d: Callable[[], float],
    run_d1: Callable[[], float],
    trials: int,
    epsilon_claimed: float,
    delta: float,
    confidence: float = 0.95,
    mu_claimed: Optional[float] = None,
    mu_pair: Optional[float] = None,
) -> AuditResult:
    """Run ``run_d`` (a statistic of one output on D) and ``run_d1`` (on D′) ``trials`` times each;
    choose the threshold tests on the first half, bound ε and μ on the second half. NaN statistics
    count as ``+inf`` (a crash or NaN is observable too)."""
    s0 = np.array([run_d() for _ in range(trials)], dtype=float)
    s1 = np.array([run_d1() for _ in range(trials)], dtype=float)
    s0[np.isnan(s0)] = np.inf
    s1[np.isnan(s1)] = np.inf
    h = trials // 2
    e0, e1 = s0[h:], s1[h:]
    eps_score, mu_score = _eps_score(delta, confidence), _mu_score(confidence)
    tau, direction = _best_threshold(s0[:h], s1[:h], eps_score)
    fp, fn = _held_out(e0, e1, tau, direction)
    eps = float(eps_score(fp, e0.size, fn, e1.size)[0])
    tau_mu, dir_mu = _best_threshold(s0[:h], s1[:h], mu_score)
    fp_mu, fn_mu = _held_out(e0, e1, tau_mu, dir_mu)
    mu = float(mu_score(fp_mu, e0.size, fn_mu, e1.size)[0])
    return AuditResult(name, trials, tau, direction, fp / e0.size, fn / e1.size, eps, float(epsilon_claimed), delta,
                       mu, mu_claimed, mu_pair)


def project(out_d: np.ndarray, out_d1: np.ndarray, std: np.ndarray) -> Callable[[np.ndarray], float]:
    """The Gaussian likelihood-ratio statistic for outputs ``N(out_d, diag std²)`` against
    ``N(out_d1, diag std²)``: ``Σ (x − out_d)(out_d1 − out_d)/std²``."""
    a = np.asarray(out_d, dtype=float).ravel()
    w = (np.asarray(out_d1, dtype=float).ravel() - a) / np.asarray(std, dtype=float).ravel() ** 2

    def stat(x) -> float:
        return float(np.dot(np.asarray(x, dtype=float).ravel() - a, w))

    return stat


def _pair_mu(out_d, out_d1, std) -> float:
    """The μ of the ideal Gaussian mechanism on this pair: ``‖(out_d1 − out_d)/std‖``."""
    diff = (np.asarray(out_d1, dtype=float).ravel() - np.asarray(out_d, dtype=float).ravel()) / np.asarray(std, dtype=float).ravel()
    return float(np.linalg.norm(diff))


# ----------------------------------------------------------------------------------------------
# the mechanisms, each on a worst-case neighbouring pair (D, D′ differ in their last row)
# ----------------------------------------------------------------------------------------------

#: δ at which the claims are read.
AUDIT_DELTA = 1e-5
#: Noise multiplier of the audited Gaussian releases and Gumbel multiplier of the selection; chosen
#: so that the claimed ε is about 1–2 at δ = 1e-5, where a test with 10⁴–10⁵ trials can come close.
GAUSS_MULT = 2.0
GUMBEL_MULT = 2.0
#: The planted extreme values (finite): every extreme-row case uses some of them.
FMAX = float(np.finfo(np.float64).max)
EXTREME = (1e300, -1e300, 1e308, -1e308, 1.7e308, -1.7e308)


@dataclass
class Case:
    """An audit case: a name, the trials' statistic on D and on D′ (closures over the real
    mechanism and a generator), the claimed ε (and, for a Gaussian release, μ) of what one trial
    releases, the μ of the ideal mechanism on this pair when known, and (site cases) the outcome
    kinds seen on D and on D′."""

    name: str
    run_d: Callable[[], float]
    run_d1: Callable[[], float]
    epsilon_claimed: float
    mu_claimed: Optional[float] = None
    mu_pair: Optional[float] = None
    kinds: Optional[tuple] = None

    def run(self, trials: int, confidence: float = 0.95) -> AuditResult:
        return audit(self.name, self.run_d, self.run_d1, trials, self.epsilon_claimed, AUDIT_DELTA, confidence,
                     self.mu_claimed, self.mu_pair)


def _share(ev: PrivacyEvent) -> PrivacyEvent:
    """What one participant's reply reveals on its own: with split noise its share carries
    ``noise/√split`` (the secure sum, not the share, has the event's noise)."""
    if ev.split == 1:
        return ev
    return PrivacyEvent(ev.release, ev.mechanism, ev.sensitivity, ev.noise_scale / math.sqrt(ev.split), ev.count, 1)


def claims(events) -> tuple[float, Optional[float]]:
    """``(ε, μ)`` claimed for one reply carrying ``events``: the PLD accountant's ε at
    :data:`AUDIT_DELTA`, and ``μ = √Σ count·(Δ/σ)²`` when every event is a Gaussian release (else
    ``None``)."""
    events = [_share(e) for e in events]
    eps = accountant_epsilon(events, AUDIT_DELTA, "pld")
    if not all(e.mechanism == GAUSSIAN for e in events):
        return eps, None
    return eps, math.sqrt(math.fsum(e.count * (e.sensitivity / e.noise_scale) ** 2 for e in events))


def _claim(events) -> float:
    return claims(events)[0]


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


def _extreme_row(d: int, start: int = 0) -> np.ndarray:
    """A finite row of planted extremes (±1e300, ±1e308, ±1.7e308, cycled)."""
    return np.array([EXTREME[(start + j) % len(EXTREME)] for j in range(d)])


def _gaussian_case(name, release, X0, X1, ref0, ref1, std_out, mult, rng, claim_mult=None, exact_pair=False):
    """A Gaussian release ``release(X, multiplier, generator) -> (output, event)`` on D = X0, D′ = X1;
    the statistic's direction comes from the noise-free outputs on the (non-extreme) pair ref0/ref1
    (``exact_pair``: X0, X1 are that pair, whose μ is then reported)."""
    out0, ev = release(ref0, mult if claim_mult is None else claim_mult, ZeroNoise())
    out1, _ = release(ref1, mult if claim_mult is None else claim_mult, ZeroNoise())
    stat = project(out0, out1, std_out)
    eps, mu = claims([ev])
    return Case(name, _safe(lambda: stat(release(X0, mult, rng)[0])), _safe(lambda: stat(release(X1, mult, rng)[0])),
                eps, mu, _pair_mu(out0, out1, std_out) if exact_pair else None)


def means_case(rng, extreme=False, broken=False) -> Case:
    """Column means; ``broken``: ``True`` (a tenth of the claimed noise) or a divisor of the noise."""
    n, d = 60, 3
    bound = np.full(d, 2.0)
    X = _base(n, d)
    ref0, ref1 = _with_last(X, -3 * bound), _with_last(X, 3 * bound)
    X0, X1 = (_with_last(X, np.full(d, -1.7e308)), _with_last(X, np.full(d, 1.7e308))) if extreme else (ref0, ref1)
    sens = 2 * math.sqrt(d)
    div = 0.0 if not broken else (10.0 if broken is True else float(broken))
    mult = GAUSS_MULT / div if div else GAUSS_MULT

    def rel(Y, m, g):
        return release_means(Y, bound, m, g)

    tag = f" BROKEN: noise / {div:g}" if div else ""
    return _gaussian_case(K.COLUMN_MEANS.value + (" (extreme row)" if extreme else "") + tag,
                          rel, X0, X1, ref0, ref1, bound * GAUSS_MULT * sens / n, mult, rng, claim_mult=GAUSS_MULT,
                          exact_pair=not extreme)


def second_moments_case(rng, extreme=False) -> Case:
    n, d = 200, 3
    bound = np.full(d, 1.0)
    X = _base(n, d, 0.5)
    ref0, ref1 = _with_last(X, np.zeros(d)), _with_last(X, np.full(d, 5.0))
    X0, X1 = (ref0, _with_last(X, _extreme_row(d))) if extreme else (ref0, ref1)
    std_out = bound**2 * GAUSS_MULT * math.sqrt(d) / n

    def rel(Y, m, g):
        return release_second_moments(Y, bound, m, g)

    return _gaussian_case(K.SECOND_MOMENTS.value + (" (extreme row)" if extreme else ""), rel, X0, X1, ref0, ref1,
                          std_out, GAUSS_MULT, rng, exact_pair=not extreme)


def value_range_case(rng, extreme=False, centred=False) -> Case:
    """The value-range release (:func:`release_range`: a noisy histogram of ``|x − c|`` on fixed bins,
    released as a per-column quantile bound). The observation is the released bound, a
    post-processing of the noisy counts: the pair moves one row per column from the 14-row bin
    ``(1/16, 1/4]`` into the bin above it, whose count then sits on either side of the release's
    3σ cut (14.7 at d = 3): the released bound jumps by about a factor 4 with a probability that
    depends on the row. The statistic: the log-bounds projected on their noise-free change."""
    n, d = 50, 3
    kind, q = (K.RANGE_CENTRED, CENTRED_QUANTILE) if centred else (K.RANGE_RAW, RAW_QUANTILE)
    signs = np.where(np.arange(n * d).reshape(n, d) % 2 == 0, 1.0, -1.0)
    mag = np.where(np.arange(n)[:, None] < 35, 0.15, 0.5) * np.ones((1, d))
    X = signs * mag
    ref0, ref1 = _with_last(X, np.full(d, 0.15)), _with_last(X, np.full(d, 0.5))
    X0, X1 = (ref0, _with_last(X, _extreme_row(d))) if extreme else (ref0, ref1)
    centre = np.zeros(d)

    def out(Y, m, g):
        b, ev = release_range(Y, centre, m, g, quantile=q, release=kind)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(b), ev

    o0, ev = out(ref0, GAUSS_MULT, ZeroNoise())
    o1, _ = out(ref1, GAUSS_MULT, ZeroNoise())
    stat = project(o0, o1, np.ones(d))
    eps, mu = claims([ev])
    return Case(kind.value + (" (extreme row)" if extreme else ""), _safe(lambda: stat(out(X0, GAUSS_MULT, rng)[0])),
                _safe(lambda: stat(out(X1, GAUSS_MULT, rng)[0])), eps, mu)


def covariance_case(rng, extreme=False) -> Case:
    """DP-Fed-BNSL's covariance (:func:`private_covariance`): rows clipped to ``C_x = c·√Σ v̂``, ``XᵀX``
    plus symmetric noise, projected to PSD (post-processing). The pair: a row along ``e₁`` against one
    along ``e₂``, both beyond the clip: the matrix moves by ``C_x²(e₁e₁ᵀ − e₂e₂ᵀ)``, the full
    sensitivity ``√2·C_x²`` on the diagonal of the upper triangle."""
    n, d, clip = 50, 3, 1.0
    X = _base(n, d)
    v_hat = np.full(d, 0.25)
    ref0, ref1 = _with_last(X, [10.0, 0.0, 0.0]), _with_last(X, [0.0, 10.0, 0.0])
    X0, X1 = (ref0, _with_last(X, _extreme_row(d, 4))) if extreme else (ref0, ref1)
    sens = math.sqrt(2.0) * clip**2 * float(v_hat.sum())

    def rel(Y, m, g):
        M, ev = private_covariance(Y, v_hat, clip, m, g)
        return upper_triangle(M), ev

    return _gaussian_case(K.COVARIANCE.value + " (DP-Fed-BNSL)" + (" (extreme row)" if extreme else ""), rel, X0, X1,
                          ref0, ref1, np.full(d * (d + 1) // 2, GAUSS_MULT * sens), GAUSS_MULT, rng,
                          exact_pair=not extreme)


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
        X0, X1 = _with_last(X, [1e300, 1e300]), _with_last(X, [1.7e308, -1e308])
    else:
        X0, X1 = ref0, ref1
    B0, ev = _pgcd_setup(ref0, beta)(ZeroNoise())
    B1, _ = _pgcd_setup(ref1, beta)(ZeroNoise())
    upd = [e for e in ev if e.release == K.UPDATE]
    stat = project(B0[0, 1], B1[0, 1], upd[0].noise_scale)  # M = 1: the value moves by the noise
    r0, r1 = _pgcd_setup(X0, beta), _pgcd_setup(X1, beta)
    name = K.UPDATE.value + {False: "", True: " (extreme row)", "overflow": " (extreme row 1e39, 0)"}[extreme]
    eps, mu = claims(upd)
    return Case(name, _safe(lambda: stat(r0(rng)[0][0, 1])), _safe(lambda: stat(r1(rng)[0][0, 1])), eps, mu,
                _pair_mu(B0[0, 1], B1[0, 1], upd[0].noise_scale) if extreme is False else None)


def _selection_pair(extreme):
    n = 50
    X = _base(n, 2)
    beta = np.array([[0.0, 5.0], [-5.0, 0.0]])  # |G₀₁| grows and |G₁₀| shrinks with the clipped sums
    ref0, ref1 = _with_last(X, [10.0, 10.0]), _with_last(X, [10.0, -10.0])  # both products −C vs +C
    if extreme:
        return X, beta, ref0, ref1, _with_last(X, [1e300, 1.7e308]), _with_last(X, [1e308, -1.7e308])
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
    X0, X1 = (ref0, _with_last(X, [1e300, 1.7e308])) if extreme else (ref0, ref1)  # u = 1.7e608 overflows
    std_out = GAUSS_MULT * 2 * POLISH_CLIP / n

    def rel(Y, m, g):
        return private_polish_moments(Y, v_hat, pairs, POLISH_CLIP, m, n, g)

    return _gaussian_case(K.POLISH.value + (" (extreme row)" if extreme else ""), rel, X0, X1, ref0, ref1,
                          std_out, GAUSS_MULT, rng, exact_pair=not extreme)


def moment_matrix_case(rng, extreme=False) -> Case:
    """Fed-moments' release: rows standardised with public centre and spreads as the site does
    (``z = (x − ĉ)/s``), clipped to ℓ₂ norm c√d, summed as ``Σ z zᵀ`` plus symmetric noise."""
    n, d, clip = 50, 2, 1.5
    X = _base(n, d)
    centre, spread = np.zeros(d), np.full(d, 0.5)
    ref0, ref1 = _with_last(X, [10.0, 0.0]), _with_last(X, [0.0, 10.0])  # C e₁ against C e₂
    X0, X1 = (ref0, _with_last(X, [1.7e308, -1e300])) if extreme else (ref0, ref1)
    sens = math.sqrt(2) * (clip * math.sqrt(d)) ** 2

    def rel(Y, m, g):
        Z = (Y - centre[None, :]) / spread[None, :]
        M, ev = private_moment_matrix(Z, clip, m, g)
        return upper_triangle(M), ev

    return _gaussian_case(K.MOMENT_MATRIX.value + " (fed-moments)" + (" (extreme row)" if extreme else ""), rel, X0, X1, ref0,
                          ref1, np.full(d * (d + 1) // 2, GAUSS_MULT * sens), GAUSS_MULT, rng, exact_pair=not extreme)


# ----------------------------------------------------------------------------------------------
# fed-suffstats: a real site of a real private plan, answering encoded messages
# ----------------------------------------------------------------------------------------------

#: The site cases need a resolved private fed-suffstats plan with at least this many columns (the
#: plan layer sits above this module, so the caller resolves it: tests/privacy/test_audit.py and
#: benchmarks/privacy_audit.py use ``RunPlan.resolve`` with two sites and per-site noise).
SITE_MIN_D = 5
#: The centre request of the site cases: 128 bins of width 1/8 from −8 (public, as any broadcast).
CENTRE_LO, CENTRE_SPAN = -8.0, 16.0
#: A refused message's statistic: ``REFUSED·(1 + k/64)`` for the k-th distinct refusal seen (far below
#: every reply's statistic, each refusal its own value); a non-finite or malformed reply is ``+inf``.
REFUSED = -1e300
_STAT_MAX = 1e299


@dataclass(frozen=True)
class Outcome:
    """What the coordinator observes of one site trial: the decoded reply (``values``), or the
    refusal (``"ExceptionClass: message"``); ``event``: the last event in the site's ledger."""

    values: Optional[np.ndarray]
    refusal: Optional[str] = None
    event: Optional[PrivacyEvent] = None

    @property
    def kind(self) -> str:
        if self.refusal is not None:
            return "refused: " + self.refusal
        if self.values is None:
            return "malformed reply"
        return "finite reply" if bool(np.all(np.isfinite(self.values))) else "non-finite reply"


def site_outcome(plan, X: np.ndarray, rng, messages, pid: int = 0) -> Outcome:
    """A fresh site (:func:`make_suffstats_site` of ``plan``, participant ``pid``, rows ``X``, noise
    ``rng``) answers the encoded ``messages`` in order, as in a run; the outcome is the reply to the
    last one, or the first refusal (any exception the site raises: its class and message)."""
    site = make_suffstats_site(plan, pid, X, rng)
    raw = None
    try:
        with np.errstate(all="ignore"):
            for m in messages:
                raw = site.handle(m)
    except Exception as e:  # the refusal, with its message, is what the coordinator sees
        return Outcome(None, f"{type(e).__name__}: {e}")
    events = site.ledger.events(pid)
    ev = events[-1] if events else None
    try:
        return Outcome(ShareReply.decode(raw).values, None, ev)
    except Exception:
        return Outcome(None, None, ev)


class OutcomeStatistic:
    """A trial's outcome as one number: a finite reply projected on the change of the noise-free
    replies (``ref``: on D; ``direction``: D′ minus D; without them 0), a non-finite, malformed or
    differently shaped reply ``+inf``, the k-th distinct refusal ``REFUSED·(1 + k/64)`` (the same
    instance is used on D and D′, so one refusal has one value on both)."""

    def __init__(self, ref: Optional[np.ndarray], direction: Optional[np.ndarray]):
        self.ref = None if ref is None else np.asarray(ref, dtype=float).ravel()
        self.w = None if direction is None else np.asarray(direction, dtype=float).ravel()
        self.codes: dict = {}

    def __call__(self, out: Outcome) -> float:
        if out.refusal is not None:
            k = self.codes.setdefault(out.refusal, len(self.codes))
            return REFUSED * (1.0 + k / 64.0)
        v = out.values
        if v is None or not bool(np.all(np.isfinite(v))):
            return math.inf
        if self.w is None:
            return 0.0
        if v.size != self.w.size:
            return math.inf
        with np.errstate(all="ignore"):
            s = float(np.dot(v - self.ref, self.w))
        return math.inf if s != s else min(max(s, -_STAT_MAX), _STAT_MAX)


def _site_rows(n: int, d: int) -> np.ndarray:
    """Fixed standard-normal rows clipped to ±3 (a fixed seed: no generator outside the mechanisms')."""
    return np.clip(sample_noise(np.random.default_rng(20261202), "normal", (n, d)), -3.0, 3.0)


def _alternating(d: int) -> np.ndarray:
    return np.where(np.arange(d) % 2 == 0, 1.0, -1.0)


def _site_shape(plan) -> tuple[int, int]:
    if plan.privacy is None:
        raise ValueError("the fed-suffstats site cases need a private plan")
    if plan.d < SITE_MIN_D:
        raise ValueError(f"the fed-suffstats site cases need d >= {SITE_MIN_D}, the plan has {plan.d}")
    return plan.participants[0].rows, plan.d


def _first(d: int) -> bytes:
    return FirstRequest(0, d, d * (value_bins() + pair_bins())).encode()


def _centre(d: int, lo=None, width=None) -> bytes:
    lo = np.full(d, CENTRE_LO) if lo is None else np.asarray(lo, dtype=float)
    width = np.full(d, CENTRE_SPAN / CENTRE_BINS) if width is None else np.asarray(width, dtype=float)
    return CentreRequest(CENTRE_ROUND, d, d * CENTRE_BINS, lo, width).encode()


def _basis(d: int, centre, scale, L, stage: int = 1) -> bytes:
    return BasisBroadcast(stage, d, np.asarray(centre, float), np.asarray(scale, float), np.asarray(L, float)).encode()


def _identity_basis(d: int) -> bytes:
    return _basis(d, np.zeros(d), np.ones(d), np.eye(d))


def _site_case(name: str, plan, X0: np.ndarray, X1: np.ndarray, messages, rng, claim_messages=None) -> Case:
    """A site case: on D = ``X0`` and D′ = ``X1`` a fresh site answers ``messages``; the statistic is
    :class:`OutcomeStatistic` with the direction of the noise-free replies (when both are finite); the
    claim is that of the last release the site records (``claim_messages``: of the release those
    messages make, for a case whose messages the site may refuse)."""
    z0 = site_outcome(plan, X0, ZeroNoise(), messages)
    z1 = site_outcome(plan, X1, ZeroNoise(), messages)
    finite = z0.kind == z1.kind == "finite reply" and z0.values.size == z1.values.size
    ref, w = (z0.values, z1.values - z0.values) if finite else (None, None)
    ev = None if claim_messages is not None else (z0.event or z1.event)
    if ev is None:
        ev = site_outcome(plan, X0, ZeroNoise(), claim_messages or messages).event
    eps, mu = claims([ev])
    std_reply = _share(ev).noise_scale / float(plan.n_total)
    mu_pair = _pair_mu(z0.values, z1.values, np.full(w.size, std_reply)) if finite else None
    stat = OutcomeStatistic(ref, w)
    kinds = (Counter(), Counter())

    def runner(X, k):
        def run() -> float:
            out = site_outcome(plan, X, rng, messages)
            kinds[k][out.kind] += 1
            return stat(out)

        return run

    return Case(name, runner(X0, 0), runner(X1, 1), eps, mu, mu_pair, kinds)


def scale_histogram_case(rng, plan, extreme=False) -> Case:
    """Fed-suffstats' scale histograms (the site's first reply: :func:`scale_histograms` of its rows plus
    Gaussian noise of the plan's multiplier). The pair moves the last row (paired with the one
    before it) from ``±10⁻³`` to ``±10³`` in every column: one count moves in the value histogram and
    one in the pair histogram of every column, the full sensitivity ``2√d``. Extreme: from 0 to a
    row of ±1e300 / ±1e308 / ±1.7e308 (the open end bins)."""
    n, d = _site_shape(plan)
    X = _site_rows(n, d)
    u = _alternating(d)
    X0, X1 = (_with_last(X, np.zeros(d)), _with_last(X, _extreme_row(d))) if extreme else \
        (_with_last(X, 1e-3 * u), _with_last(X, 1e3 * u))
    return _site_case(K.SCALE_HISTOGRAM.value + " (fed-suffstats site)" + (" (extreme row)" if extreme else ""),
                      plan, X0, X1, [_first(d)], rng)


def centre_histogram_case(rng, plan, extreme=False) -> Case:
    """Fed-suffstats' centre histograms (the site's reply to a centre request:
    :func:`centre_histogram_release`), bins from −8 to 8. The pair moves the last row from below
    the first bin to above the last in every column (the full sensitivity ``√(2d)``); extreme: from
    −1e300 … −1.7e308 to +1e300 … +1.7e308."""
    n, d = _site_shape(plan)
    X = _site_rows(n, d)
    big = np.abs(_extreme_row(d))
    X0, X1 = (_with_last(X, -big), _with_last(X, big)) if extreme else \
        (_with_last(X, np.full(d, -20.0)), _with_last(X, np.full(d, 20.0)))
    return _site_case(K.CENTRE_HISTOGRAM.value + " (fed-suffstats site)" + (" (extreme row)" if extreme else ""),
                      plan, X0, X1, [_first(d), _centre(d)], rng)


#: The whitened-moment cases' basis: ``L = I/16`` (public; the site accepts it): a value clamped at
#: ``STAGE_Z = 8`` scales is whitened to 128, so a row along one axis is clipped to ``C`` almost
#: exactly along it.
WHITEN_L_DIAG = 1.0 / 16.0


def whitened_moments_case(rng, plan, extreme=False) -> Case:
    """Fed-suffstats' stage-1 release (the site's reply to a basis broadcast:
    :func:`whitened_moments_release`), after the first and centre requests, in the basis ``m̃ = 0``,
    ``s̃ = 1``, ``L = I/16``. The pair: a last row of ``8·e₁`` against ``8·e₂`` (``a = [1; 128 e_k]``
    clipped to ``C``: nearly orthogonal, so ``‖aaᵀ − bbᵀ‖`` is within 10⁻⁴ of the sensitivity
    ``√2·C²``). Extreme: ``8·e₁`` against a row of ±1e300 / ±1e308 / ±1.7e308."""
    n, d = _site_shape(plan)
    X = _site_rows(n, d)
    e1, e2 = np.eye(d)[0] * STAGE_Z, np.eye(d)[1] * STAGE_Z
    X0, X1 = (_with_last(X, e1), _with_last(X, _extreme_row(d))) if extreme else (_with_last(X, e1), _with_last(X, e2))
    msgs = [_first(d), _centre(d), _basis(d, np.zeros(d), np.ones(d), WHITEN_L_DIAG * np.eye(d))]
    return _site_case(K.WHITENED_MOMENTS.value + " (fed-suffstats site, stage 1)" + (" (extreme row)" if extreme else ""),
                      plan, X0, X1, msgs, rng)


def crafted_basis(d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Issue 28's basis (centre 0, scale 1): ``L`` lower triangular and finite with ``L₁₁ = 4/float64-max``,
    ``L₂₁ = L₃₁ = L₃₂ = 1``, the rest of the diagonal 1. Whitening solves ``L y = z``: ``y₁ = ±inf``
    exactly when ``|z₁| > 4``, then ``y₂ = −y₁`` and ``y₃ = z₃ − y₁ − y₂ = NaN``."""
    L = np.eye(d)
    L[0, 0] = 4.0 / FMAX
    L[1, 0] = L[2, 0] = L[2, 1] = 1.0
    return np.zeros(d), np.ones(d), L


def crafted_basis_case(rng, plan) -> Case:
    """A malicious coordinator's stage-1 basis (:func:`crafted_basis`) sent to a real site after it
    answered the first and centre requests. D: the last row's first value 3.5 standard deviations
    out; D′: 6. A site that whitens with it replies NaN exactly on D′ (ε = ∞); a site that refuses
    the basis on the message alone gives the same refusal on both (bound 0). Claimed: the stage-1
    release's ε."""
    n, d = _site_shape(plan)
    X = _site_rows(n, d)
    X0, X1 = X.copy(), X.copy()
    X0[-1, 0], X1[-1, 0] = 3.5, 6.0
    msgs = [_first(d), _centre(d), _basis(d, *crafted_basis(d))]
    return _site_case("ADVERSARIAL " + K.WHITENED_MOMENTS.value + ": crafted basis L11 = 4/float64-max "
                      "(inf - inf beyond 4 sd; row at 3.5 vs 6 sd)", plan, X0, X1, msgs, rng,
                      claim_messages=[_first(d), _centre(d), _identity_basis(d)])


class _Picks:
    """Deterministic test inputs (a Weyl sequence, not random noise: the audit's messages and rows
    are fixed vectors; DP noise is drawn only by :func:`bnsl_cli.privacy.mechanisms.sample_noise`)."""

    _PHI = 0.6180339887498949

    def __init__(self, seed: int):
        self._k = int(seed)

    def _next(self) -> float:
        self._k += 1
        return (self._k * self._PHI) % 1.0

    def pick_int(self, lo: int, hi: int) -> int:
        return lo + int(self._next() * (hi - lo)) if hi > lo else lo

    def pick_float(self, lo: float, hi: float) -> float:
        return lo + self._next() * (hi - lo)

    def pick_from(self, options, size: int) -> np.ndarray:
        opts = list(options)
        return np.array([opts[int(self._next() * len(opts))] for _ in range(size)], dtype=float)


def extreme_bases(d: int, count: int = 40, seed: int = 28) -> list:
    """``count`` random finite bases ``(label, centre, scale, L)`` with extreme entries, eight forms
    in turn: (0) inf − inf: a diagonal entry ``t/float64-max`` (``t`` in (0.5, 8)) with ones below it,
    (1) a lower triangle and diagonal drawn from ±1e300, ±float64-max, ±5e-324, ±1e-300, 0, ±1,
    (2) tiny diagonal (5e-324 … 1e-300) with ±1 below, (3) huge diagonal and huge entries below,
    (4) extreme centres and scales with ``L = I``, (5) an upper triangle that is not 0, (6) a diagonal
    entry that is 0 or negative, (7) ±float64-max below a diagonal of 1e-300 … 1."""
    g = _Picks(seed)
    big = [1e300, FMAX, 1e308, 2.0**1000]
    small = [5e-324, 1e-300, 2.2250738585072014e-308, 2.0**-1000]
    palette = big + small + [-x for x in big + small] + [0.0, 1.0, -1.0]
    low = np.tril_indices(d, -1)
    out = []
    for i in range(count):
        centre, scale, L = np.zeros(d), np.ones(d), np.eye(d)
        form = i % 8
        if form == 0:
            j = int(g.pick_int(0, d - 2))
            t = float(g.pick_float(0.5, 8.0))
            L[j, j] = t / FMAX
            L[j + 1:, j] = 1.0
            L[j + 2:, j + 1] = 1.0
            label = f"inf - inf at column {j + 1}, threshold {t:.2f} sd"
        elif form == 1:
            L[low] = g.pick_from(palette, low[0].size)
            L[np.diag_indices(d)] = g.pick_from(big + small, d)
            label = "extreme palette"
        elif form == 2:
            L[np.diag_indices(d)] = g.pick_from(small, d)
            L[low] = g.pick_from([1.0, -1.0], low[0].size)
            label = "tiny diagonal"
        elif form == 3:
            L[np.diag_indices(d)] = g.pick_from(big, d)
            L[low] = g.pick_from(big + [-x for x in big], low[0].size)
            label = "huge entries"
        elif form == 4:
            centre = g.pick_from([1e300, -1e300, FMAX, -FMAX, 0.0], d)
            scale = g.pick_from(big + small + [1.0], d)
            label = "extreme centre and scale"
        elif form == 5:
            up = np.triu_indices(d, 1)
            L[up] = g.pick_from([FMAX, -FMAX, 1e300, 1.0], up[0].size)
            L[0, 0] = float(g.pick_float(0.5, 8.0)) / FMAX
            label = "not lower triangular"
        elif form == 6:
            j = int(g.pick_int(0, d))
            L[j, j] = float(g.pick_from([0.0, -5e-324, -1.0, -FMAX], 1)[0])
            L[low] = g.pick_from([0.0, 1.0], low[0].size)
            label = f"diagonal entry {L[j, j]:.3g} at column {j + 1}"
        else:
            L[np.diag_indices(d)] = g.pick_from([1e-300, 1e-150, 1.0], d)
            L[low] = g.pick_from([FMAX, -FMAX, 0.0], low[0].size)
            label = "float64-max below a small diagonal"
        out.append((label, centre, scale, L))
    return out


def extreme_centre_bins(d: int, count: int = 20, seed: int = 29) -> list:
    """``count`` random finite centre requests ``(label, lo, width)``: starts among ±float64-max, ±1e300,
    0, ±1e-300 and widths among 5e-324, 1e-300, 1, 1e300, float64-max (bins that overflow, that no
    row reaches, that every row passes)."""
    g = _Picks(seed)
    los = [FMAX, -FMAX, 1e300, -1e300, 0.0, 1e-300, -1e-300]
    widths = [5e-324, 1e-300, 1.0, 1e300, FMAX]
    return [(f"extreme bins {i + 1}", g.pick_from(los, d), g.pick_from(widths, d)) for i in range(count)]


def random_basis_cases(rng, plan, count: int = 40, seed: int = 28) -> list:
    """One case per :func:`extreme_bases` basis, sent as stage 1 after the first and centre requests;
    D: the last row ``0.5·(1, −1, …)``, D′: a row of ±1e300 / ±1e308 / ±1.7e308 (far out: clamped to
    8 scales in a sane basis). Each basis must give the same kind of outcome on D and D′."""
    n, d = _site_shape(plan)
    X = _site_rows(n, d)
    X0, X1 = _with_last(X, 0.5 * _alternating(d)), _with_last(X, _extreme_row(d))
    claim = [_first(d), _centre(d), _identity_basis(d)]
    return [_site_case(f"ADVERSARIAL {K.WHITENED_MOMENTS.value}: basis {i + 1} ({label})", plan, X0, X1,
                       [_first(d), _centre(d), _basis(d, c, s, L)], rng, claim_messages=claim)
            for i, (label, c, s, L) in enumerate(extreme_bases(d, count, seed))]


def random_centre_cases(rng, plan, count: int = 20, seed: int = 29) -> list:
    """One case per :func:`extreme_centre_bins` request, after the first request; D: the last row
    ``−20·(1, …)``, D′: a row of ±1e300 / ±1e308 / ±1.7e308."""
    n, d = _site_shape(plan)
    X = _site_rows(n, d)
    X0, X1 = _with_last(X, np.full(d, -20.0)), _with_last(X, _extreme_row(d))
    claim = [_first(d), _centre(d)]
    return [_site_case(f"ADVERSARIAL {K.CENTRE_HISTOGRAM.value}: request {i + 1} ({label})", plan, X0, X1,
                       [_first(d), _centre(d, lo, w)], rng, claim_messages=claim)
            for i, (label, lo, w) in enumerate(extreme_centre_bins(d, count, seed))]


def _category(kind: str) -> str:
    return "refused" if kind.startswith("refused") else kind


def audit_batch(name: str, cases: list, trials: int, confidence: float = 0.95) -> AuditResult:
    """Audit every case of a batch (each at confidence ``1 − (1 − confidence)/len(cases)``, so that
    all bounds hold jointly) and return the worst one (largest bound against its claim) under
    ``name``, with a note: how many messages gave the same outcome kinds on D and D′, and which."""
    B = len(cases)
    per = 1.0 - (1.0 - confidence) / B
    results = [c.run(trials, per) for c in cases]

    def excess(r: AuditResult) -> float:
        return max(r.epsilon_lower / r.epsilon_claimed, (r.mu_lower / r.mu_claimed) if r.mu_claimed else 0.0)

    k = max(range(B), key=lambda i: excess(results[i]))
    same = [set(c.kinds[0]) == set(c.kinds[1]) for c in cases]
    seen = Counter(" / ".join(["+".join(sorted({_category(x) for x in c.kinds[0]})),
                               "+".join(sorted({_category(x) for x in c.kinds[1]}))]) for c in cases)
    r = results[k]
    r.name = name
    differ = [cases[i].name for i in range(B) if not same[i]]
    r.note = (f"{name}: {B} messages; the same outcome kinds on D and D′ for {sum(same)} of {B}; outcomes D / D′: "
              + ", ".join(f"{v}× {s}" for s, v in sorted(seen.items()))
              + f"; worst: {cases[k].name}"
              + (f"; DIFFERENT on D and D′: {'; '.join(differ)}" if differ else ""))
    return r


# ----------------------------------------------------------------------------------------------
# the lists
# ----------------------------------------------------------------------------------------------


def suffstats_cases(rng, plan) -> list:
    """Fed-suffstats' three releases through a real site of ``plan`` (private, d ≥ 5), each on a
    worst-case pair and with a planted extreme row, and the crafted basis of issue 28."""
    out = []
    for make in (scale_histogram_case, centre_histogram_case, whitened_moments_case):
        out.append(make(rng, plan))
        out.append(make(rng, plan, extreme=True))
    out.append(crafted_basis_case(rng, plan))
    return out


def all_cases(rng, plan) -> list:
    """Every audited mechanism: the worst-case pair, then the pair with a planted extreme row; then
    fed-suffstats' releases through a real site of ``plan`` and the crafted basis (:func:`suffstats_cases`).
    The random-message batches are :func:`random_basis_cases` and :func:`random_centre_cases`
    (audited with :func:`audit_batch`)."""
    out = []
    for make in (means_case, second_moments_case, update_case, selection_case, pgcd_step_case, polish_case,
                 moment_matrix_case, covariance_case, value_range_case):
        out.append(make(rng))
        out.append(make(rng, extreme=True))
    out.append(value_range_case(rng, centred=True))
    out.append(value_range_case(rng, extreme=True, centred=True))
    out.append(update_case(rng, extreme="overflow"))
    return out + suffstats_cases(rng, plan)


def broken_cases(rng) -> list:
    """Deliberately broken releases the audit must catch: column means with a tenth and with half
    of the claimed noise (the second only the μ bound shows)."""
    return [means_case(rng, broken=True), means_case(rng, broken=2)]
