"""Fed-Sparse-BNSL's local update on a second-moment matrix, row-free: PGCD from the previous ``B_p`` and
the changed coordinates as the sparse update's entries. A site (:class:`~bnsl_cli.federated.methods.admm.site.SparseParticipant`,
on its own moments) and the coordinator's holders of released moments
(:mod:`bnsl_cli.federated.methods.admm.on_moments`) both take this step."""

from __future__ import annotations

import numpy as np

from bnsl_cli.federated.messages import SparseEntries
from bnsl_cli.solvers.pgcd import PGCDResult, pgcd

__all__ = ["sparse_step"]


def sparse_step(S, B, beta, W, rho2: float, lam: float, steps: int, tol: float, forbidden=None,
                required=None, SB=None) -> tuple[PGCDResult, SparseEntries]:
    """At most ``steps`` PGCD steps on ``S`` from ``B`` (:func:`~bnsl_cli.solvers.pgcd.pgcd`; ``SB``:
    ``times_sparse(S, B)`` when the caller holds it), and the entries of ``res.B`` at the coordinates
    that changed (int32 indices, float64 values)."""
    res = pgcd(S, B, beta, W, rho2, lam, steps, tol, forbidden=forbidden, required=required, SB=SB)
    r, c = np.nonzero(res.changed)
    return res, SparseEntries(r.astype(np.int32), c.astype(np.int32), res.B[r, c].astype(np.float64))
