"""What an exact discrete-Gaussian sampler would cost (issue 20 item 7; docs/privacy.md, "Why no
discrete-Gaussian option"). Not used by bnsl: a measurement aid.

The sampler follows Canonne, Kamath & Steinke (2020): Bernoulli(exp(−γ)) by exact rational comparisons,
a discrete Laplace by rejection, the discrete Gaussian by rejection from the discrete Laplace; every
random bit comes from uniform integers (``secrets.randbelow``, a cryptographically secure source, or a
seeded ``random.Random`` for reproducible tests). It prints the time per draw at several noise scales
(in grid units) and the time of one release of each size bnsl makes (the d(d+1)/2 draws of a moment
matrix at d = 20 and d = 200), next to numpy's floating-point ``standard_normal`` for the same count,
and checks the sample variance against σ².

    python benchmarks/discrete_gaussian_cost.py [--draws 20000] [--seed S]
"""

from __future__ import annotations

import argparse
import random
import secrets
import time
from fractions import Fraction
from math import floor, isqrt

import numpy as np


class IntegerSource:
    """Uniform integers in ``[0, n)``: the operating system's CSPRNG, or a seeded generator."""

    def __init__(self, seed=None):
        self._below = secrets.randbelow if seed is None else random.Random(seed).randrange

    def below(self, n: int) -> int:
        return self._below(n)

    def bernoulli(self, p: Fraction) -> bool:
        return self.below(p.denominator) < p.numerator


def bernoulli_exp(gamma: Fraction, src: IntegerSource) -> bool:
    """True with probability exp(−γ), γ ≥ 0 rational, exactly."""
    while gamma > 1:
        if not bernoulli_exp(Fraction(1), src):
            return False
        gamma -= 1
    k = 1
    while src.bernoulli(gamma / k):
        k += 1
    return k % 2 == 1


def discrete_laplace(t: int, src: IntegerSource) -> int:
    """P(x) ∝ exp(−|x|/t) on the integers (t a positive integer)."""
    while True:
        u = src.below(t)
        if not bernoulli_exp(Fraction(u, t), src):
            continue
        v = 0
        while bernoulli_exp(Fraction(1), src):
            v += 1
        x = u + t * v
        negative = src.below(2) == 1
        if negative and x == 0:
            continue
        return -x if negative else x


def discrete_gaussian(sigma2: Fraction, src: IntegerSource) -> int:
    """P(x) ∝ exp(−x²/(2σ²)) on the integers, σ² rational."""
    t = isqrt(floor(sigma2)) + 1
    while True:
        y = discrete_laplace(t, src)
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if bernoulli_exp(gamma, src):
            return y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=None, help="a seeded source instead of the CSPRNG")
    args = ap.parse_args()
    src = IntegerSource(args.seed)
    print(f"source: {'random.Random(seed)' if args.seed is not None else 'secrets.randbelow (CSPRNG)'}")
    for sigma in (10, 1000, 10**6):
        s2 = Fraction(sigma) ** 2
        n = args.draws if sigma < 10**6 else args.draws // 4
        t0 = time.perf_counter()
        xs = [discrete_gaussian(s2, src) for _ in range(n)]
        dt = time.perf_counter() - t0
        var = float(np.var(np.array(xs, dtype=float)))
        print(f"sigma {sigma:>8g} (grid units): {1e6 * dt / n:8.1f} us/draw over {n} draws; "
              f"sample variance / sigma^2 = {var / sigma**2:.3f}")
    rng = np.random.default_rng(0)
    for d in (20, 200):
        k = d * (d + 1) // 2
        t0 = time.perf_counter()
        for _ in range(k):
            discrete_gaussian(Fraction(1000) ** 2, src)
        exact = time.perf_counter() - t0
        t0 = time.perf_counter()
        rng.standard_normal(k)
        fl = time.perf_counter() - t0
        print(f"moment matrix d = {d:3d} ({k} draws): exact {exact:.3f} s, numpy float {1e3 * fl:.3f} ms")


if __name__ == "__main__":
    main()
