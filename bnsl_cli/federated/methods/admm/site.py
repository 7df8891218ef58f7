"""A participant: owns its rows, answers the coordinator's messages with its local update.

The rows never leave this object; only encoded messages do. ``B[i, j]`` is the edge ``i → j``.
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from bnsl_cli.federated.messages import (
    ConsensusBroadcast,
    DenseUpdate,
    GramReply,
    GramRequest,
    SparseUpdate,
    SupportState,
    message_kind,
    read_header,
)
from bnsl_cli.federated.methods.admm.local_step import sparse_step
from bnsl_cli.federated.methods.admm.sequence import next_penalty
from bnsl_cli.federated.site_sequence import refuse_unsafe
from bnsl_cli.solvers.pgcd import local_objective, times_sparse

__all__ = [
    "Participant",
    "SparseParticipant",
    "DenseParticipant",
    "WEIGHT_MAX",
    "RHO2_RANGE",
    "consensus_problem",
    "gram_request_problem",
]

#: A private participant answers a consensus broadcast only when every entry of ``W`` is at most this
#: in magnitude and ``ρ₂`` lies in :data:`RHO2_RANGE` (and is the plan's schedule's value for the
#: round): with its own ``B_p`` held to the same bound (:data:`bnsl_cli.solvers.dp_pgcd.STATE_MAX`),
#: every value DP-PGCD forms from its rows is finite. Honest weights are edge weights in data units,
#: honest ``ρ₂`` at most ``--rho-max`` (10¹⁶ by default).
WEIGHT_MAX = 2.0**64
RHO2_RANGE = (2.0**-64, 2.0**64)


def consensus_problem(msg: ConsensusBroadcast, d: int, rho2_due: Optional[float], private: bool) -> Optional[str]:
    """Why a participant with ``d`` columns must not use the consensus broadcast ``msg`` (``None``: it
    may), from the message alone: ``d`` matches, ``W`` and ``ρ₂`` are finite, ``ρ₂ > 0``; with
    ``rho2_due`` (the plan's schedule) ``ρ₂`` is exactly that value; a private participant also needs
    ``|W| ≤`` :data:`WEIGHT_MAX` and ``ρ₂`` in :data:`RHO2_RANGE`."""
    if msg.d != d or msg.W.shape != (d, d):
        return f"a consensus broadcast for d = {msg.d}, this participant has {d} columns"
    if not (np.all(np.isfinite(msg.W)) and np.isfinite(msg.rho2) and msg.rho2 > 0):
        return "a consensus broadcast with a weight or ρ₂ that is not a finite (positive) number"
    if rho2_due is not None and msg.rho2 != rho2_due:
        return f"a consensus broadcast with ρ₂ = {msg.rho2!r}; the plan's schedule gives {rho2_due!r} for round {msg.round}"
    if private:
        big = float(np.max(np.abs(msg.W), initial=0.0))
        if big > WEIGHT_MAX:
            return f"a consensus broadcast with a weight of {big:.3g} (at most 2^64 = {WEIGHT_MAX:.3g} is accepted)"
        if not RHO2_RANGE[0] <= msg.rho2 <= RHO2_RANGE[1]:
            return f"a consensus broadcast with ρ₂ = {msg.rho2:.3g}, outside [2^-64, 2^64]"
    return None


def gram_request_problem(req: GramRequest, d: int) -> Optional[str]:
    """Why a participant with ``d`` columns must not answer the second-moment request ``req``
    (``None``: it may), from the message alone: ``d`` matches, and the pairs are distinct entries
    ``a·d + b`` of the ``d × d`` matrix, at most ``d(d + 1)/2`` of them (a second-moment matrix has no
    more distinct values; the honest coordinator asks for upper-triangle pairs ``a ≤ b``)."""
    if req.d != d:
        return f"a second-moment request for d = {req.d}, this participant has {d} columns"
    p = req.pairs
    if p.size > d * (d + 1) // 2:
        return f"a second-moment request for {p.size} pairs, more than the {d * (d + 1) // 2} a d × d matrix has"
    if p.size and (p.min() < 0 or p.max() >= d * d):
        return "a second-moment request naming a pair outside the d × d matrix"
    if p.size > 1 and not np.all(p[1:] > p[:-1]) and np.unique(p).size != p.size:
        return "a second-moment request naming a pair twice"
    return None


class Participant:
    """Common state of both local solvers: ``S = X_cᵀX_c / n``, ``B_p``, ``β_p`` and the last ``W``.

    ``X`` is centred here with ``centre`` — by default the participant's own column means
    (non-private runs; a private run passes a released or declared centre). ``n_total`` is the
    public total number of rows over all participants. ``report_B``: include ``B_p`` in
    :meth:`summary` (the plan's ``personal``).
    """

    uses_exact_moments = True
    #: the participant checks the ranges of :func:`consensus_problem` (private participants)
    private = False

    def __init__(self, pid: int, X: np.ndarray, n_total: int, lam: float, centre: Optional[np.ndarray] = None,
                 report_B: bool = False, rho2_schedule: Optional[tuple] = None):
        self.pid = int(pid)
        #: ``(ρ₂ of round 1, growth, cap)`` from the plan: every broadcast's ρ₂ must be the schedule's
        self.rho2_schedule = rho2_schedule
        self._rho2_due = None if rho2_schedule is None else float(rho2_schedule[0])
        self.report_B = bool(report_B)
        Xc = X - (X.mean(axis=0, keepdims=True) if centre is None else np.asarray(centre)[None, :])
        self._Xc = Xc
        # private participants never form the exact second-moment matrix
        self._S = (Xc.T @ Xc) / float(n_total) if self.uses_exact_moments else None
        self.n_total = int(n_total)
        self.n_rows = int(X.shape[0])
        self.d = int(X.shape[1])
        self.lam = float(lam)
        self.B = np.zeros((self.d, self.d))
        self.beta = np.zeros((self.d, self.d))
        self.W = np.zeros((self.d, self.d))
        self.rho2: Optional[float] = None
        self.link = SupportState()  # decoder state of the broadcast channel
        self.compute_s = 0.0
        self.steps_taken = 0

    def _receive_consensus(self, msg: ConsensusBroadcast) -> None:
        """Dual update with the previous ρ₂ and the new W, then adopt the new W and ρ₂."""
        refuse_unsafe(f"participant {self.pid + 1}", consensus_problem(msg, self.d, self._rho2_due, self.private))
        if self.rho2_schedule is not None:
            _, growth, cap = self.rho2_schedule
            self._rho2_due = next_penalty(self._rho2_due, float(growth), float(cap))
        if self.rho2 is not None:
            self.beta += self.rho2 * (self.B - msg.W)
        self.W = msg.W
        self.rho2 = msg.rho2

    def handle(self, data: bytes) -> Optional[bytes]:
        """Answer an encoded broadcast with an encoded update (``None`` for a stop message), or a
        second-moment request (the polish, after the rounds) with the requested moments."""
        if message_kind(data) == GramRequest.kind:
            req = GramRequest.decode(data)
            refuse_unsafe(f"participant {self.pid + 1}", gram_request_problem(req, self.d))
            t0 = time.perf_counter()
            values = self._second_moments(req.pairs)
            self.compute_s += time.perf_counter() - t0
            return GramReply(req.round, self.pid, self.d, values).encode()
        head = read_header(data)
        if head.kind != ConsensusBroadcast.kind or head.d != self.d:
            # (before decoding: the header's d sizes the matrix)
            refuse_unsafe(f"participant {self.pid + 1}", f"a kind-{head.kind} message for d = {head.d} where a consensus broadcast for d = {self.d} is due")
        msg = ConsensusBroadcast.decode(data, self.link)
        self._receive_consensus(msg)
        if msg.stop:
            return None
        t0 = time.perf_counter()
        reply = self._local_update(msg.round)
        self.compute_s += time.perf_counter() - t0
        return reply.encode()

    def _second_moments(self, pairs: np.ndarray) -> np.ndarray:
        """This participant's share ``Σ_rows x_a x_b / n`` of the pooled second moments at the flat
        indices ``pairs`` (``a·d + b``), from its centred rows."""
        if pairs.size and (pairs.min() < 0 or pairs.max() >= self.d * self.d):
            raise ValueError("a second-moment request names a pair outside the d × d matrix")
        a, b = pairs // self.d, pairs % self.d
        if self._S is not None:
            return self._S[a, b].copy()
        out = np.empty(pairs.size)
        for s in range(0, pairs.size, 512):
            sl = slice(s, s + 512)
            out[sl] = np.einsum("ij,ij->j", self._Xc[:, a[sl]], self._Xc[:, b[sl]])
        return out / float(self.n_total)

    def events(self) -> list:
        """The privacy events this participant recorded (none for a non-private participant)."""
        return []

    def summary(self) -> dict:
        """What this participant hands back at the end of a run, JSON-able: its ``B_p`` (when asked
        for), timings, and its ledger events as dicts."""
        return {
            "participant": self.pid + 1,
            "rows": self.n_rows,
            "B": self.B.tolist() if self.report_B else None,
            "compute_s": self.compute_s,
            "steps_taken": self.steps_taken,
            "events": [ev.to_dict() for ev in self.events()],
            "notes": dict(getattr(self, "notes", {})),
        }

    def _local_update(self, rnd: int):  # pragma: no cover - abstract
        raise NotImplementedError

    def objective(self) -> float:
        return local_objective(self._S, self.B, self.beta, self.W, self.rho2 or 0.0, self.lam)


class SparseParticipant(Participant):
    """Fed-Sparse-BNSL: PGCD from the previous ``B_p``; sends only the changed coordinates."""

    def __init__(self, pid, X, n_total, lam, steps: int, tol: float = 1e-8, forbidden=None, required=None,
                 report_B: bool = False, rho2_schedule: Optional[tuple] = None):
        super().__init__(pid, X, n_total, lam, report_B=report_B, rho2_schedule=rho2_schedule)
        self.steps = int(steps)
        self.tol = float(tol)
        #: prior knowledge (public, from the plan): PGCD never selects a forbidden coordinate
        self.forbidden = forbidden
        self.required = required
        # ``S B_p`` and the ``B_p`` it belongs to: a round's objective takes it at the new ``B_p`` and the
        # next round's PGCD starts its gradient from the same product (``B_p`` is replaced, never
        # written in place, so the identity of the array tells whether the product is current)
        self._SB = None
        self._SB_of = None

    def _product(self) -> np.ndarray:
        """``times_sparse(S, B_p)``, computed once per ``B_p``."""
        if self._SB_of is not self.B:
            self._SB = times_sparse(self._S, self.B)
            self._SB_of = self.B
        return self._SB

    def _local_update(self, rnd: int) -> SparseUpdate:
        res, entries = sparse_step(self._S, self.B, self.beta, self.W, self.rho2, self.lam, self.steps, self.tol,
                                   self.forbidden, self.required, SB=self._product())
        self.steps_taken += res.steps
        self.B = res.B
        return SparseUpdate(rnd, self.pid, self.d, entries, self.objective())

    def objective(self) -> float:
        return local_objective(self._S, self.B, self.beta, self.W, self.rho2 or 0.0, self.lam, SB=self._product())


class DenseParticipant(Participant):
    """Fed-BNSL (Ng & Zhang 2022): ``B_p = (S + ρ₂I)⁻¹ (S − β_p + ρ₂W)``; sends the dense ``B_p``.

    No ℓ₁ locally (λ sits on W at the server)."""

    def __init__(self, pid, X, n_total, report_B: bool = False, rho2_schedule: Optional[tuple] = None):
        super().__init__(pid, X, n_total, lam=0.0, report_B=report_B, rho2_schedule=rho2_schedule)

    def _local_update(self, rnd: int) -> DenseUpdate:
        A = self._S + self.rho2 * np.eye(self.d)
        self.B = np.linalg.solve(A, self._S - self.beta + self.rho2 * self.W)
        return DenseUpdate(rnd, self.pid, self.d, self.B, self.objective())
