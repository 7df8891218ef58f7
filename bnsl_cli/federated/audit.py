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
:mod:`bnsl_cli.federated.methods.admm.dp_site`, :mod:`bnsl_cli.federated.methods.moments`, and the
sites of the methods' packages answering encoded messages). The
statistic is the likelihood ratio of the ideal mechanism, computed from the two noise-free outputs,
which are obtained by running the same code with a generator that draws zeros (:class:`ZeroNoise`).
This module holds the statistics, the one-off releases' cases and the site-outcome machinery; each
method's cases live in its package (``methods/*/audit.py``), listed in one order by
:func:`bnsl_cli.federated.methods.registry.audit_cases`.

**Adversarial inputs.** The coordinator is not trusted: what a site releases must not depend on the
rows beyond the claim *whatever message it is sent*. A method's site cases therefore also send crafted and
random extreme messages (for example a basis whose whitening overflows exactly for rows beyond a
threshold, and entries like 1e300, 5e-324, ±float64-max) to a real site built from a real
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

from bnsl_cli.federated.messages import (
    ShareReply,
)
from bnsl_cli.privacy.accountant import accountant_epsilon
from bnsl_cli.privacy.ledger import PrivacyEvent
from bnsl_cli.privacy.one_off import (
    CENTRED_QUANTILE,
    RAW_QUANTILE,
    release_means,
    release_range,
    release_second_moments,
)
from bnsl_cli.privacy.releases import GAUSSIAN
from bnsl_cli.privacy.releases import ReleaseKind as K


__all__ = [
    "ZeroNoise",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "gdp_lower_bound",
    "AuditResult",
    "audit",
    "project",
    "AUDIT_DELTA",
    "GAUSS_MULT",
    "GUMBEL_MULT",
    "FMAX",
    "EXTREME",
    "Case",
    "claims",
    "means_case",
    "second_moments_case",
    "value_range_case",
    "REFUSED",
    "Outcome",
    "site_outcome",
    "OutcomeStatistic",
    "audit_batch",
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


# ----------------------------------------------------------------------------------------------
# a site's outcome as one number (the message cases of a method's package)
# ----------------------------------------------------------------------------------------------

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


def site_outcome(site, pid: int, messages) -> Outcome:
    """A fresh ``site`` (participant ``pid``) answers the encoded ``messages`` in order, as in a run;
    the outcome is the reply to the last one, or the first refusal (any exception the site raises:
    its class and message)."""
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
