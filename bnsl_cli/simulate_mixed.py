"""Mixed data on a random DAG: continuous and categorical variables (the library side of mixed data's
tests and benchmarks).

A share of the nodes is categorical, each with a number of levels drawn from a range. In topological
order: a continuous node is a linear function of its continuous parents plus an offset per level of
each categorical parent, plus Gaussian noise; a categorical node draws its level from a multinomial
logit of its parents (a coefficient per level for each continuous parent, in units of that parent's
standard deviation; a table of logits per level pair for each categorical parent). Levels are written
``L0``, ``L1``, …
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bnsl_cli.simulate import node_names, random_dag, random_weights

__all__ = ["MixedSimulation", "simulate_mixed"]


@dataclass(frozen=True)
class MixedSimulation:
    """``B[i, j]``: the edge ``i → j``; ``W`` the weights of the edges between continuous nodes (1 for
    an edge into or out of a categorical node); ``names``; ``levels[name]`` the levels of a categorical
    node; ``shards``: per participant, a dict name -> column (floats, or level texts)."""

    B: np.ndarray
    W: np.ndarray
    names: tuple
    levels: dict
    shards: list


def _signed(rng, size, low, high):
    return rng.uniform(low, high, size) * rng.choice([-1.0, 1.0], size)


def simulate_mixed(d: int, edges: float, share: float = 0.4, levels=(2, 4), participants: int = 5,
                   samples: int = 1000, seed: int = 0, graph_type: str = "er") -> MixedSimulation:
    """``participants`` shards of ``samples`` rows each (one population) of a mixed SEM on a random DAG
    of ``d`` nodes and about ``edges`` edges; ``share`` of the nodes (rounded) categorical with
    ``levels[0]``–``levels[1]`` levels."""
    rng = np.random.default_rng(seed)
    B = random_dag(d, edges, graph_type, rng) != 0
    W = random_weights(B.astype(float), 0.5, 2.0, rng)
    names = node_names(d)
    k = int(round(share * d))
    cat = set(rng.choice(d, size=k, replace=False).tolist()) if k else set()
    nlev = {j: int(rng.integers(levels[0], levels[1] + 1)) for j in cat}
    # parameters, drawn once (the population)
    offsets = {(p, j): _signed(rng, nlev[p], 0.5, 1.5) for j in range(d) for p in np.flatnonzero(B[:, j]) if p in cat
               and j not in cat}
    cont_coef = {(p, j): _signed(rng, nlev[j], 1.0, 2.0) for j in cat for p in np.flatnonzero(B[:, j]) if p not in cat}
    cat_coef = {(p, j): _signed(rng, (nlev[p], nlev[j]), 1.0, 2.0) for j in cat for p in np.flatnonzero(B[:, j])
                if p in cat}
    base = {j: rng.normal(0.0, 0.5, nlev[j]) for j in cat}
    order = _order(B)
    n = participants * samples
    vals: dict = {}
    sds: dict = {}
    for j in order:
        pa = np.flatnonzero(B[:, j])
        if j in cat:
            logits = np.tile(base[j], (n, 1))
            for p in pa:
                if p in cat:
                    logits += cat_coef[(p, j)][vals[p]]
                else:
                    logits += np.outer(vals[p] / sds[p], cont_coef[(p, j)])
            prob = np.exp(logits - logits.max(axis=1, keepdims=True))
            prob /= prob.sum(axis=1, keepdims=True)
            u = rng.random(n)[:, None]
            vals[j] = np.minimum((prob.cumsum(axis=1) < u).sum(axis=1), nlev[j] - 1)
        else:
            x = rng.normal(0.0, 1.0, n)
            for p in pa:
                x = x + (offsets[(p, j)][vals[p]] if p in cat else W[p, j] * vals[p])
            vals[j] = x
            sds[j] = float(np.std(x)) or 1.0
    lev = {names[j]: tuple(f"L{i}" for i in range(nlev[j])) for j in sorted(cat)}
    shards = []
    for s in range(participants):
        rows = slice(s * samples, (s + 1) * samples)
        shards.append({names[j]: (np.array([f"L{v}" for v in vals[j][rows]]) if j in cat else vals[j][rows])
                       for j in range(d)})
    Wt = np.where(B, 1.0, 0.0)
    cont = np.array([j not in cat for j in range(d)])
    both = B & cont[:, None] & cont[None, :]
    Wt[both] = W[both]
    return MixedSimulation(B, Wt, names, lev, shards)


def _order(B: np.ndarray) -> list:
    d = B.shape[0]
    indeg = B.sum(axis=0).astype(int)
    ready = [j for j in range(d) if indeg[j] == 0]
    out = []
    while ready:
        u = ready.pop(0)
        out.append(u)
        for c in np.flatnonzero(B[u]):
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(int(c))
    return out
