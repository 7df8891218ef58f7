"""Solvers apart from the protocol: arrays in, arrays out (no messages, no plan)."""
