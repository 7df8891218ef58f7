"""fed-suffstats' audit cases (:mod:`bnsl_cli.federated.audit`): its three releases through a real site
of a real private plan, the crafted basis of issue 28 and batches of random extreme messages."""

from __future__ import annotations

from collections import Counter

import numpy as np

from bnsl_cli.federated.audit import (
    FMAX,
    Case,
    OutcomeStatistic,
    ZeroNoise,
    _extreme_row,
    _pair_mu,
    _Picks,
    _share,
    _with_last,
    claims,
    site_outcome,
)
from bnsl_cli.federated.methods.suffstats.site import make_suffstats_site
from bnsl_cli.federated.methods.suffstats.messages import CENTRE_ROUND, BasisBroadcast, CentreRequest, FirstRequest
from bnsl_cli.federated.methods.suffstats import (
    CENTRE_BINS,
    STAGE_Z,
    pair_bins,
    value_bins,
)
from bnsl_cli.privacy.mechanisms import sample_noise
from bnsl_cli.privacy.releases import ReleaseKind as K

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


def _outcome(plan, X: np.ndarray, rng, messages, pid: int = 0):
    """A fresh site (:func:`make_suffstats_site` of ``plan``, participant ``pid``, rows ``X``, noise
    ``rng``) answering ``messages`` (:func:`~bnsl_cli.federated.audit.site_outcome`)."""
    return site_outcome(make_suffstats_site(plan, pid, X, rng), pid, messages)


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
    z0 = _outcome(plan, X0, ZeroNoise(), messages)
    z1 = _outcome(plan, X1, ZeroNoise(), messages)
    finite = z0.kind == z1.kind == "finite reply" and z0.values.size == z1.values.size
    ref, w = (z0.values, z1.values - z0.values) if finite else (None, None)
    ev = None if claim_messages is not None else (z0.event or z1.event)
    if ev is None:
        ev = _outcome(plan, X0, ZeroNoise(), claim_messages or messages).event
    eps, mu = claims([ev])
    std_reply = _share(ev).noise_scale / float(plan.n_total)
    mu_pair = _pair_mu(z0.values, z1.values, np.full(w.size, std_reply)) if finite else None
    stat = OutcomeStatistic(ref, w)
    kinds = (Counter(), Counter())

    def runner(X, k):
        def run() -> float:
            out = _outcome(plan, X, rng, messages)
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


def suffstats_cases(rng, plan) -> list:
    """Fed-suffstats' three releases through a real site of ``plan`` (private, d ≥ 5), each on a
    worst-case pair and with a planted extreme row, and the crafted basis of issue 28."""
    out = []
    for make in (scale_histogram_case, centre_histogram_case, whitened_moments_case):
        out.append(make(rng, plan))
        out.append(make(rng, plan, extreme=True))
    out.append(crafted_basis_case(rng, plan))
    return out
