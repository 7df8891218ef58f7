"""Default settings of the private learners, shared by ``learn --dp`` and ``privacy-budget``."""

from __future__ import annotations

#: Fixed number of ADMM rounds K for which a DP run's budget is calibrated.
DP_ROUNDS = 50
#: Share of the per-step budget spent on the coordinate selection (exponential mechanism).
SELECTION_SHARE = 0.5
#: Share of the total zCDP budget spent on the one-off release of the second moments m_i.
MOMENT_SHARE = 0.05
#: Share of the total zCDP budget spent on the one-off release of the column means (centering).
MEAN_SHARE = 0.05
#: Share of the total zCDP budget spent on the second moments the polish asks for (one release after
#: the rounds; 0 with --no-polish). Measured at d = 20, ε = 10, 10 seeds, several noise draws
#: (CHANGELOG): mean SHD 1.4 / 1.7 / 2.2 with 0.15, 1.7 / 2.0 with 0.3, 2.2 with 0.1; 0.15 takes
#: less from the DP-PGCD steps, which matters on Sachs (ε = 5, 4 noise draws: SHD 24.3 against 27.3 with 0.3).
POLISH_SHARE = 0.15
#: Per-row ℓ₂ clip of that release: each row's standardised products x_a x_b / √(v̂_a v̂_b) over the
#: |Q| requested pairs are clipped to norm κ·√|Q| (their median norm is about √|Q|). κ = POLISH_CLIP.
#: Measured at d = 200, ε = 10, seeds 0/1: SHD 46 / 28 with κ = 1, 38 / 27 and 29 / 32 (two noise
#: draws) with 1.5, 43 / 29 with 2 (CHANGELOG).
POLISH_CLIP = 1.5


#: ℓ₁ weight of DP-Fed-Sparse-BNSL (per participant). Twice the non-private default: noisy updates
#: on randomly selected coordinates need the larger threshold λ/M to stay at zero. Measured at
#: d = 100, ε = 10: mean SHD 17 against 24 with λ = 0.005; at d = 20 equal within noise.
DP_LAMBDA = 0.01


def dp_steps(d: int) -> int:
    """Default number of DP-PGCD steps per round for ``d`` variables: ``max(20, d // 2)``.

    Every step costs budget; at d = 100, ε = 10, T = 50 gave SHD 18 against 17 with T = 100 in
    less than half the time."""
    return max(20, d // 2)


#: A participant's guarantee is weak when ``n_p · δ`` exceeds this: with δ the chance of a total
#: failure per row, about ``n_p · δ`` of a participant's rows are then unprotected in expectation.
WEAK_N_DELTA = 0.01


def default_delta(rows) -> float:
    """δ of a private run that gives none: ``1 / n_min²`` of the smallest participant, and never above
    ``WEAK_N_DELTA / n_max``, the rule the weak-δ warning enforces (so the default never warns):
    ``min(1/n_min², 0.01/n_max)``. With sites of at least 100 rows and equal sizes it is ``1/n²``."""
    rows = [int(r) for r in rows]
    return min(1.0 / float(min(rows)) ** 2, WEAK_N_DELTA / float(max(rows)))

