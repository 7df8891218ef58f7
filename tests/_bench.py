"""Importing the benchmark scripts (``benchmarks/`` is no package) in tests."""

from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@contextlib.contextmanager
def bench_modules(*names: str):
    """The modules ``benchmarks/<name>.py``, imported with ``benchmarks/`` on ``sys.path`` for the block."""
    sys.path.insert(0, str(BENCH))
    try:
        yield tuple(importlib.import_module(n) for n in names)
    finally:
        sys.path.remove(str(BENCH))
