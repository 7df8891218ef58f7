"""fed-suffstats' candidate learners on the released moments, and the rule that picks among them.

The noise-aware search's graph is the first; :data:`CANDIDATES` lists the others in the order they
challenge the graph chosen so far — each says when it applies (``applies``, on public quantities and the
moments) and how it competes with that graph (``challenge``: its graph, the extended BIC at the moments'
effective row count ``n_eff``, and the note the report shows). No candidate looks at the truth. A new
learner is one more entry; the driver only calls :func:`final_graph`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from bnsl_cli.dag import finish_graph
from bnsl_cli.errors import BnslError
from bnsl_cli.federated.methods.admm.on_moments import effective_rows, learn_on_moments, psd_moments
from bnsl_cli.solvers.gaussian_score import bic_of, ebic_penalty, least_squares_weights
from bnsl_cli.solvers.moment_search import backward_parents
from bnsl_cli.solvers.score_search import polish_graph

__all__ = ["CANDIDATES", "Candidate", "Chosen", "Moments", "ORDER_SEARCH_ROWS", "final_graph"]

#: The order search (which scores the moments as if exact) is a candidate only when the release noise std
#: is at most twice the rows' own sampling error: ``n_eff ≥ ORDER_SEARCH_ROWS · n``. Noisier moments make the
#: exact score fit hundreds of noise edges (ε = 1, d = 50: 250–500 removed by the pruning; ER2 d = 100 at
#: ε = 5: 875, and 160 s against 8 s), and its graph was rarely kept there. The level 0.2 (was 0.5) was
#: chosen after measuring both on the ε = 5 grid and magic-irri (benchmarks/RESULTS.md, issue 27).
ORDER_SEARCH_ROWS = 0.2


@dataclass(frozen=True)
class Moments:
    """What every candidate learns from: the run's ``plan`` and method ``spec``, the moments ``S``
    (standardised under ``--standardize``), the release noise std of their entries ``noise`` (``None``:
    exact), the rows ``n``, the noise metric ``(τ, H)`` the noise-aware search was given, and derived from
    them the effective row count ``n_eff``, the extended BIC's penalty ``pen`` and the threshold ``thr``."""

    plan: object
    spec: object
    S: np.ndarray
    noise: Optional[np.ndarray]
    n: float
    metric: tuple
    n_eff: float
    pen: float
    thr: float

    def ebic(self, E) -> float:
        """The extended BIC of the DAG ``E`` at ``n_eff`` rows: the lower of the equal- and per-node-variance
        Gaussian likelihoods on the moments."""
        return min(bic_of(self.S, self.n_eff, E != 0, score, self.pen) for score in ("equal", "node"))


@dataclass(frozen=True)
class Chosen:
    """The graph chosen so far: its weights ``W`` (standardised under ``--standardize``), the finished DAG
    ``A``, the edges the finishing removed and the note the report shows."""

    W: np.ndarray
    A: np.ndarray
    removed: list
    note: str


@dataclass(frozen=True)
class Candidate:
    """One more learner on the moments: ``applies(m)`` says whether it runs, ``challenge(m, chosen)``
    returns the graph chosen after it competed with ``chosen`` (its own or ``chosen``, the note extended)."""

    name: str
    applies: Callable[[Moments], bool]
    challenge: Callable[[Moments, Chosen], Chosen]


def _default_learner(m: Moments, chosen: Chosen) -> Chosen:
    """The default learner on the moments (:func:`~bnsl_cli.federated.methods.admm.on_moments.learn_on_moments`:
    ADMM rounds with an ℓ₁ weight and a snap grown with the moments' error, and the polish at ``n_eff`` rows),
    without the edges the noise-aware search's test removes (:func:`_prune_within_noise`), against the
    noise-aware search's graph by extended BIC; a graph with more edges than ``n_eff`` is kept only when the
    other has more too (more weights than the moments are worth rows). Optional: its failure on noisy
    moments leaves the chosen graph."""
    plan, spec = m.plan, m.spec
    try:
        fit = learn_on_moments(m.S, plan, n=m.n, noise_std=m.noise)
    except BnslError as exc:
        return Chosen(chosen.W, chosen.A, chosen.removed, chosen.note + (
            f"; the default learner failed on the released moments ({exc}); the noise-aware search's graph is kept"))
    B, weak_b = fit.W, 0
    if m.noise is not None:  # the polish scored the moments as if exact: the edges within the noise leave
        E_b, weak_b = _prune_within_noise(psd_moments(m.S), B != 0, m.n, m.metric, plan.knowledge)
        if weak_b:
            B = least_squares_weights(psd_moments(m.S), E_b)
    if plan.threshold_given:
        B, _ = finish_graph(B, m.thr, spec.name, plan.names, plan.knowledge)
    A = chosen.A
    bic_a, bic_b = m.ebic(A), m.ebic(B)
    e_a, e_b = int((A != 0).sum()), int((B != 0).sum())
    note = (chosen.note + f"; extended BIC: noise-aware search {bic_a:.6g} ({e_a} edges), "
            f"default learner {bic_b:.6g} ({e_b} edges"
            + (f", {weak_b} within the release noise removed)" if weak_b else ")"))
    # a graph with more edge weights than the moments are worth rows cannot be told from noise fitted
    # by it: such a candidate competes only when both are
    fits_a, fits_b = e_a <= m.n_eff, e_b <= m.n_eff
    if fits_a != fits_b:
        keep_b = fits_b
        note += f"; only the {'default learner' if keep_b else 'noise-aware search'}'s graph has at most n_eff edges"
    else:
        keep_b = bic_b <= bic_a
    if keep_b:
        return Chosen(fit.W_raw, B, fit.removed, note + "; the default learner's graph is kept")
    return Chosen(chosen.W, chosen.A, chosen.removed, note + "; the noise-aware search's graph is kept")


def _order_search(m: Moments, chosen: Chosen) -> Chosen:
    """The order search from the chosen graph, kept when it lowers the extended BIC at ``n_eff`` by more
    than one edge's penalty (a smaller difference is within what the score tells apart, e.g. among nearly
    equivalent orientations, and the chosen graph stays): the polish's per-node search from that graph and
    from the empty graph, then the order search from two topological orders of each result and their
    reverses (:func:`~bnsl_cli.solvers.score_search.polish_graph` with ``orders``, the search of a non-private
    ``--standardize`` run), on the moments as if exact at ``n_eff`` rows. Run only where the noise is at
    most twice the rows' sampling error (:data:`ORDER_SEARCH_ROWS`): on noisier moments the exact score fits
    the noise (hundreds of edges whose extended BIC beats the truth's). Greedy searches on the moments stop
    in local optima whose extended BIC is above the truth's; from an ordering the search reaches the
    truth's (benchmarks/RESULTS.md, issue 27). Its graph then loses the edges the noise-aware search would
    remove (:func:`_prune_within_noise`): where the noise is small that is the extended BIC's own level;
    where a few directions of the moments are noisier than ``n_eff`` says, it removes the edges the exact
    score fitted to that noise (measured at ε = 5, d = 20: without it, graphs of 54 edges against the
    truth's 37, whose extended BIC was far below the truth's)."""
    plan, spec = m.plan, m.spec
    A_c, margin = chosen.A, m.pen
    Sp = psd_moments(m.S)
    try:
        r = polish_graph(Sp, max(2, int(round(m.n_eff))), A_c, A_c, None, score="node", additions="all",
                         knowledge=plan.knowledge, orders=True)
    except np.linalg.LinAlgError as exc:  # (an optional candidate: singular moments leave the chosen graph)
        return Chosen(chosen.W, A_c, chosen.removed, chosen.note + f"; the order search failed ({exc})")
    if not r.info.get("applied"):
        return Chosen(chosen.W, A_c, chosen.removed,
                      chosen.note + f"; the order search did not apply ({r.info.get('reason')})")
    E_o, weak = _prune_within_noise(Sp, r.W != 0, m.n, m.metric, plan.knowledge)
    W_o = least_squares_weights(Sp, E_o)
    A_o, removed_o = finish_graph(W_o, m.thr, spec.name, plan.names, plan.knowledge)
    bic_c, bic_o = m.ebic(A_c), m.ebic(A_o)
    note = chosen.note + (f"; the order search from it: extended BIC {bic_o:.6g} ({int((A_o != 0).sum())} edges"
                          + (f", {weak} within the release noise removed)" if weak else ")"))
    if bic_o < bic_c - margin:
        return Chosen(W_o, A_o, removed_o, note + ", kept")
    return Chosen(chosen.W, A_c, chosen.removed, note + f", not lower by one edge's penalty ({margin:.3g}): not kept")


#: The learners that challenge the noise-aware search's graph, in order.
CANDIDATES = (
    Candidate("default learner", applies=lambda m: True, challenge=_default_learner),
    Candidate("order search", applies=lambda m: m.n_eff >= ORDER_SEARCH_ROWS * m.n, challenge=_order_search),
)


def final_graph(plan, spec, res, S, noise, n, metric=(0.0, None)):
    """The finished graph from the moments ``S`` (standardised under ``--standardize``) whose entries
    have the release noise std ``noise`` (``None``: exact): the noise-aware search's (``res``) challenged by
    each of :data:`CANDIDATES` in turn (``metric = (τ, H)``: the noise per entry of the moments and its
    metric, as the search was given them). Returns the weights (standardised under ``--standardize``), the
    DAG, the removed edges and a note."""
    d = S.shape[0]
    n_eff = effective_rows(n, noise, S)
    m = Moments(plan, spec, S, noise, n, metric, n_eff, ebic_penalty(n_eff, d),
                plan.threshold if plan.threshold_given else 0.0)
    A, removed_a = finish_graph(res.W, m.thr, spec.name, plan.names, plan.knowledge)
    chosen = Chosen(res.W, A, removed_a, f"n_eff {n_eff:.0f}")
    for candidate in CANDIDATES:
        if candidate.applies(m):
            chosen = candidate.challenge(m, chosen)
    return chosen.W, chosen.A, chosen.removed, chosen.note


def _prune_within_noise(S, E, n, metric, knowledge) -> tuple[np.ndarray, int]:
    """The DAG ``E`` without the edges the noise-aware search would remove: per child, the backward
    elimination of :func:`~bnsl_cli.solvers.moment_search.backward_parents` with the release noise
    ``metric = (τ, H)`` at ``κ = log n + 2 log d`` (a required edge never leaves). Returns the pruned
    DAG and how many edges left."""
    tau, H = metric
    d = S.shape[0]
    kappa = ebic_penalty(n, d, units="statistic")
    R = None if knowledge is None else knowledge.required_mask()
    H = np.eye(d) if H is None else H
    out = np.zeros((d, d), bool)
    for j in range(d):
        pa = np.flatnonzero(E[:, j])
        if pa.size:
            out[backward_parents(S, j, pa.tolist(), n, float(tau) ** 2, H, kappa,
                                 None if R is None else R[:, j]), j] = True
    return out, int(np.asarray(E, bool).sum() - out.sum())
