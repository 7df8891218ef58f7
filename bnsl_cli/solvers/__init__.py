"""Solvers: arrays in, arrays out (no messages, no ledger)."""
