"""Fed-Sparse-BNSL's learner on released second moments: the ADMM rounds and the polish run at the
coordinator on a pooled moment matrix, in the clear (post-processing of released values; no row and
no site is involved, nothing crosses a network).

A method that ends with pooled second moments (fed-suffstats: the staged private release) learns
its graph with the project's default learner this way. The pooled matrix ``S`` is held by ``P``
moment holders with equal shares ``S / P`` (``P`` the run's number of sites), so the consensus
problem, its ℓ₁ weight (the plan's λ, resolved as non-private fed-sparse's for ``P`` sites) and its
penalty schedule are those of a non-private run on the same sites: on exact pooled moments the graph
is the default learner's (measured: the same graph on 9 of 9 simulated ER2/SF2 cases, d = 20 and 50,
5 sites). The holders answer encoded messages through an in-process fleet, exactly as sites would;
as their shares are equal, holder 0 computes each reply and the others send it under their own number.

With noisy moments (``noise_std``: each entry's release noise std) the ℓ₁ weight and the snap grow
with the moments' error (:func:`moment_level`) and the polish scores the moments as if exact at their
effective row count ``n_eff`` (:func:`effective_rows`). The caller removes the edges within the
noise with its own test (fed-suffstats: the noise-aware search's, which knows the noise's metric);
the polish's per-entry gate (3 noise stds of the raw entry, on top of the penalty at ``n_eff``) removed
true edges with it: at ε = 5 its graphs' extended BIC was far above the truth's (benchmarks/RESULTS.md,
issue 27).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from bnsl_cli.dag import finish_graph
from bnsl_cli.federated.fleet import LocalFleet
from bnsl_cli.federated.messages import (
    ConsensusBroadcast,
    GramReply,
    GramRequest,
    SparseUpdate,
    SupportState,
    message_kind,
    with_sender,
)
from bnsl_cli.federated.methods.admm.local_step import sparse_step
from bnsl_cli.federated.methods.admm.coordinator import Coordinator, PenaltySchedule
from bnsl_cli.federated.methods.admm.protocol import run_admm
from bnsl_cli.federated.polish import PolishStage
from bnsl_cli.solvers.pgcd import local_objective
from bnsl_cli.stats import PSD_FLOOR, project_psd

__all__ = ["MomentHolder", "MomentsFit", "effective_rows", "learn_on_moments", "moment_level", "psd_moments"]


def effective_rows(n: float, noise_std: Optional[np.ndarray], S: np.ndarray) -> float:
    """The row count whose sampling error of a standardised second moment (``1/√n``) equals the
    combined error of ``n`` rows and the release noise: ``1 / (1/n + τ²)`` with ``τ`` the median
    noise std of the off-diagonal entries of the standardised moments (``noise_std_ab / √(S_aa S_bb)``).
    Without noise, ``n``."""
    if noise_std is None:
        return float(n)
    d = S.shape[0]
    sd = np.sqrt(np.maximum(np.diag(S), np.finfo(float).tiny))
    tau = np.asarray(noise_std, dtype=float) / np.outer(sd, sd)
    off = tau[~np.eye(d, dtype=bool)]
    t = float(np.median(off)) if off.size else 0.0
    return float(1.0 / (1.0 / float(n) + t * t))


def moment_level(level: float, n: float, n_eff: float) -> float:
    """A level of the ADMM set for exact moments of ``n`` rows, on moments worth ``n_eff`` of them:
    ``level·√(n / n_eff)``. The plan's ℓ₁ weight λ and its snap are resolved for exact moments; on
    noisy moments an entry's error grows by ``√(n / n_eff)`` (the release noise), and so do the
    gradient that a coordinate the data do not support shows at zero and the error of a weight. Each
    level keeps its ratio to that error:

    - λ: so the noise does not fill the support (at d = 400, ε = 10, n_eff = 200 of 5,000 rows: the
      ADMM took 1,089 s with λ and 147 s with the grown weight);
    - the snap (and with it the W-step's screens, fractions of it): a weight within the noise is
      zero in the consensus. With the exact snap (d = 400, ε = 10), the consensus kept about 2,500
      weights of the noise's size, one 400-node cycle block, and in the last 24 rounds the W-step ran
      L-BFGS to its iteration cap on it: 133 s. With the grown snap the consensus is a DAG of about
      430 weights from round 32 on: 15 s, for the same graph (SHD 141 and 140; benchmarks/RESULTS.md,
      issue 27).

    Exact moments (``n_eff = n``): ``level``."""
    return float(level) * (float(n) / float(n_eff)) ** 0.5 if n_eff < n else float(level)


class MomentHolder:
    """One share of pooled second moments in the role of a Fed-Sparse-BNSL site: the dual update, the
    local PGCD step on its share, its share of any second moment asked for by the polish."""

    def __init__(self, pid: int, S_share: np.ndarray, lam: float, steps: int, tol: float,
                 forbidden=None, required=None):
        self.pid = int(pid)
        self.S = np.asarray(S_share, dtype=float)
        self.d = self.S.shape[0]
        self.lam, self.steps, self.tol = float(lam), int(steps), float(tol)
        self.forbidden, self.required = forbidden, required
        self.B = np.zeros((self.d, self.d))
        self.beta = np.zeros((self.d, self.d))
        self.W = np.zeros((self.d, self.d))
        self.rho2: Optional[float] = None
        self.link = SupportState()
        self.last: Optional[bytes] = None

    def handle(self, data: bytes) -> Optional[bytes]:
        self.last = self._answer(data)
        return self.last

    def _answer(self, data: bytes) -> Optional[bytes]:
        if message_kind(data) == GramRequest.kind:
            req = GramRequest.decode(data)
            a, b = req.pairs // self.d, req.pairs % self.d
            return GramReply(req.round, self.pid, self.d, self.S[a, b].copy()).encode()
        msg = ConsensusBroadcast.decode(data, self.link)
        if self.rho2 is not None:
            self.beta += self.rho2 * (self.B - msg.W)
        self.W, self.rho2 = msg.W, msg.rho2
        if msg.stop:
            return None
        res, entries = sparse_step(self.S, self.B, self.beta, self.W, self.rho2, self.lam, self.steps, self.tol,
                                   self.forbidden, self.required)
        self.B = res.B
        objective = local_objective(self.S, self.B, self.beta, self.W, self.rho2, self.lam)
        return SparseUpdate(msg.round, self.pid, self.d, entries, objective).encode()

    def summary(self) -> dict:
        return {"participant": self.pid + 1, "rows": 0, "B": None, "compute_s": 0.0, "steps_taken": 0,
                "events": [], "notes": {}}


class _Copy:
    """Holder ``k`` of the same equal share: its reply is holder 0's to the same message (the fleet asks
    holder 0 first), signed as ``k`` — the P holders' arithmetic done once."""

    def __init__(self, first: MomentHolder, pid: int):
        self.first, self.pid = first, int(pid)

    def handle(self, data: bytes) -> Optional[bytes]:
        reply = self.first.last
        return None if reply is None else with_sender(reply, self.pid)

    def summary(self) -> dict:
        return {**self.first.summary(), "participant": self.pid + 1}


def psd_moments(S: np.ndarray) -> np.ndarray:
    """``S`` itself when its eigenvalues are all at least :data:`PSD_FLOOR` × the largest (exact
    moments of more rows than columns), else its projection with the eigenvalues floored there:
    released moments with noise need not be positive definite, and on such a matrix the least-squares
    loss is unbounded below (the ADMM's objective diverged on one at ε = 1, d = 50)."""
    S = 0.5 * (S + S.T)
    w = np.linalg.eigvalsh(S)
    if w.max() > 0 and w.min() >= PSD_FLOOR * w.max():
        return S
    if not w.max() > 0:  # nothing left of the moments: unit variances, no covariance
        return np.eye(S.shape[0]) * max(float(np.abs(np.diag(S)).max()), 1.0)
    return project_psd(S, PSD_FLOOR)


@dataclass(frozen=True)
class MomentsFit:
    """The learner's result: the consensus ``W_raw``, the finished (polished) DAG ``W``, the edges the
    acyclicity step removed, the rounds, and the polish's diagnostics (``None`` when it did not apply)."""

    W_raw: np.ndarray
    W: np.ndarray
    removed: list
    rounds: int
    polish: Optional[dict]


def learn_on_moments(S: np.ndarray, plan, *, n: Optional[float] = None,
                     noise_std: Optional[np.ndarray] = None) -> MomentsFit:
    """The default learner (ADMM rounds, then the polish) on the pooled second moments ``S`` (centred,
    divided by the rows), with the plan's λ, rounds, steps, penalty schedule, acyclicity function,
    threshold and prior knowledge. ``n``: the rows behind ``S`` (default ``plan.n_total``);
    ``noise_std``: the release noise std of each entry of ``S`` (``None``: exact moments)."""
    S = psd_moments(np.asarray(S, dtype=float))
    d, P = S.shape[0], plan.P
    n = float(plan.n_total if n is None else n)
    pen = plan.penalty
    forbidden, required = plan.forbidden_mask(), plan.required_mask()
    n_eff = effective_rows(n, noise_std, S)
    holder = MomentHolder(0, S / P, moment_level(plan.lam, n, n_eff), plan.steps, plan.tol, forbidden, required)
    holders = [holder] + [_Copy(holder, k) for k in range(1, P)]
    coord = Coordinator(d, P, PenaltySchedule(pen.rho1, pen.rho2, pen.growth1, pen.growth2, pen.cap),
                        snap=moment_level(plan.snap, n, n_eff), ftol=plan.server_ftol, acyclicity=plan.acyclicity)
    coord.forbidden, coord.required = forbidden, required
    # the polish's row count: at least 2 (moments worth less than two rows still get a finite score)
    stage = PolishStage(plan.threshold, max(2, int(round(n_eff))),
                        threshold_given=plan.threshold_given, knowledge=plan.knowledge)
    fleet = LocalFleet(holders)
    try:
        log = run_admm(coord, fleet, plan.rounds, h_tol=plan.h_tol, gap_tol=plan.gap_tol,
                       threshold=plan.threshold, polish=stage)
    finally:
        fleet.close()
    W_raw = coord.W.copy()
    W, removed = finish_graph(W_raw, plan.threshold, plan.method, plan.names, plan.knowledge)
    info = None
    if stage.result is not None and stage.result.info.get("applied"):
        W = stage.result.W
        info = dict(stage.result.info)
    return MomentsFit(W_raw, W, removed, log.rounds, info)

