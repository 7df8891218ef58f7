"""The value a coordinator driver hands back to the run (a leaf: nothing of the package imported)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

__all__ = ["Outcome"]


@dataclass
class Outcome:
    """What a coordinator driver hands back: the raw estimate, the final DAG, the method's report
    fields, and every participant's summary (from ``fleet.finish()``)."""

    W_raw: Optional[np.ndarray]
    W: np.ndarray
    report: dict
    summaries: list
    local: Optional[list] = None  # per-participant DAGs (local-notears)
