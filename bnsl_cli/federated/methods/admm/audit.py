"""The ADMM methods' audit cases (:mod:`bnsl_cli.federated.audit`): DP-PGCD's noisy update, its
Gumbel-max selection, one whole step, the polish's second moments and DP-Fed-BNSL's covariance."""

from __future__ import annotations

import math

import numpy as np

from bnsl_cli.federated.audit import (
    GAUSS_MULT,
    GUMBEL_MULT,
    Case,
    ZeroNoise,
    _base,
    _claim,
    _extreme_row,
    _gaussian_case,
    _pair_mu,
    _safe,
    _with_last,
    claims,
    project,
)
from bnsl_cli.federated.methods.admm.dp_site import (
    private_covariance,
    private_polish_moments,
)
from bnsl_cli.privacy.defaults import POLISH_CLIP
from bnsl_cli.privacy.releases import ReleaseKind as K
from bnsl_cli.solvers.dp_pgcd import ClippedGradients, dp_pgcd
from bnsl_cli.stats import upper_triangle


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
