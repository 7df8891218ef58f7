"""Synthetic data from random linear structural equation models (docs/method.md, "Synthetic data").

Orientation everywhere: entry ``B[i, j]`` / ``W[i, j]`` of an adjacency matrix is the edge from
variable ``i`` to variable ``j`` (rows are parents, columns are children).

The model is the linear SEM ::

    X = X W + N,   i.e. X[:, j] = sum_i X[:, i] W[i, j] + N[:, j],

with independent noise columns of mean 0. By default every variable has the same noise variance
``noise_scale**2`` (equal variances make the DAG identifiable); ``noise_scale=(LOW, HIGH)`` draws
each variable's noise standard deviation uniformly on ``[LOW, HIGH]`` (unequal variances: the DAG
is then identifiable only up to its Markov equivalence class). Columns are generated in a
topological order of the DAG.

``column_scale=(LOW, HIGH)`` multiplies each observed column ``j`` by a factor ``s_j`` drawn
log-uniformly on ``[LOW, HIGH]`` after the SEM has produced the rows (a change of units). The DAG is
unchanged; in the units of the observed columns the weights are ``W'[i, j] = W[i, j] · s_j / s_i``
(from ``X' = X S``: ``X' = X' S⁻¹ W S + N S``), available as :attr:`Simulation.W_scaled`.

Randomness: every function takes ``rng`` (a :class:`numpy.random.Generator`, an int seed or
``None``). :func:`simulate` derives independent child streams from one
:class:`numpy.random.SeedSequence` in a fixed order (graph, weights, heterogeneity, then one
stream per participant's rows; then, only when used, noise scales and column scales), so the same seed always gives the same arrays, the graph and the
shared weights do not depend on ``participants``, ``samples`` or ``heterogeneous``, and
participant ``p``'s rows do not depend on how many participants follow it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

__all__ = [
    "GRAPH_TYPES",
    "NOISE_TYPES",
    "Simulation",
    "check_params",
    "node_names",
    "topological_order",
    "random_dag",
    "random_weights",
    "simulate_sem",
    "heterogeneous_weights",
    "simulate",
]

GRAPH_TYPES = ("er", "sf")
NOISE_TYPES = ("gaussian", "exponential", "gumbel", "uniform")

_EULER_GAMMA = 0.5772156649015329


def _rng(rng) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def node_names(d: int, prefix: str = "x") -> tuple[str, ...]:
    """Column names ``x1 … xd``, zero-padded so that they sort (``x01 … x20`` when d = 20)."""
    width = len(str(d))
    return tuple(f"{prefix}{k:0{width}d}" for k in range(1, d + 1))


def _sf_attachments(d: int, expected_edges: float) -> int:
    """Edges per new node of the scale-free generator: ``m = max(1, round(expected_edges / d))``."""
    return max(1, int(round(expected_edges / d)))


def check_params(
    d: int,
    expected_edges: float,
    graph_type: str = "er",
    *,
    participants: int = 1,
    samples: int = 2,
    weight_range: Sequence[float] = (0.5, 2.0),
    noise: str = "gaussian",
    noise_scale=1.0,
    spread: float = 0.5,
    column_scale=None,
) -> None:
    """Raise :class:`ValueError` with a message naming the option if a parameter is unusable."""
    if int(d) != d or d < 2:
        raise ValueError(f"nodes must be an integer >= 2 (got {d})")
    max_edges = d * (d - 1) // 2
    if not math.isfinite(expected_edges) or expected_edges < 0:
        raise ValueError(f"edges must be >= 0 (got {expected_edges})")
    if expected_edges > max_edges:
        raise ValueError(
            f"edges = {expected_edges:g} is more than a DAG on {d} nodes can hold "
            f"(at most d(d-1)/2 = {max_edges})"
        )
    if graph_type not in GRAPH_TYPES:
        raise ValueError(f"graph type must be one of {', '.join(GRAPH_TYPES)} (got {graph_type!r})")
    if graph_type == "sf" and expected_edges < 1:
        raise ValueError("a scale-free graph needs edges >= 1")
    if int(participants) != participants or participants < 1:
        raise ValueError(f"participants must be an integer >= 1 (got {participants})")
    if int(samples) != samples or samples < 2:
        raise ValueError(f"samples must be an integer >= 2 (got {samples})")
    if len(weight_range) != 2:
        raise ValueError("weight range must be two numbers LOW,HIGH")
    low, high = (float(v) for v in weight_range)
    if not (math.isfinite(low) and math.isfinite(high)) or low <= 0 or high < low:
        raise ValueError(f"weight range must satisfy 0 < LOW <= HIGH (got {low:g},{high:g})")
    if noise not in NOISE_TYPES:
        raise ValueError(f"noise must be one of {', '.join(NOISE_TYPES)} (got {noise!r})")
    _check_range(noise_scale, "noise scale")
    if column_scale is not None:
        _check_range(column_scale, "column scale")
    if not math.isfinite(spread) or spread < 0:
        raise ValueError(f"spread must be >= 0 (got {spread:g})")


def _as_range(value) -> tuple[float, float]:
    """A scalar ``v`` as ``(v, v)``, a pair as itself (floats)."""
    if np.ndim(value) == 0:
        return float(value), float(value)
    vals = [float(v) for v in value]
    if len(vals) != 2:
        raise ValueError("a range must be one number or two numbers LOW,HIGH")
    return vals[0], vals[1]


def _check_range(value, what: str) -> None:
    if np.ndim(value) == 0:
        if not math.isfinite(float(value)) or float(value) <= 0:
            raise ValueError(f"{what} must be > 0 (got {float(value):g})")
        return
    low, high = _as_range(value)
    if not (math.isfinite(low) and math.isfinite(high)) or low <= 0 or high < low:
        raise ValueError(f"{what} must satisfy 0 < LOW <= HIGH (got {low:g},{high:g})")


def random_dag(d: int, expected_edges: float, graph_type: str = "er", rng=None) -> np.ndarray:
    """A random DAG as a 0/1 matrix ``B`` (``B[i, j] = 1`` means the edge ``i -> j``).

    A uniformly random permutation ``order`` of the nodes is drawn first; every edge goes from an
    earlier to a later node of ``order``, so ``B`` is acyclic and ``order`` is a topological order.

    - ``"er"`` (Erdős–Rényi): each of the ``d(d-1)/2`` pairs gets an edge independently with
      probability ``p = expected_edges / (d(d-1)/2)``; the expected edge count is ``expected_edges``.
    - ``"sf"`` (scale-free, Barabási–Albert style): nodes arrive in reverse topological order; node
      ``t`` (``t = 1 … d-1``) attaches to ``min(m, t)`` distinct earlier arrivals chosen with
      probability proportional to ``degree + 1``, with ``m = max(1, round(expected_edges / d))``,
      and is made their *parent* (as in NOTEARS' generator, hubs collect many parents). The edge
      count is exactly ``sum_t min(m, t)`` (``d - 1`` for ``m = 1``).
    """
    check_params(d, expected_edges, graph_type)
    gen = _rng(rng)
    order = gen.permutation(d)
    A = np.zeros((d, d), dtype=np.int8)  # A[a, b] = 1: edge order[a] -> order[b], a < b
    if graph_type == "er":
        p = expected_edges / (d * (d - 1) / 2)
        A = np.triu(gen.random((d, d)) < p, k=1).astype(np.int8)
    else:
        m = _sf_attachments(d, expected_edges)
        if m > d - 1:
            raise ValueError(f"edges = {expected_edges:g} gives m = {m} > d - 1 for a scale-free graph")
        degree = np.zeros(d)
        # arrival index s is topological position d-1-s: arrivals are parents of earlier arrivals
        for s in range(1, d):
            k = min(m, s)
            weights = degree[:s] + 1.0
            targets = gen.choice(s, size=k, replace=False, p=weights / weights.sum())
            A[d - 1 - s, d - 1 - targets] = 1
            degree[targets] += 1
            degree[s] += k
    B = np.zeros((d, d), dtype=np.int8)
    B[np.ix_(order, order)] = A
    return B


def random_weights(B: np.ndarray, low: float = 0.5, high: float = 2.0, rng=None) -> np.ndarray:
    """Weights on the support of ``B``: ``W[i, j] = s * u`` with ``u ~ U[low, high]`` and a fair
    random sign ``s``, so nonzero weights lie in ``[-high, -low] ∪ [low, high]``; ``W[i, j]`` is
    the weight of the edge ``i -> j``.
    """
    B = np.asarray(B)
    if not (0 < low <= high):
        raise ValueError(f"weight range must satisfy 0 < low <= high (got {low:g}, {high:g})")
    gen = _rng(rng)
    magnitude = gen.uniform(low, high, size=B.shape)
    sign = np.where(gen.random(B.shape) < 0.5, -1.0, 1.0)
    return np.where(B != 0, sign * magnitude, 0.0)


def topological_order(W: np.ndarray) -> list[np.ndarray]:
    """The nodes of the DAG ``W`` (edge ``i -> j`` when ``W[i, j] != 0``) grouped in generations:
    generation 0 has no parents, generation ``k`` only has parents in earlier generations.

    Raises :class:`ValueError` if ``W`` has a cycle.
    """
    A = np.asarray(W) != 0
    d = A.shape[0]
    indeg = A.sum(axis=0).astype(np.int64)
    done = np.zeros(d, dtype=bool)
    levels = []
    while not done.all():
        level = np.flatnonzero((indeg == 0) & ~done)
        if level.size == 0:
            raise ValueError("the weight matrix has a directed cycle; it is not a DAG")
        levels.append(level)
        done[level] = True
        indeg -= A[level].sum(axis=0)
    return levels


def _noise(kind: str, shape: tuple[int, int], scale, gen: np.random.Generator) -> np.ndarray:
    """Noise of mean 0 and standard deviation ``scale`` (per column if ``scale`` is a vector).

    gaussian ``N(0, 1)``; exponential ``Exp(1) - 1``; gumbel ``(G - γ)·√6/π`` with ``G`` standard
    Gumbel and ``γ`` Euler's constant; uniform ``U[-√3, √3]`` — each then multiplied by ``scale``.
    """
    if kind == "gaussian":
        z = gen.standard_normal(shape)
    elif kind == "exponential":
        z = gen.standard_exponential(shape) - 1.0
    elif kind == "gumbel":
        z = (gen.gumbel(0.0, 1.0, shape) - _EULER_GAMMA) * (math.sqrt(6.0) / math.pi)
    elif kind == "uniform":
        z = gen.uniform(-math.sqrt(3.0), math.sqrt(3.0), shape)
    else:
        raise ValueError(f"noise must be one of {', '.join(NOISE_TYPES)} (got {kind!r})")
    return z * scale


def simulate_sem(
    W: np.ndarray, n: int, noise: str = "gaussian", noise_scale=1.0, rng=None
) -> np.ndarray:
    """``n`` rows of the linear SEM ``X = X W + N`` (``W[i, j]`` is the weight of ``i -> j``).

    ``N[:, j]`` has mean 0 and variance ``noise_scale**2`` (a scalar, or one value per column) for
    every noise type. Columns are filled one generation of the DAG at a time (parents before
    children): ``X[:, j] = Σ_{p ∈ pa(j)} X[:, p]·W[p, j] + N[:, j]``, summed in the parents' index
    order with elementwise operations, so the rows are the same on every CPU.
    """
    W = np.asarray(W, dtype=float)
    d = W.shape[0]
    if W.shape != (d, d):
        raise ValueError(f"W must be square (got shape {W.shape})")
    if n < 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    scale = np.asarray(noise_scale, dtype=float)
    if np.any(scale <= 0) or not np.all(np.isfinite(scale)):
        raise ValueError("noise scale must be finite and > 0")
    levels = topological_order(W)
    X = _noise(noise, (int(n), d), scale, _rng(rng))
    for level in levels[1:]:
        for j in level:
            # one exactly rounded multiply and add per parent, in index order (not a matrix product,
            # whose summation order depends on the BLAS kernel the CPU selects): the same rows on
            # every machine
            acc = np.zeros(X.shape[0])
            for p in np.flatnonzero(W[:, j]):
                acc += X[:, p] * W[p, j]
            X[:, j] += acc
    return X


def heterogeneous_weights(
    W: np.ndarray, P: int, rng=None, spread: float = 0.5, low: float | None = None
) -> list[np.ndarray]:
    """``P`` participant-specific weight matrices on the support of ``W`` with the signs of ``W``.

    For every edge ``i -> j`` and participant ``p``: ``|W_p[i, j]| = |W[i, j]| + δ`` with
    ``δ ~ U[-spread, spread]`` drawn independently, reflected at ``low`` (a value ``v < low``
    becomes ``2·low - v``) so that ``|W_p[i, j]| >= low`` without piling up mass at ``low``.
    ``low`` defaults to the smallest nonzero ``|W|``.
    """
    W = np.asarray(W, dtype=float)
    support = W != 0
    if low is None:
        low = float(np.abs(W[support]).min()) if support.any() else 0.0
    gen = _rng(rng)
    out = []
    for _ in range(int(P)):
        mag = np.abs(W) + gen.uniform(-spread, spread, size=W.shape)
        mag = np.where(mag < low, 2.0 * low - mag, mag)
        out.append(np.where(support, np.sign(W) * mag, 0.0))
    return out


@dataclass(frozen=True)
class Simulation:
    """The result of :func:`simulate`.

    ``W`` is the shared true weight matrix (``W[i, j]`` = weight of the edge ``i -> j``);
    ``weights[p]`` participant ``p``'s true weights (``W`` itself unless heterogeneous);
    ``shards[p]`` participant ``p``'s ``samples × d`` data; ``names`` the column names.
    """

    W: np.ndarray
    weights: tuple[np.ndarray, ...]
    shards: tuple[np.ndarray, ...]
    names: tuple[str, ...]
    seed: int
    heterogeneous: bool
    params: dict = field(default_factory=dict, compare=False)
    #: Each variable's noise sd when drawn from a range (``None``: all equal ``noise_scale``).
    noise_sds: Optional[np.ndarray] = field(default=None, compare=False)
    #: The factors ``s_j`` the observed columns were multiplied by (``None``: unscaled).
    column_factors: Optional[np.ndarray] = field(default=None, compare=False)
    #: ``W`` in the units of the scaled columns, ``W[i, j] · s_j / s_i`` (``None``: unscaled).
    W_scaled: Optional[np.ndarray] = field(default=None, compare=False)

    @property
    def B(self) -> np.ndarray:
        """The 0/1 adjacency matrix of the true DAG."""
        return (self.W != 0).astype(np.int8)

    @property
    def n_edges(self) -> int:
        return int(np.count_nonzero(self.W))


def simulate(
    d: int,
    expected_edges: float,
    *,
    participants: int = 1,
    samples: int = 1000,
    graph_type: str = "er",
    weight_range: Sequence[float] = (0.5, 2.0),
    noise: str = "gaussian",
    noise_scale=1.0,
    heterogeneous: bool = False,
    spread: float = 0.5,
    seed: int | None = None,
    column_scale=None,
) -> Simulation:
    """Draw a DAG, its weights and ``participants`` shards of ``samples`` rows each.

    Streams spawned from ``SeedSequence(seed)`` in this fixed order: graph, weights,
    heterogeneity, then one stream per participant's rows, and only when used a stream for the
    per-variable noise scales and one for the column scales (spawned after the first four, so a
    run without them draws exactly what it drew before these options existed).

    ``noise_scale``: one number (every variable's noise sd) or ``(LOW, HIGH)`` (each variable's sd
    uniform on ``[LOW, HIGH]``; ``LOW == HIGH`` is the same as one number). ``column_scale``:
    ``None`` or ``(LOW, HIGH)``: each observed column multiplied by a log-uniform factor; the
    shards are in the scaled units, ``W`` stays the unscaled SEM's weights and ``W_scaled`` holds
    ``W[i, j] · s_j / s_i``. ``seed=None`` draws fresh entropy,
    which is returned as ``Simulation.seed`` so the run can be repeated.
    """
    check_params(
        d,
        expected_edges,
        graph_type,
        participants=participants,
        samples=samples,
        weight_range=weight_range,
        noise=noise,
        noise_scale=noise_scale,
        spread=spread,
        column_scale=column_scale,
    )
    if seed is None:
        seed = int(np.random.SeedSequence().entropy)
    root = np.random.SeedSequence(seed)
    ss_graph, ss_weights, ss_hetero, ss_data = root.spawn(4)
    low, high = (float(v) for v in weight_range)
    B = random_dag(d, expected_edges, graph_type, np.random.default_rng(ss_graph))
    W = random_weights(B, low, high, np.random.default_rng(ss_weights))
    if heterogeneous:
        weights = tuple(
            heterogeneous_weights(W, participants, np.random.default_rng(ss_hetero), spread, low)
        )
    else:
        weights = (W,) * participants
    ns_low, ns_high = _as_range(noise_scale)
    if ns_low == ns_high:
        scales = ns_low
        noise_sds = None
    else:  # spawned after the four streams above: they are unchanged
        (ss_noise,) = root.spawn(1)
        noise_sds = np.random.default_rng(ss_noise).uniform(ns_low, ns_high, size=d)
        scales = noise_sds
    shards = tuple(
        simulate_sem(Wp, samples, noise, scales, np.random.default_rng(ss))
        for Wp, ss in zip(weights, ss_data.spawn(participants))
    )
    col_factors = None
    W_scaled = None
    if column_scale is not None:
        cs_low, cs_high = _as_range(column_scale)
        (ss_cols,) = root.spawn(1)
        u = np.random.default_rng(ss_cols).uniform(0.0, 1.0, size=d)
        col_factors = np.exp(math.log(cs_low) + u * (math.log(cs_high) - math.log(cs_low)))
        shards = tuple(X * col_factors for X in shards)
        W_scaled = W * (col_factors[None, :] / col_factors[:, None])
    params = dict(
        nodes=d,
        edges=expected_edges,
        graph=graph_type,
        participants=participants,
        samples=samples,
        weight_range=[low, high],
        noise=noise,
        noise_scale=float(ns_low) if noise_sds is None else [ns_low, ns_high],
        heterogeneous=heterogeneous,
        spread=float(spread) if heterogeneous else None,
    )
    if noise_sds is not None:
        params["noise_sds"] = [float(v) for v in noise_sds]
    if col_factors is not None:
        params["column_scale"] = [cs_low, cs_high]
        params["column_factors"] = [float(v) for v in col_factors]
    return Simulation(
        W, weights, shards, node_names(d), int(seed), bool(heterogeneous), params,
        noise_sds=noise_sds, column_factors=col_factors, W_scaled=W_scaled,
    )
