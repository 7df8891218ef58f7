"""Privacy-loss-distribution (PLD) accounting of a ledger: tight (ε, δ) for the Gaussian and
bounded-range (exponential / Gumbel-max) mechanisms, composed numerically.

For a pair of output distributions ``(P, Q)`` on neighbouring data sets the *privacy loss* of an
outcome ``o`` is ``L(o) = ln(P(o) / Q(o))`` and its distribution under ``P`` is the PLD. The
mechanism is ``(ε, δ)``-DP exactly when, for both orders of every neighbouring pair,

    δ(ε) = E_P[(1 − e^{ε − L})₊] + P(L = ∞)  ≤  δ,

and composing mechanisms adds independent losses, i.e. convolves their PLDs (also adaptively, when
each step's pair is dominated by a fixed pair: Dong, Roth & Su 2022, composition of f-DP). This module
builds, for every ledger event, a *dominating* pair — one whose δ(ε) is at least that of every
neighbouring pair of that mechanism — discretises it pessimistically on the grid ``hℤ``, convolves,
and reads ``ε(δ)`` or ``δ(ε)`` off the result. Each step only moves loss mass *up* (or to ``+∞``), so
the result is an upper bound on the exact composition, up to floating-point rounding of the FFT
(about 1e-16 of the total mass per grid point).

Mechanisms (the ledger's events):

* **Gaussian**, L2 sensitivity ``Δ``, noise std ``σ``: the pair ``N(0, σ²)`` vs ``N(Δ, σ²)``; with
  ``μ = Δ/σ`` the loss under ``P`` is ``N(μ²/2, μ²)`` and δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ)
  (Balle & Wang 2018). ``k`` Gaussian releases with ``μ_i`` compose *exactly* to one Gaussian with
  ``μ² = Σ μ_i²`` (the product of the pairs is a pair of spherical Gaussians whose means are
  ``‖μ‖`` apart), so all Gaussian events of a ledger become one PLD — no discretisation error grows
  with the number of releases. ``μ² = 2ρ`` with ``ρ`` the events' zCDP spend.
* **Exponential mechanism in Gumbel-max form** with score sensitivity ``Δ_S`` and Gumbel scale ``b``:
  ``ε₀``-bounded range with ``ε₀ = 2Δ_S/b`` (every loss of a neighbouring pair lies in an interval
  ``[(t − 1)ε₀, tε₀]``, ``t ∈ [0, 1]``). Such a pair is a post-processing of the two-point pair with
  losses ``tε₀`` and ``(t − 1)ε₀`` (Dong, Durfee & Rogers 2020), whose δ(ε) for ``0 ≤ ε ≤ tε₀`` is
  ``(a − x)(x − e^ε) / (x(a − 1))`` with ``a = e^{ε₀}``, ``x = e^{tε₀}``. Its maximum over ``t`` is at
  ``x = √(a e^ε)``:

      δ_BR(ε) = (e^{ε₀/2} − e^{ε/2})² / (e^{ε₀} − 1)   for 0 ≤ ε ≤ ε₀,   0 for ε ≥ ε₀,

  and ``δ_BR(ε) = 1 − e^ε + e^ε δ_BR(−ε)`` for ``ε < 0`` (the family is closed under swapping the
  pair). ``δ_BR(0) = tanh(ε₀/4)``. A supremum of hockey-stick curves is convex in ``e^ε``, hence the
  curve of one pair, which dominates every ε₀-bounded-range pair; the composition theorem then gives
  the adaptive composition of ``k`` such selections as the ``k``-fold convolution of its PLD.

Discretisation ("connect the dots", Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022): on knots
``ε_j = j h`` the discrete PLD whose δ(ε) equals the true curve at every knot and is linear in
``e^ε`` in between; since the true curve is convex in ``e^ε`` the discrete one lies above it
everywhere. For the Gaussian the mass of the loss in each cell ``[ε_j, ε_{j+1}]`` is split between
the two knots so that both its ``P``- and ``Q``-mass are kept (which gives exactly that curve); mass
below the first knot is moved onto it and mass above the last knot to ``+∞``. The bounded-range
curve is discretised from its values at the knots (second differences). Self-composition uses
one FFT power over a window outside which a Chernoff bound leaves at most ``TAIL_MASS``; that mass
goes to ``+∞`` (the window's circular wrap can only move mass to other finite losses).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Iterable

import numpy as np
from scipy import fft as _fft
from scipy.special import log_ndtr, logsumexp, ndtr

from bnsl_cli.privacy.releases import EXPONENTIAL, GAUSSIAN

__all__ = [
    "DEFAULT_DISCRETIZATION",
    "TAIL_MASS",
    "PLD",
    "gaussian_delta",
    "gaussian_epsilon",
    "bounded_range_delta",
    "gaussian_pld",
    "bounded_range_pld",
    "bounded_range_epsilon0",
    "events_pld",
    "epsilon_of_events",
    "delta_of_events",
    "grid_fits",
]

#: Grid spacing h of the privacy losses.
DEFAULT_DISCRETIZATION = 1e-4
#: Mass a truncation may move to +∞ (it is added to δ, so it stays an upper bound).
TAIL_MASS = 1e-18
#: A first pass on this coarser grid (an upper bound too) decides whether the fine grid is worth it:
#: when it is more than ``SKIP_MARGIN`` above the zCDP bound, the zCDP bound is reported.
COARSE_DISCRETIZATION = 1e-3
SKIP_MARGIN = 0.005
#: Gaussian losses are kept within μ²/2 ± Z_TAIL·μ (the normal tail beyond is < 1e-27).
Z_TAIL = 11.0


# ----------------------------------------------------------------------------------------------
# a discrete privacy-loss distribution
# ----------------------------------------------------------------------------------------------


class PLD:
    """Masses ``probs[k]`` at losses ``(lower + k)·h`` plus ``inf_mass`` at ``+∞`` (all under ``P``)."""

    def __init__(self, h: float, lower: int, probs: np.ndarray, inf_mass: float = 0.0):
        self.h = float(h)
        self.lower = int(lower)
        self.probs = np.asarray(probs, dtype=float)
        self.inf_mass = float(inf_mass)

    @classmethod
    def identity(cls, h: float) -> "PLD":
        """No release: loss 0 with probability 1."""
        return cls(h, 0, np.ones(1), 0.0)

    @property
    def losses(self) -> np.ndarray:
        return (self.lower + np.arange(self.probs.size)) * self.h

    def compose(self, other: "PLD") -> "PLD":
        """The PLD of both releases (their losses add): a convolution."""
        if other.h != self.h:
            raise ValueError("PLDs on different grids cannot be composed")
        if self.probs.size == 1 or other.probs.size == 1:
            probs = np.convolve(self.probs, other.probs)
        else:
            from scipy.signal import fftconvolve  # deferred: scipy.signal loads scipy.optimize (start-up)

            probs = fftconvolve(self.probs, other.probs)
        inf = self.inf_mass + other.inf_mass - self.inf_mass * other.inf_mass
        return PLD(self.h, self.lower + other.lower, probs, inf).truncated()

    def self_compose(self, count: int) -> "PLD":
        """``count`` independent copies composed: one FFT power over a Chernoff window."""
        count = int(count)
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        if count == 1:
            return self
        p = self.probs
        n = p.size
        lo, hi, tails = _chernoff_window(p, count, TAIL_MASS)
        size = hi - lo + 1
        fast = _fft.next_fast_len(max(size, n), real=True)
        spec = _fft.rfft(p, fast)
        out = _fft.irfft(spec**count, fast)
        out = np.roll(out, -lo)[:size]  # indices lo..hi of the full convolution (mod fast)
        inf = -math.expm1(count * math.log1p(-self.inf_mass)) if self.inf_mass < 1 else 1.0
        # mass outside [lo, hi] (≤ tails) wrapped onto finite losses; a bound on it goes to +∞
        return PLD(self.h, count * self.lower + lo, out, min(1.0, inf + tails)).truncated()

    def truncated(self, tail: float = TAIL_MASS) -> "PLD":
        """Drop up to ``tail/2`` of mass from each end: the low end onto the first kept loss, the high
        end to ``+∞`` (both pessimistic)."""
        p = self.probs
        if p.size <= 2:
            return self
        c_lo = np.cumsum(p)
        c_hi = np.cumsum(p[::-1])
        i = int(np.searchsorted(c_lo, tail / 2, side="right"))  # p[:i] sums to <= tail/2
        j = int(np.searchsorted(c_hi, tail / 2, side="right"))
        i = min(i, p.size - 1)
        j = min(j, p.size - 1 - i)
        if i == 0 and j == 0:
            return self
        kept = p[i: p.size - j].copy()
        kept[0] += float(c_lo[i - 1]) if i > 0 else 0.0
        up = float(c_hi[j - 1]) if j > 0 else 0.0
        return PLD(self.h, self.lower + i, kept, min(1.0, self.inf_mass + up))

    # -- reading -----------------------------------------------------------------------------

    def _suffix(self):
        """``S1[k] = inf + Σ_{i ≥ k} p_i`` and ``S2[k] = Σ_{i ≥ k} p_i e^{−L_i}`` (``k = 0..n``)."""
        p = self.probs
        L = self.losses
        s1 = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]]) + self.inf_mass
        s2 = np.concatenate([np.cumsum((p * np.exp(-L))[::-1])[::-1], [0.0]])
        return L, s1, s2

    def delta(self, epsilon: float) -> float:
        """δ(ε) = Σ_{L > ε} p_L (1 − e^{ε − L}) + inf_mass."""
        eps = float(epsilon)
        L = self.losses
        m = L > eps
        return float(self.inf_mass + np.dot(-np.expm1(eps - L[m]), self.probs[m]))

    def epsilon(self, delta: float) -> float:
        """The smallest ε ≥ 0 with δ(ε) ≤ ``delta`` (``inf`` if even ε → ∞ leaves more than ``delta``)."""
        dlt = float(delta)
        if self.inf_mass > dlt:
            return math.inf
        L, s1, s2 = self._suffix()
        # δ at the knots: δ(L_k) = S1[k+1] − e^{L_k} S2[k+1]  (the product formed in logs: no overflow)
        with np.errstate(divide="ignore"):
            log_s2 = np.log(np.maximum(s2[1:], 0.0))
        d_knots = s1[1:] - np.exp(np.minimum(L + log_s2, 700.0))
        if self.delta(0.0) <= dlt:
            return 0.0
        ok = np.nonzero(d_knots <= dlt)[0]
        if ok.size == 0:  # cannot happen: δ(L_max) = inf_mass <= delta
            return math.inf
        k = int(ok[0])  # first knot with δ(L_k) ≤ δ; the answer lies in (L_{k−1}, L_k]
        num = s1[k] - dlt
        if s2[k] <= 0 or num <= 0:
            return max(0.0, float(L[k]))
        eps = math.log(num / s2[k])
        lo = L[k - 1] if k > 0 else -math.inf
        eps = min(max(eps, lo), float(L[k]))
        return max(0.0, eps)


def _chernoff_window(p: np.ndarray, count: int, tail: float) -> tuple[int, int, float]:
    """Index window ``[lo, hi]`` of the ``count``-fold convolution of ``p`` outside which at most
    ``tail`` of the mass lies (Chernoff bounds at a few orders), and the bound actually used."""
    n = p.size
    full_hi = (n - 1) * count
    lo, hi = 0, full_hi
    pos = p > 0
    if not pos.any():
        return lo, hi, 0.0
    idx = np.arange(n)[pos]
    logp = np.log(p[pos])
    log_bound = math.log(2.0 / tail)
    for order in np.concatenate([np.arange(-20, 0), np.arange(1, 21)]) / n:
        log_mgf = float(logsumexp(idx * order + logp))
        b = (count * log_mgf + log_bound) / order
        if not math.isfinite(b):
            continue
        if order > 0:
            hi = min(hi, math.ceil(b))
        else:
            lo = max(lo, math.floor(b))
    if hi <= lo:
        return 0, full_hi, 0.0
    used = (tail if hi < full_hi else 0.0) + (tail if lo > 0 else 0.0)
    return lo, hi, used


# ----------------------------------------------------------------------------------------------
# the Gaussian mechanism
# ----------------------------------------------------------------------------------------------


def _norm_interval(a, b):
    """``Φ(b) − Φ(a)`` for arrays ``a ≤ b``, accurate in both tails."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    upper = a > 0
    return np.where(upper, ndtr(-a) - ndtr(-b), ndtr(b) - ndtr(a))


def gaussian_delta(mu: float, epsilon: float) -> float:
    """Exact δ(ε) of the Gaussian mechanism with ``μ = Δ/σ`` (Balle & Wang 2018, Theorem 8)."""
    mu = float(mu)
    eps = float(epsilon)
    if mu == 0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    a = mu / 2 - eps / mu
    b = -mu / 2 - eps / mu
    return max(0.0, float(ndtr(a) - math.exp(eps + float(log_ndtr(b)))))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact ε(δ) of the Gaussian mechanism with ``μ = Δ/σ`` — the smallest ε ≥ 0 with δ(ε) ≤ δ
    (Brent on the decreasing :func:`gaussian_delta`)."""
    mu = float(mu)
    dlt = float(delta)
    if mu == 0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if gaussian_delta(mu, 0.0) <= dlt:
        return 0.0
    hi = max(1.0, mu * mu / 2 + mu)
    while gaussian_delta(mu, hi) > dlt:
        hi *= 2.0
    from scipy.optimize import brentq  # deferred: a small non-private learn never loads scipy.optimize (start-up)

    return brentq(lambda e: gaussian_delta(mu, e) - dlt, 0.0, hi, xtol=1e-15, rtol=4 * 2.0**-52, maxiter=500)


def gaussian_pld(mu: float, h: float = DEFAULT_DISCRETIZATION) -> PLD:
    """Pessimistic discrete PLD of the Gaussian mechanism with ``μ = Δ/σ`` (connect the dots)."""
    mu = float(mu)
    if mu == 0:
        return PLD.identity(h)
    if math.isinf(mu):
        return PLD(h, 0, np.zeros(1), 1.0)
    m = mu * mu / 2.0  # the loss under P is N(m, μ²), under Q N(−m, μ²)
    lo = math.floor((m - Z_TAIL * mu) / h)
    hi = math.ceil((m + Z_TAIL * mu) / h)
    knots = np.arange(lo, hi + 1) * h
    u, v = knots[:-1], knots[1:]
    A = _norm_interval((u - m) / mu, (v - m) / mu)  # P-mass of each cell
    B = _norm_interval((u + m) / mu, (v + m) / mu)  # Q-mass = E_P[e^{−L}] over the cell
    # split each cell's mass between its knots keeping P- and Q-mass: b e^{-v} + (A − b) e^{-u} = B
    b = (A - B * np.exp(u)) / (-np.expm1(-h))
    b = np.clip(b, 0.0, A)
    probs = np.zeros(knots.size)
    probs[:-1] += A - b
    probs[1:] += b
    probs[0] += _norm_interval(-np.inf, (knots[0] - m) / mu)  # below the first knot: onto it
    inf = float(_norm_interval((knots[-1] - m) / mu, np.inf))  # above the last: to +∞
    return PLD(h, lo, probs, inf)


# ----------------------------------------------------------------------------------------------
# the bounded-range (exponential) mechanism
# ----------------------------------------------------------------------------------------------


def bounded_range_delta(eps0: float, epsilon):
    """δ(ε) of the pair that dominates every ``ε₀``-bounded-range pair (see the module docstring)."""
    e0 = float(eps0)
    eps = np.asarray(epsilon, dtype=float)
    if e0 == 0:
        return np.maximum(0.0, -np.expm1(eps)) if eps.ndim else float(max(0.0, -math.expm1(float(eps))))

    def pos(x):  # x ≥ 0
        x = np.minimum(x, e0)
        return (np.exp(e0 / 2) - np.exp(x / 2)) ** 2 / np.expm1(e0)

    out = np.where(eps >= 0, pos(np.abs(eps)), -np.expm1(eps) + np.exp(eps) * pos(np.abs(eps)))
    return out if out.ndim else float(out)


def bounded_range_epsilon0(sensitivity: float, scale: float) -> float:
    """Range ``ε₀ = 2Δ_S/b`` of the Gumbel-max selection (scores not monotone: factor 2)."""
    if sensitivity == 0:
        return 0.0
    if scale == 0:
        return math.inf
    return 2.0 * float(sensitivity) / float(scale)


def bounded_range_pld(eps0: float, h: float = DEFAULT_DISCRETIZATION) -> PLD:
    """Pessimistic discrete PLD of one ``ε₀``-bounded-range selection (connect the dots on its curve)."""
    e0 = float(eps0)
    if e0 == 0:
        return PLD.identity(h)
    if math.isinf(e0):
        return PLD(h, 0, np.zeros(1), 1.0)
    lo = math.floor(-e0 / h) - 1
    hi = math.ceil(e0 / h)
    knots = np.arange(lo, hi + 1) * h
    d = np.minimum.accumulate(np.asarray(bounded_range_delta(e0, knots), dtype=float))
    dd = np.diff(d)
    em1 = math.expm1(h)
    probs = np.empty(knots.size)
    probs[0] = 1.0 - d[0] + dd[0] / em1
    probs[1:-1] = (dd[1:] - dd[:-1] * math.exp(h)) / em1
    probs[-1] = dd[-1] / math.expm1(-h)
    probs = np.maximum(probs, 0.0)
    return PLD(h, lo, probs, float(d[-1]))


# ----------------------------------------------------------------------------------------------
# ledger events
# ----------------------------------------------------------------------------------------------


def _signature(events: Iterable) -> tuple[float, tuple]:
    """``(μ², ((ε₀, count), ...))``: the Gaussian events' summed ``μ² = 2ρ`` and the bounded-range
    events grouped by ``ε₀``. Raises ValueError on an unknown mechanism."""
    mu2 = 0.0
    br: dict[float, int] = {}
    for ev in events:
        if ev.sensitivity == 0:
            continue
        if ev.mechanism == GAUSSIAN:
            if ev.noise_scale == 0:
                mu2 = math.inf
            else:
                ratio = ev.sensitivity / ev.noise_scale
                mu2 = mu2 + ev.count * ratio * ratio  # overflows to inf (a power would raise)
        elif ev.mechanism == EXPONENTIAL:
            e0 = bounded_range_epsilon0(ev.sensitivity, ev.noise_scale)
            br[e0] = br.get(e0, 0) + ev.count
        else:
            raise ValueError(f"no privacy-loss distribution for mechanism {ev.mechanism!r}")
    return mu2, tuple(sorted(br.items()))


#: The most grid cells the composed loss distribution of the PLD accountant
#: (:class:`bnsl_cli.privacy.accountant.PLDAccountant`) may span. Losses
#: lie near ``μ²/2`` (about ρ), so the span grows with the budget: beyond this (ε in the hundreds at
#: the default spacing) the PLD would take gigabytes and its ``e^loss`` overflows; the accountant then
#: reports the zCDP bound, an upper bound for the same releases.
MAX_CELLS = 2**23
#: Losses beyond this are not representable as ``e^loss`` in float64.
MAX_LOSS = 700.0


def grid_fits(events, h: float) -> bool:
    """Whether the composed losses of ``events`` fit a grid of spacing ``h`` (:data:`MAX_CELLS`,
    :data:`MAX_LOSS`); an infinite spend needs no grid."""
    mu2, br = _signature(events)
    if math.isinf(mu2) or any(math.isinf(e0) for e0, _ in br):
        return True  # infinite spend: epsilon_of_events says so without a grid
    mu = math.sqrt(mu2)
    top = (mu2 / 2.0 + Z_TAIL * mu if mu2 > 0 else 0.0) + sum(count * e0 for e0, count in br)
    return top <= MAX_LOSS and top / float(h) <= MAX_CELLS


@lru_cache(maxsize=256)
def _pld_of_signature(mu2: float, br: tuple, h: float) -> PLD:
    out = gaussian_pld(math.sqrt(mu2), h) if mu2 > 0 else PLD.identity(h)
    for e0, count in br:
        out = out.compose(bounded_range_pld(e0, h).self_compose(count))
    return out


def events_pld(events: Iterable, h: float = DEFAULT_DISCRETIZATION, group_gaussians: bool = True) -> PLD:
    """The pessimistic PLD of composing ``events`` (ledger :class:`PrivacyEvent` s of one participant).

    ``group_gaussians=False`` composes every Gaussian event's own PLD (self-composed ``count`` times)
    by FFT instead of the exact grouping into one Gaussian — slower and looser; for tests."""
    events = list(events)
    if group_gaussians:
        mu2, br = _signature(events)
        return _pld_of_signature(mu2, br, float(h))
    out = PLD.identity(h)
    for ev in events:
        if ev.sensitivity == 0:
            continue
        if ev.mechanism == GAUSSIAN:
            mu = math.inf if ev.noise_scale == 0 else ev.sensitivity / ev.noise_scale
            one = gaussian_pld(mu, h)
        else:
            one = bounded_range_pld(bounded_range_epsilon0(ev.sensitivity, ev.noise_scale), h)
        out = out.compose(one.self_compose(ev.count))
    return out


def epsilon_of_events(events: Iterable, delta: float, h: float = DEFAULT_DISCRETIZATION) -> float:
    """ε at ``delta`` of the composition of ``events`` (an upper bound; see the module docstring)."""
    events = list(events)
    mu2, br = _signature(events)
    if math.isinf(mu2) or any(math.isinf(e0) for e0, _ in br):
        return math.inf
    if mu2 == 0 and not br:
        return 0.0
    return _pld_of_signature(mu2, br, float(h)).epsilon(delta)


def delta_of_events(events: Iterable, epsilon: float, h: float = DEFAULT_DISCRETIZATION) -> float:
    """δ at ``epsilon`` of the composition of ``events`` (an upper bound)."""
    events = list(events)
    mu2, br = _signature(events)
    if math.isinf(mu2) or any(math.isinf(e0) for e0, _ in br):
        return 1.0
    if mu2 == 0 and not br:
        return 0.0
    return _pld_of_signature(mu2, br, float(h)).delta(epsilon)
