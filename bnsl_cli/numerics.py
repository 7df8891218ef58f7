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

__all__ = ["acyclicity", "acyclicity_value", "single_blas_thread", "second_moment"]


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
