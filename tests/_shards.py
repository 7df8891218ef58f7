"""Small shard folders for tests of output-folder behaviour: every method learns from them in a
fraction of a second (local-notears on examples/tiny takes several seconds per run), and the
folder has the shape of examples/tiny/shards (``participant-01.csv`` … one file per participant)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: the example data set of the checkout (``examples/tiny``): ``shards/``, one CSV per participant, its
#: ``truth.csv`` and ``knowledge.txt``
TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny"

#: the columns of :func:`write_small_shards` (a chain a -> b -> c)
SMALL_COLUMNS = ("a", "b", "c")


def write_small_shards(dst: Path, participants: int = 4, rows: int = 30, seed: int = 0) -> Path:
    """``dst/participant-0k.csv`` for k = 1 … ``participants``: ``rows`` rows of a linear chain
    a -> b -> c with unit noise (fixed ``seed``). Returns ``dst``."""
    dst.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for k in range(participants):
        X = rng.normal(size=(rows, len(SMALL_COLUMNS)))
        X[:, 1] += 0.8 * X[:, 0]
        X[:, 2] += 0.8 * X[:, 1]
        body = "".join(",".join(repr(float(v)) for v in r) + "\n" for r in X)
        (dst / f"participant-{k + 1:02d}.csv").write_text(",".join(SMALL_COLUMNS) + "\n" + body)
    return dst
