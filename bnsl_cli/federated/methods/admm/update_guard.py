"""The coordinator's check of the ADMM updates (issue 28, "Byzantine sites").

The consensus ``W`` is built from the mean of the sites' ``B_p``, so one site sending absurd (but
finite) updates moves the result as far as it likes. What each site's rows allow depends on the
rounds' state, which the coordinator holds (``W``, ``ρ₂``, each site's ``β_p`` and previous
``B_p``); :class:`UpdateGuard` checks every round's updates against it, before the W-step:

- **The descent bound** (non-private runs, updates in the clear). A site's local step never raises
  its local objective ``F_p(B) = ½ tr((I − B)ᵀ S_p (I − B)) + λ‖B‖₁ + ⟨β_p, B − W⟩ + ρ₂/2 ‖B − W‖²``:
  fed-sparse's PGCD is an exact coordinate descent started from the previous ``B_p``, fed-bnsl's
  update the exact minimiser (λ = 0 locally). The first two terms are ≥ 0, so
  ``⟨β_p, D⟩ + ρ₂/2 ‖D‖² ≤ F_p(B_p^old)`` for ``D = B_p^new − W``, i.e.
  ``‖D‖_F ≤ (‖β_p‖ + √(‖β_p‖² + 2ρ₂ F̄)) / ρ₂`` with ``F̄`` the previous objective with
  ``tr S_p`` in place of ``S_p``'s largest eigenvalue. ``tr S_p`` is bounded by the site's share of the
  pooled variances (:meth:`~bnsl_cli.federated.reply_limits.ReplyLimits.within_moments`). An update
  beyond it cannot come from any rows with those statistics: the run stops naming the site
  (:class:`~bnsl_cli.errors.InvalidReplyError`, exit 6).
- **The robust comparison** (every run with at least 3 sites in the clear, private ones too — DP-PGCD's
  noisy steps are no descent): a site whose update lies more than :data:`OUTLIER_FACTOR` times
  farther from the sites' entrywise median (Frobenius norm) than the other sites' median distance,
  and more than ``OUTLIER_FACTOR · OUTLIER_FLOOR`` times the other sites' median update, is flagged
  (when the others all sent zero and agree there is nothing to compare with: a site with many more
  rows may be the only one past the ℓ₁ threshold); the run goes on and warns once per site at the end
  (:class:`~bnsl_cli.errors.ByzantineWarning`, in the report's warnings), naming it. The comparison
  is scale-free: it reads nothing a site could have corrupted before (not the pooled spreads: one
  poisoned variance share would otherwise weigh the honest sites' small differences up). With two
  sites the median cannot tell the outlier from the honest one.

Under a secure sum fed-bnsl's dense updates arrive as their sum: neither check applies (only the
blanket range of :func:`~bnsl_cli.federated.messages.validate_reply`). fed-sparse's sparse updates are
never summed and are checked as above.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from bnsl_cli.errors import InvalidReplyError

__all__ = ["OUTLIER_FACTOR", "OUTLIER_FLOOR", "UpdateGuard", "descent_radius"]

#: A site is flagged when its distance from the sites' median is more than this many times the
#: median distance of the other sites ...
OUTLIER_FACTOR = 1000.0
#: ... and more than ``OUTLIER_FACTOR`` times this fraction of the other sites' median update: honest
#: updates agreeing closely do not make a small difference look large (flagged: more than 100 times the
#: size of a typical update away from the median).
OUTLIER_FLOOR = 0.1
#: Relative slack of the descent bound for floating-point rounding.
_SLACK = 1e-6


def descent_radius(B_old: np.ndarray, W: np.ndarray, beta: np.ndarray, rho2: float, lam: float, trace: float) -> float:
    """The largest ``‖B_new − W‖_F`` a local step from ``B_old`` can reach without raising the local
    objective (see the module docstring), with ``trace`` a bound on ``tr S_p``."""
    D = B_old - W
    d = B_old.shape[0]
    I_minus = float(np.sum(B_old * B_old) - 2.0 * np.trace(B_old) + d)  # ‖I − B_old‖²_F
    F = 0.5 * trace * I_minus + lam * float(np.abs(B_old).sum()) + float(np.vdot(beta, D)) + 0.5 * rho2 * float(np.vdot(D, D))
    nb = float(np.linalg.norm(beta))
    return (nb + float(np.sqrt(max(nb * nb + 2.0 * rho2 * F, 0.0)))) / rho2


class UpdateGuard:
    """The checks of :mod:`bnsl_cli.federated.methods.admm.update_guard` for ``P`` sites over ``d`` variables.

    ``within(index)``: per column a bound on site ``index``'s own centred second moments over ``n``
    (its ``S_p``'s diagonal; ``None``: no descent bound, e.g. a private run); ``lam``: the ℓ₁ weight of
    the sites' local objective (0 for fed-bnsl). Call :meth:`before` with the coordinator before the
    round's replies are received, :meth:`after` once they are; :meth:`warnings` at the end."""

    def __init__(self, P: int, d: int, *, lam: float = 0.0, within: Optional[Callable] = None):
        self.P, self.d = int(P), int(d)
        self.lam = float(lam)
        self.traces = None
        if within is not None:
            got = [within(p) for p in range(self.P)]
            if all(g is not None for g in got):
                self.traces = [float(np.sum(g)) for g in got]
        self._radius: Optional[list] = None
        self.rounds = 0
        #: per flagged site: [first round, its distance, the others', how many rounds]
        self.flagged: dict[int, list] = {}

    def before(self, coord) -> None:
        """Note each site's descent radius for the round about to be exchanged (the coordinator's
        ``W``, ``ρ₂``, ``β_p`` and ``B_p`` before the replies)."""
        if self.traces is None:
            return
        self._radius = [
            descent_radius(coord.B[p], coord.W, coord.beta[p], coord.rho2, self.lam, self.traces[p])
            for p in range(self.P)
        ]

    def after(self, coord) -> None:
        """Check the round's updates (``coord.B`` after the replies, before the W-step): the descent
        bound stops the run; the robust comparison flags."""
        rnd = coord.round + 1
        self.rounds += 1
        if self._radius is not None:
            for p in range(self.P):
                dist = float(np.linalg.norm(coord.B[p] - coord.W))
                r = self._radius[p]
                if dist > r * (1.0 + _SLACK) + 1e-12:
                    raise InvalidReplyError(
                        f"participant {p + 1} sent an update in round {rnd} with ‖B_p − W‖ = {dist:.3g}, more than its "
                        f"rows allow: at most {r:.3g} (a local step never raises its local objective, whose second "
                        "moments are bounded by its share of the pooled variances); the run stopped"
                    )
            self._radius = None
        if self.P < 3:
            return
        B = np.asarray(coord.B, dtype=float)
        diff = B - np.median(B, axis=0)[None]
        dev = np.sqrt(np.einsum("pij,pij->p", diff, diff))
        size = np.sqrt(np.einsum("pij,pij->p", B, B))
        for p in range(self.P):
            others = float(np.median(np.delete(dev, p)))
            scale = max(others, OUTLIER_FLOOR * float(np.median(np.delete(size, p))))
            if scale > 0 and dev[p] > OUTLIER_FACTOR * scale:
                if p in self.flagged:
                    self.flagged[p][3] += 1
                else:
                    self.flagged[p] = [rnd, float(dev[p]), float(others), 1]

    def warnings(self) -> list[str]:
        """One line per flagged site (none when nothing was flagged)."""
        out = []
        for p in sorted(self.flagged):
            first, dev, others, count = self.flagged[p]
            out.append(
                f"participant {p + 1}'s updates were far outside the other sites' in {count} of {self.rounds} rounds "
                f"(first in round {first}: {dev:.3g} from the sites' median, the others {others:.3g}); the consensus "
                "averages the updates, so that site can move the graph beyond what its rows allow — check it, or "
                "rerun without it"
            )
        return out
