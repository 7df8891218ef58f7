"""The coordinator (server): consensus step, duals and penalties, from messages only.

This module never sees participant rows: it imports only the message types and numerics, and its
inputs are encoded messages. ``W[i, j]`` is the weight of the edge ``i → j``.

Server problem of round k (Fed-Sparse-BNSL, no ℓ₁ on W):

    W ← argmin_W  α h(W) + ρ₁/2 h(W)² + Σ_p [⟨β_p, B_p − W⟩ + ρ₂/2 ‖B_p − W‖²_F]

solved by L-BFGS (:func:`bnsl_cli.numerics.lbfgs`) warm-started at the previous W, restricted to
the entries that are non-zero in some B_p or β_p (elsewhere the minimiser is 0), with h and ∇h
computed on the strongly connected components of that support only. ``acyclicity`` picks h:
``"expm"`` (NOTEARS, tr exp(W∘W) − d) or ``"logdet"`` (DAGMA, −log det(sI − W∘W) + d log s, +inf
outside its domain; the line search backs off). Fed-BNSL adds ``λ‖W‖₁`` (SciPy's L-BFGS-B on
W⁺ − W⁻). Every solve that stops without meeting a tolerance is recorded in ``solver_issues``.
Then ``α ← α + ρ₁ h(W)``, ``β_p ← β_p + ρ₂ (B_p − W)``, ``ρ₁ ← g₁ρ₁``, ``ρ₂ ← g₂ρ₂`` (capped).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from bnsl_cli.federated.messages import (
    ConsensusBroadcast,
    DenseUpdate,
    SparseUpdate,
    SupportState,
)
from bnsl_cli.federated.methods.admm.sequence import next_penalty
from bnsl_cli.numerics import ACYCLICITY, BlockAcyclicity, acyclicity_of, lbfgs

_ALL_SITES = 0xFFFFFFFF  # the sender of a securely summed reply (bnsl_cli.federated.secure_sum.ALL_SITES)

__all__ = ["PenaltySchedule", "Coordinator"]


@dataclass(frozen=True)
class PenaltySchedule:
    """ρ₁ (acyclicity) and ρ₂ (consensus) start values, growth factors and cap."""

    rho1: float = 1e-3
    rho2: float = 1e-3
    growth1: float = 1.75
    growth2: float = 1.25
    cap: float = 1e16


class Coordinator:
    """ADMM server for ``n_participants`` participants over ``d`` variables.

    ``l1`` is the ℓ₁ weight on W (0 for Fed-Sparse-BNSL, λ for Fed-BNSL); ``dense`` makes the
    broadcasts dense (Fed-BNSL). ``acyclicity`` is ``"expm"`` or ``"logdet"`` (with ``logdet_s``,
    the ``s`` of DAGMA's ``−log det(sI − W∘W) + d log s``). ``ftol`` is the W-step's relative
    tolerance, reached from ``ftol_start`` by the factor ``ftol_decay`` per round (see
    :meth:`round_ftol`), ``maxiter`` its iteration cap. ``screen`` (default ``snap / 5``; 0 turns it off):
    an entry that is 0 in the current W and whose target ``c_ij = mean_p (B_p + β_p / ρ₂)_ij`` has
    ``|c_ij| < screen`` is held at 0 in the W-step. Its exact optimum lies between 0 and ``c_ij``
    (h only grows with ``|W_ij|``), below the snap, so the snap would zero it anyway; holding it at
    0 changes the other entries only through its ``O(c_ij²)`` share of h, and it removes the stale
    dual entries from the strongly connected blocks on which h is evaluated. When the screened
    support still has a cyclic block of ``wide_block`` nodes or more (large d, early rounds: one
    dense LU and inverse of that block per evaluation of h), the screen level for that round is
    ``wide_screen`` (default ``snap``): the same argument holds up to the snap itself (not with
    ``screen=0``: a screen turned off stays off).

    After each :meth:`step`: ``lbfgs_evals`` counts the evaluations of h so far, ``solver_issues``
    lists the W-step solves that stopped without meeting a tolerance (dicts with ``round``,
    ``message``, ``nit``).
    """

    def __init__(
        self,
        d: int,
        n_participants: int,
        schedule: PenaltySchedule = PenaltySchedule(),
        *,
        l1: float = 0.0,
        dense: bool = False,
        ftol: float = 1e-6,
        snap: float = 0.0,
        acyclicity: str = "expm",
        logdet_s: float = 1.0,
        maxiter: int = 500,
        screen: float | None = None,
        ftol_start: float = 1e-4,
        ftol_decay: float = 0.8,
        wide_block: int = 200,
        wide_screen: float | None = None,
    ):
        if acyclicity not in ACYCLICITY:
            raise ValueError(f"acyclicity must be one of {', '.join(ACYCLICITY)}, not {acyclicity!r}")
        if not logdet_s > 0:
            raise ValueError(f"logdet_s must be positive, not {logdet_s!r}")
        self.d = d
        self.P = n_participants
        self.schedule = schedule
        self.l1 = float(l1)
        self.dense = dense
        self.ftol = ftol
        self.snap = float(snap)
        self.acyclicity = acyclicity
        self.logdet_s = float(logdet_s)
        self.maxiter = int(maxiter)
        self.ftol_start = float(ftol_start)
        self.ftol_decay = float(ftol_decay)
        self.screen = float(self.snap / 5 if screen is None else screen)
        self.wide_block = int(wide_block)
        self.wide_screen = float(self.snap if wide_screen is None else wide_screen)
        self._h = acyclicity_of(acyclicity, self.logdet_s)
        self.solver_issues: list[dict] = []
        self.screened = 0  # W-step variables held at 0 by the screen, summed over the rounds
        self.wide_rounds = 0  # rounds whose W-step used the wide screen
        self.W = np.zeros((d, d))
        self.B = np.zeros((n_participants, d, d))
        self.beta = np.zeros((n_participants, d, d))
        self.alpha = 0.0
        self.rho1 = schedule.rho1
        self.rho2 = schedule.rho2
        self.round = 0
        self.h = 0.0
        self.objectives: dict[int, float] = {}
        self.server_s = 0.0
        self.lbfgs_evals = 0  # evaluations of the W-step objective (= evaluations of h)
        self.link = SupportState()  # encoder state of the broadcast channel (same for every participant)
        #: prior knowledge (d × d bool masks, or None): forbidden entries of W are fixed at 0,
        #: required ones are always in the W-step, never snapped and carry no ℓ₁ penalty
        self.forbidden: np.ndarray | None = None
        self.required: np.ndarray | None = None

    # -- messages ------------------------------------------------------------------------
    def broadcast(self, stop: bool = False) -> bytes:
        """The encoded consensus message of the next round (same bytes for every participant)."""
        msg = ConsensusBroadcast(self.round + 1, self.d, self.W, self.rho2, stop, self.dense)
        data = msg.encode(None if self.dense else self.link)
        if not self.dense:
            self.link.advance(self.W)
        return data

    def receive(self, data: bytes) -> None:
        """Apply an encoded participant update to the coordinator's copy of its ``B_p``.

        A dense update whose sender is :data:`~bnsl_cli.federated.secure_sum.ALL_SITES` is a part of
        the sum ``Σ_p B_p`` (secure aggregation: the fleet hands over the sum and zeros, never one
        site's matrix): the parts of a round are added up and every ``B_p`` is set to the mean
        ``Σ_p B_p / P``. The W-step and the mirrored ``Σ_p β_p`` need only the sum; the consensus gap
        becomes that of the mean (a lower bound of ``max_p |B_p − W|``)."""
        if self.dense:
            msg = DenseUpdate.decode(data)
            if msg.sender == _ALL_SITES:
                self._receive_part(msg)
                return
            self.B[msg.sender] = msg.B
        else:
            msg = SparseUpdate.decode(data)
            msg.entries.apply_to(self.B[msg.sender])
        if msg.objective is not None:
            self.objectives[msg.sender] = msg.objective

    def _receive_part(self, msg: DenseUpdate) -> None:
        """One part of a securely summed dense update (see :meth:`receive`)."""
        if getattr(self, "_part_round", None) != msg.round:
            self._part_round = msg.round
            self._part_sum = np.zeros((self.d, self.d))
            self._part_obj = 0.0
        self._part_sum = self._part_sum + msg.B
        self.B[:] = (self._part_sum / self.P)[None]
        if msg.objective is not None:
            self._part_obj += msg.objective
            self.objectives = {p: (self._part_obj if p == 0 else 0.0) for p in range(self.P)}

    # -- the server step -----------------------------------------------------------------
    def step(self) -> dict:
        """W-step, dual updates and penalty growth. Returns the round's diagnostics."""
        t0 = time.perf_counter()
        self.round += 1
        if self.l1 > 0:
            W = self._w_step_l1()
        else:
            W = self._w_step_support()
        if self.snap > 0:
            if self.required is None:
                W[np.abs(W) < self.snap] = 0.0
            else:
                W[(np.abs(W) < self.snap) & ~self.required] = 0.0
        if self.forbidden is not None:
            W[self.forbidden] = 0.0
        nz = np.flatnonzero(W)
        h = BlockAcyclicity(self.d, nz, self.acyclicity, self.logdet_s)(W.ravel()[nz])[0]
        if not np.isfinite(h):
            h = float("inf")
        rho1_used, rho2_used = self.rho1, self.rho2
        self.alpha += self.rho1 * h if np.isfinite(h) else 0.0
        self.beta += rho2_used * (self.B - W[None])
        self.W = W
        self.h = h
        gap = float(np.max(np.abs(self.B - W[None]))) if self.P else 0.0
        cap = self.schedule.cap
        self.rho1 = next_penalty(self.rho1, self.schedule.growth1, cap)
        self.rho2 = next_penalty(self.rho2, self.schedule.growth2, cap)
        self.server_s += time.perf_counter() - t0
        obj = sum(self.objectives.values()) if len(self.objectives) == self.P else None
        return {
            "round": self.round,
            "h": h,
            "gap": gap,
            "objective": obj,
            "rho1": rho1_used,
            "rho2": rho2_used,
            "alpha": self.alpha,
        }

    def round_ftol(self) -> float:
        """The W-step's relative tolerance in the current round: ``max(ftol, ftol_start · ftol_decay^(k−1))``
        in round ``k`` (inexact early solves whose errors shrink geometrically, so their sum stays
        finite; ``ftol_start ≤ ftol`` turns the schedule off)."""
        if self.ftol_start <= self.ftol:
            return self.ftol
        return max(self.ftol, self.ftol_start * self.ftol_decay ** max(self.round - 1, 0))

    def _issue(self, message: str, nit: int) -> None:
        self.solver_issues.append({"round": self.round, "message": message, "nit": int(nit)})

    def _w_step_support(self) -> np.ndarray:
        d, P = self.d, self.P
        support = (self.B != 0).any(axis=0) | (self.beta != 0).any(axis=0)
        if self.required is not None:
            support |= self.required
        if self.forbidden is not None:
            support &= ~self.forbidden
        np.fill_diagonal(support, False)
        idx = np.flatnonzero(support.ravel())
        if idx.size and self.screen > 0:
            Bs = self.B.reshape(P, -1)[:, idx]
            betas = self.beta.reshape(P, -1)[:, idx]
            c = Bs.mean(axis=0) + betas.mean(axis=0) / self.rho2
            absc = np.abs(c)
            in_w = self.W.ravel()[idx] != 0
            keep = (absc >= self.screen) | in_w
            if self.required is not None:
                keep |= self.required.ravel()[idx]
            if 0 < self.screen < self.wide_screen and d >= self.wide_block:
                blocks = BlockAcyclicity(d, idx[keep], self.acyclicity, self.logdet_s).blocks
                if blocks and blocks[0] >= self.wide_block:
                    keep = (absc >= self.wide_screen) | in_w
                    self.wide_rounds += 1
            self.screened += int(idx.size - np.count_nonzero(keep))
            idx = idx[keep]
        if idx.size == 0:
            return np.zeros((d, d))
        Bs = self.B.reshape(P, -1)[:, idx]
        betas = self.beta.reshape(P, -1)[:, idx]
        beta_sum = betas.sum(axis=0)
        const = float(np.sum(betas * Bs))
        alpha, rho1, rho2 = self.alpha, self.rho1, self.rho2
        # h and ∇h only involve the strongly connected components of the support graph
        h_of = BlockAcyclicity(d, idx, self.acyclicity, self.logdet_s)

        def fun(w):
            h, gh = h_of(w)
            if not np.isfinite(h):
                return np.inf, np.zeros_like(w)
            diff = Bs - w[None, :]
            with np.errstate(over="ignore", invalid="ignore"):  # ρ₁h² may overflow: +inf, the step backs off
                obj = alpha * h + 0.5 * rho1 * h * h + const - float(beta_sum @ w) + 0.5 * rho2 * float(np.sum(diff * diff))
                grad = (alpha + rho1 * h) * gh - beta_sum - rho2 * diff.sum(axis=0)
            if not np.isfinite(obj):
                return np.inf, np.zeros_like(w)
            return obj, grad

        w0 = self.W.ravel()[idx].copy()
        sol = lbfgs(fun, w0, ftol=self.round_ftol(), gtol=1e-10, maxiter=self.maxiter)
        self.lbfgs_evals += int(sol.nfev)
        if not sol.success:
            self._issue(sol.message, sol.nit)
        W = np.zeros(d * d)
        W[idx] = sol.x
        return W.reshape(d, d)

    def _w_step_l1(self) -> np.ndarray:
        """Fed-BNSL's W-step from the sums only: with ``B̄ = Σ_p B_p / P`` and ``Σ_p β_p``,
        ``Σ_p [⟨β_p, B_p − W⟩ + ρ₂/2 ‖B_p − W‖²] = −⟨Σβ, W − B̄⟩ + ρ₂P/2 ‖W − B̄‖² + const`` (the
        constant, the participants' dispersion about ``B̄``, does not depend on W and is left out),
        so a securely summed run solves the same problem."""
        d, P = self.d, self.P
        beta_sum = self.beta.sum(axis=0)
        B_mean = self.B.sum(axis=0) / P
        alpha, rho1, rho2, lam = self.alpha, self.rho1, self.rho2, self.l1
        off = ~np.eye(d, dtype=bool)
        # deferred on purpose: only fed-bnsl's W-step needs it (about 0.25 s of every other run's
        # start-up; tests/cli/test_app.py keeps a small fed-sparse learn free of it)
        import scipy.optimize

        # W⁺, W⁻ ≥ 0; the diagonal fixed at 0 (arrays, not a Python list of 2d² pairs)
        if self.forbidden is not None:
            off = off & ~self.forbidden
        bounds = scipy.optimize.Bounds(np.zeros(2 * d * d), np.where(np.tile(off.ravel(), 2), np.inf, 0.0))
        dd = d * d
        lam_vec = None if self.required is None else np.tile(np.where(self.required, 0.0, lam).ravel(), 2)

        func = self._h

        def fun(v):
            W = (v[:dd] - v[dd:]).reshape(d, d)
            h, gh = func(W)
            if not np.isfinite(h):
                return np.inf, np.zeros_like(v)
            diff = W - B_mean
            pen = lam * float(v.sum()) if lam_vec is None else float(lam_vec @ v)
            obj = (
                alpha * h + 0.5 * rho1 * h * h - float(np.sum(beta_sum * diff))
                + 0.5 * rho2 * P * float(np.sum(diff * diff)) + pen
            )
            g = ((alpha + rho1 * h) * gh - beta_sum + rho2 * P * diff).ravel()
            if lam_vec is not None:
                return obj, np.concatenate([g, -g]) + lam_vec
            return obj, np.concatenate([g + lam, -g + lam])

        v0 = np.concatenate([np.maximum(self.W, 0).ravel(), np.maximum(-self.W, 0).ravel()])
        if self.forbidden is not None:
            v0 = np.minimum(v0, bounds.ub)
        sol = scipy.optimize.minimize(fun, v0, jac=True, method="L-BFGS-B", bounds=bounds, options={"ftol": self.ftol, "maxiter": self.maxiter})
        self.lbfgs_evals += int(sol.nfev)
        if not sol.success or not np.isfinite(sol.fun):
            self._issue(str(sol.message), sol.nit)
        return (sol.x[:dd] - sol.x[dd:]).reshape(d, d)
