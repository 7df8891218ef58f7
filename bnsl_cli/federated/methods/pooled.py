"""The NOTEARS methods without a federation: ``notears`` (one site holding every row pooled: the
accuracy ceiling) and ``local-notears`` (one graph per participant from its own rows alone).

The site fits :func:`bnsl_cli.solvers.notears.notears_linear` on its second-moment matrix (pooled
block by block exactly as fed-moments pools its messages, so the two see bit-for-bit the same
matrix); nothing is exchanged, the fitted graph is in the site's summary. ``W[i, j]`` is the edge
``i → j``.
"""

from __future__ import annotations

import numpy as np

from bnsl_cli.dag import finish_graph, fit_required
from bnsl_cli.errors import ConvergenceWarning, warn
from bnsl_cli.federated.outcome import LocalFit, LocalOutcome, Outcome, SolverFinal, SolverOutcome, SolverStep, SolverTiming
from bnsl_cli.solvers.notears import notears_linear
from bnsl_cli.stats import check_scales, pooled_moments_of_blocks, standardized

__all__ = ["NotearsSite", "pooled_site", "local_site", "drive_notears"]


class NotearsSite:
    """The site side of ``notears`` / ``local-notears``: NOTEARS on this site's rows (for
    ``notears``, the one site holding every row pooled). Nothing is exchanged; the fitted graph is
    in its :meth:`summary`."""

    report_B = False

    def __init__(self, pid: int, X: np.ndarray, lam: float, standardize: bool = False, blocks=None, knowledge=None):
        self.pid = int(pid)
        self.knowledge = knowledge
        # pooled rows: the moments of each participant's block, pooled exactly as fed-moments pools
        # its messages (so the two see bit-for-bit the same matrix)
        self._S = pooled_moments_of_blocks(X, [X.shape[0]] if blocks is None else blocks)
        self.sd = np.sqrt(np.maximum(np.diag(self._S), 0.0))
        if standardize:  # local arithmetic on this site's rows (the correlation matrix)
            check_scales(np.zeros_like(self.sd), self.sd, [f"column {j + 1}" for j in range(self.sd.size)])
            self._S, self.sd = standardized(self._S)
        self.n_rows = int(X.shape[0])
        self.lam = float(lam)

    def handle(self, data: bytes):
        raise ValueError("a NOTEARS site exchanges no messages")

    def summary(self) -> dict:
        k = self.knowledge
        if k is None:
            res = notears_linear(self._S, self.lam)
        else:
            res = notears_linear(self._S, self.lam, forbidden=k.forbidden_mask(), required=k.required_mask())
        out = {
            "participant": self.pid + 1,
            "rows": self.n_rows,
            "W": res.W.tolist(),
            "h": res.h,
            "outer_steps": res.outer_steps,
            "converged": res.converged,
            "history": res.history,
            "compute_s": res.wall_s,
            "solver_issues": res.solver_issues,
            "events": [],
            "sd": self.sd.tolist(),
        }
        if k is not None:
            # the site's second moments fit a required edge that ends with weight 0 (local arithmetic)
            out["S"] = self._S.tolist()
        return out


def pooled_site(plan, pid: int, X: np.ndarray, rng=None) -> NotearsSite:
    """The one site of ``notears``: every row pooled (its moments pooled block by block as
    fed-moments pools its messages, when ``X`` holds the plan's participants' rows in order)."""
    blocks = plan.rows if sum(plan.rows) == X.shape[0] else None
    return NotearsSite(pid, X, plan.lam, standardize=plan.standardize, blocks=blocks, knowledge=plan.knowledge)


def local_site(plan, pid: int, X: np.ndarray, rng=None) -> NotearsSite:
    """A site of ``local-notears``: NOTEARS on its own rows alone."""
    return NotearsSite(pid, X, plan.lam, standardize=plan.standardize, knowledge=plan.knowledge)


def drive_notears(spec, plan, fleet, progress=None) -> Outcome:
    """Coordinator side of ``notears`` (a fleet of one site with the pooled rows) and
    ``local-notears`` (one graph per site): collect the sites' fits and finish each graph."""
    summaries = fleet.finish()
    notes = []

    def check(s, where):
        if not s["converged"]:
            notes.append(
                f"{where}: NOTEARS stopped with h(W) = {s['h']:.2e} > 1e-8 after {s['outer_steps']} outer steps; "
                "the thresholded graph was made acyclic by dropping the weakest edges"
            )
        if s["solver_issues"]:
            first = s["solver_issues"][0]
            notes.append(
                f"{where}: {len(s['solver_issues'])} L-BFGS-B solve(s) inside NOTEARS did not report success "
                f"(first: outer step {first['outer']}, {first['message']})"
            )

    if spec.pooled:
        s = summaries[0]
        if progress is not None:
            for h in s["history"]:
                progress({"round": h["outer"], "h": h["h"], "rho": h["rho"]})
        W_raw = np.array(s["W"], dtype=float)
        W, removed = finish_graph(W_raw, plan.threshold, plan.method, plan.names, plan.knowledge)
        if plan.knowledge is not None:
            W = fit_required(W, np.array(s.pop("S")), plan.knowledge)
        check(s, plan.method)
        warn_list = []
        warn(notes, ConvergenceWarning, warn_list)
        return SolverOutcome(
            W_raw, W, summaries,
            threshold_applied=plan.threshold,
            rounds=s["outer_steps"],
            converged=s["converged"],
            timing=SolverTiming(compute_s=s["compute_s"]),
            messages="centralized: all rows pooled",
            warnings=warn_list,
            final=SolverFinal(h=s["h"]),
            history=[SolverStep(**step) for step in s["history"]],
            removed_for_acyclicity=removed,
            solver_issues=s["solver_issues"],
        )
    local, per = [], []
    for s in summaries:
        where = f"participant {s['participant']} ({plan.participants[s['participant'] - 1].label})"
        W, removed = finish_graph(np.array(s["W"], dtype=float), plan.threshold, where, plan.names, plan.knowledge)
        if plan.knowledge is not None:
            W = fit_required(W, np.array(s.pop("S")), plan.knowledge)
        check(s, where)
        local.append(W)
        per.append(LocalFit(
            participant=s["participant"],
            outer_steps=s["outer_steps"],
            h=s["h"],
            converged=s["converged"],
            removed_for_acyclicity=removed,
        ))
    warn_list = []
    warn(notes, ConvergenceWarning, warn_list)
    return LocalOutcome(
        None, local[0], summaries,
        threshold_applied=plan.threshold,
        rounds=max(p.outer_steps for p in per),
        converged=all(p.converged for p in per),
        timing=SolverTiming(compute_s=sum(s["compute_s"] for s in summaries)),
        messages="local: nothing is sent",
        warnings=warn_list,
        local=local,
        per_participant=per,
    )
