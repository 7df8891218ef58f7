"""The fed-moments coordinator: the two sum-shaped exchanges, the pooled moments, NOTEARS, the finished graph."""

from __future__ import annotations

import numpy as np

from bnsl_cli.dag import finish_graph, fit_required
from bnsl_cli.errors import ConvergenceWarning, NoDagError, warn
from bnsl_cli.federated.messages import (
    CentreBroadcast,
    MomentRequest,
    ShareReply,
    StandardizeBroadcast,
)
from bnsl_cli.federated.outcome import PooledStats, SolverFinal, SolverOutcome, SolverStep, SolverTiming
from bnsl_cli.privacy.mechanisms import project_psd
from bnsl_cli.privacy.split_noise import split_of
from bnsl_cli.solvers.notears import notears_linear
from bnsl_cli.stats import (
    check_scales,
    from_upper_triangle,
    standardized,
    sum_shares,
)

#: What fed-moments' messages carry (the report's ``communication.note``).
MESSAGES = (
    "two sum-shaped exchanges: each participant's share of the column means, then (after the pooled mean is "
    "broadcast) its share of the upper-triangle centred moment matrix"
)


def drive_moments(spec, plan, fleet, progress=None) -> SolverOutcome:
    """Coordinator side: the two sum-shaped exchanges, the pooled moments, NOTEARS, the finished graph."""
    d = plan.d
    fleet.traffic.enter("means")
    mu = sum_shares(ShareReply.decode(r).values for r in fleet.exchange(MomentRequest(0, d).encode()))
    if split_of(plan) > 1:
        # split noise: the pooled spreads first (post-processing of released shares), broadcast as
        # the common public scale of every site's moment release
        fleet.traffic.enter("scales")
        raw1 = fleet.exchange(CentreBroadcast(1, d, mu, full=False).encode())
        sd_pub = np.sqrt(np.maximum(sum_shares(ShareReply.decode(r).values for r in raw1), 0.0))
        check_scales(mu, sd_pub, plan.names, where="fed-moments --split-noise")
        fleet.exchange(StandardizeBroadcast(2, d, mu, sd_pub).encode())
        centre = CentreBroadcast(3, d, mu, full=True).encode()
    else:
        centre = CentreBroadcast(1, d, mu, full=True).encode()
    fleet.traffic.enter("moments")
    S = from_upper_triangle(sum_shares(ShareReply.decode(r).values for r in fleet.exchange(centre)), d)
    if plan.private:
        S = project_psd(S)  # post-processing of the pooled noisy releases
    sd = np.sqrt(np.maximum(np.diag(S), 0.0))
    if not np.all(np.isfinite(S)):
        raise NoDagError("fed-moments: the pooled second moments are not finite (values too large); no DAG can be produced")
    std = PooledStats(
        applied=bool(plan.standardize),
        source="the pooled moment matrix (no extra message" + (", no extra release)" if plan.private else ")"),
        mean=mu.tolist(),
        sd=sd.tolist(),
    )
    if plan.standardize:
        check_scales(mu, sd, plan.names)
        S, sd = standardized(S)
    res = notears_linear(
        S, plan.lam, progress=progress, forbidden=plan.forbidden_mask(), required=plan.required_mask()
    )
    W, removed = finish_graph(res.W, plan.threshold, plan.method, plan.names, plan.knowledge)
    W = fit_required(W, S, plan.knowledge)
    summaries = fleet.finish()
    notes = []
    if not res.converged:
        notes.append(
            f"fed-moments: NOTEARS stopped with h(W) = {res.h:.2e} > 1e-8 after {res.outer_steps} outer steps; "
            "the thresholded graph was made acyclic by dropping the weakest edges"
        )
    if res.solver_issues:
        first = res.solver_issues[0]
        notes.append(
            f"fed-moments: {len(res.solver_issues)} L-BFGS-B solve(s) inside NOTEARS did not report success "
            f"(first: outer step {first['outer']}, {first['message']})"
        )
    warn_list = []
    warn(notes, ConvergenceWarning, warn_list)
    return SolverOutcome(
        res.W, W, summaries,
        threshold_applied=plan.threshold,
        rounds=res.outer_steps,
        converged=res.converged,
        timing=SolverTiming(compute_s=res.wall_s + sum(s["compute_s"] for s in summaries)),
        messages=MESSAGES,
        warnings=warn_list,
        final=SolverFinal(h=res.h),
        history=[SolverStep(**step) for step in res.history],
        removed_for_acyclicity=removed,
        solver_issues=res.solver_issues,
        standardize=std,
    )
