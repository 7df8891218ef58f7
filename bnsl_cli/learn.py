"""The library's learning front door (kept for scripts and tests): ``learn(tables, options)``.

Everything lives in :mod:`bnsl_cli.plan` (options and the resolved run plan) and
:mod:`bnsl_cli.run` (the one pipeline); this module re-exports the public names.
"""

from __future__ import annotations

from bnsl_cli.federated.methods import METHODS, method_spec
from bnsl_cli.plan import DPConfig, LearnConfig, RunPlan, Shapes, default_delta, default_steps
from bnsl_cli.run import SCHEMA_VERSION, LearnResult, learn, run, run_tables

__all__ = [
    "METHODS",
    "LearnConfig",
    "DPConfig",
    "RunPlan",
    "Shapes",
    "LearnResult",
    "learn",
    "run",
    "run_tables",
    "default_lambda",
    "default_steps",
    "default_delta",
    "SCHEMA_VERSION",
]


def default_lambda(method: str) -> float:
    """The method's default ℓ₁ weight (non-private)."""
    return method_spec(method).default_lambda
