"""bnsl: federated, optionally differentially private, Bayesian network structure learning.

Orientation convention used everywhere: entry ``W[i, j]`` of a weighted adjacency matrix is the
weight of the edge from variable ``i`` to variable ``j`` (rows are parents, columns children).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
