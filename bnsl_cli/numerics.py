"""Numerical building blocks: the acyclicity function h(W), BLAS thread capping.

``h(W) = tr(exp(W ∘ W)) − d`` is zero exactly when the weighted graph ``W`` (``W[i, j]`` = edge
``i → j``) is acyclic, and ``∇h(W) = exp(W ∘ W)ᵀ ∘ 2W`` (Zheng et al. 2018).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import numpy as np
import scipy.linalg

__all__ = [
    "acyclicity",
    "acyclicity_value",
    "cyclic_blocks",
    "acyclicity_blocks",
    "single_blas_thread",
    "second_moment",
]


def acyclicity(W: np.ndarray) -> tuple[float, np.ndarray]:
    """Return ``(h(W), ∇h(W))``. When ``exp`` overflows, ``h`` is ``+inf`` (gradient zeros), silently."""
    A = W * W
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            E = scipy.linalg.expm(A)
        except (ValueError, OverflowError, np.linalg.LinAlgError):
            return float("inf"), np.zeros_like(W)
    if not np.isfinite(E).all():
        return float("inf"), np.zeros_like(W)
    h = float(np.trace(E)) - W.shape[0]
    return h, E.T * (2.0 * W)


def cyclic_blocks(pattern: np.ndarray) -> list[np.ndarray]:
    """Node sets of the strongly connected components with ≥ 2 nodes of the graph ``pattern != 0``.

    Only closed walks count in ``h``, and a closed walk stays inside one such component, so for any
    ``W`` whose non-zeros lie in ``pattern``: ``h(W) = Σ_C [tr exp(A_CC) − |C|]`` with ``A = W ∘ W``,
    and ``∇h(W)_ij = 2 W_ij exp(A_CC)_ji`` when ``i, j`` lie in one component ``C``, else 0."""
    import scipy.sparse
    import scipy.sparse.csgraph

    P = scipy.sparse.csr_matrix(np.asarray(pattern) != 0)
    n_comp, labels = scipy.sparse.csgraph.connected_components(P, directed=True, connection="strong")
    sizes = np.bincount(labels, minlength=n_comp)
    order = np.argsort(labels, kind="stable")
    bounds = np.cumsum(np.concatenate([[0], sizes]))
    return [order[bounds[c] : bounds[c + 1]] for c in range(n_comp) if sizes[c] > 1]


def acyclicity_blocks(W: np.ndarray, blocks: list[np.ndarray]) -> tuple[float, np.ndarray]:
    """``(h(W), ∇h(W))`` computed on the cyclic blocks of W's support (see :func:`cyclic_blocks`);
    exact when every non-zero of W lies in the pattern the blocks were computed from."""
    G = np.zeros_like(W)
    h = 0.0
    for idx in blocks:
        sub = np.ix_(idx, idx)
        hb, gb = acyclicity(W[sub])
        if not np.isfinite(hb):
            return float("inf"), np.zeros_like(W)
        h += hb
        G[sub] = gb
    return h, G


def acyclicity_value(W: np.ndarray) -> float:
    """``h(W)`` only."""
    return acyclicity(W)[0]


def second_moment(X: np.ndarray, n_total: int) -> np.ndarray:
    """``Xᵀ X / n_total`` (the caller centres ``X`` first)."""
    return (X.T @ X) / float(n_total)


@contextlib.contextmanager
def single_blas_thread() -> Iterator[None]:
    """Cap BLAS/OpenMP thread pools at one thread inside the block.

    On shared 2-core machines a multi-threaded BLAS made a 20 × 20 ``expm`` 250× slower.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        yield
        return
    with threadpool_limits(limits=1):
        yield
