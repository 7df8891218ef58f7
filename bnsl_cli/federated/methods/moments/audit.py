"""fed-moments' audit case (:mod:`bnsl_cli.federated.audit`): the moment matrix."""

from __future__ import annotations

import math

import numpy as np

from bnsl_cli.federated.audit import GAUSS_MULT, Case, _base, _gaussian_case, _with_last
from bnsl_cli.federated.methods.moments import private_moment_matrix
from bnsl_cli.privacy.releases import ReleaseKind as K
from bnsl_cli.stats import upper_triangle


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
