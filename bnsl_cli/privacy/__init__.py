"""Differential privacy: the zCDP ledger, the accountant, the mechanisms."""
