"""Simulated participant tables shared by the tests."""

from bnsl_cli.io.table import Table
from bnsl_cli.simulate import simulate


def simulated_tables(d: int, participants: int, samples: int, seed: int):
    """``(sim, tables)``: an ER DAG with d expected edges and one table per participant."""
    sim = simulate(d, d, participants=participants, samples=samples, seed=seed)
    return sim, [Table(X, tuple(sim.names), f"p{k}") for k, X in enumerate(sim.shards)]
