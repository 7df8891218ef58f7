"""fed-suffstats' edge confidence under ``--dp --bootstrap B``: the released moments resampled with
their sampling noise and their (known) release noise, the finished graph learned again on each —
post-processing of released values only, so the run spends exactly the ε of the same run without it.

The replicate moments (parametric bootstrap around the release):

- ``C``: the last stage's moments ``G`` (standardised under ``--standardize``) projected to the
  positive semi-definite cone (eigenvalues floored at 1e-9 of the largest);
- sampling: the second moments of ``n`` rows of ``N(0, C)``, a Wishart draw ``W(n, C)/n``
  (Bartlett's decomposition);
- release noise: ``τ·A N Aᵀ`` with ``N`` symmetric, off-diagonal entries ``N(0, 1)`` and diagonal
  ``N(0, 2)`` (the isometric stage noise in the whitened basis) and ``A = diag(s̃)L`` the stage's basis
  (divided by ``sd_a sd_b`` for standardised moments): the variance of every entry is the one
  :func:`~bnsl_cli.federated.methods.suffstats.driver.entry_noise_std` gives.

The draws (:func:`bnsl_cli.confidence.wishart_moments`, :func:`~bnsl_cli.confidence.symmetric_normal`)
are the coordinator's post-processing, not DP noise: they live outside ``privacy/`` and ``federated/``,
whose every noise draw goes through :func:`bnsl_cli.privacy.mechanisms.sample_noise`.

Each replicate's graph is the noise-aware search and the finished-graph choice of the run itself
(:func:`~bnsl_cli.federated.methods.suffstats.candidates.final_graph`), weights in original units.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from bnsl_cli.confidence import EdgeCounts, Replicates, resampling_rng, symmetric_normal, wishart_moments
from bnsl_cli.errors import BnslError
from bnsl_cli.solvers.moment_search import learn_from_moments
from bnsl_cli.stats import PSD_FLOOR, project_psd

__all__ = ["SOURCE", "resample_release"]

SOURCE = ("the released moments resampled with their sampling noise (a Wishart draw at the pooled rows) and "
          "their known release noise, the graph learned again on each (post-processing: no further release)")


def resample_release(plan, G: np.ndarray, n: float, tau: float, basis: Optional[np.ndarray],
                     sd: Optional[np.ndarray], learn: Callable) -> Replicates:
    """``plan.bootstrap`` replicates of the release (see the module docstring). ``basis``: the stage's
    ``A = diag(s̃)L`` (``None``: no release noise); ``sd``: the spreads the moments were standardised by
    (``None``: raw units); ``learn(res, G_b)`` the finished graph's weights (original units) from the
    search's result on ``G_b``."""
    rng = resampling_rng(plan.seed)
    C = project_psd(G, PSD_FLOOR)
    d = C.shape[0]
    H = None if basis is None else basis @ basis.T
    Hs = None if H is None or sd is None else H / np.outer(sd, sd)
    graphs, failures = [], []
    for b in range(int(plan.bootstrap)):
        Gb = wishart_moments(C, n, rng)
        if tau and basis is not None:
            E = tau * (basis @ symmetric_normal(d, rng) @ basis.T)
            Gb = Gb + (E if sd is None else E / np.outer(sd, sd))
        try:
            res = learn_from_moments(Gb, n, tau, H=Hs if sd is not None else H, knowledge=plan.knowledge)
            graphs.append(learn(res, Gb))
        except (BnslError, ValueError, np.linalg.LinAlgError) as exc:
            failures.append((b, str(exc)))
    counts = EdgeCounts.of(graphs) if graphs else None
    return Replicates(counts, int(plan.bootstrap), tuple(failures), SOURCE)
