"""Column kinds, part of the data's public shape: which variables are continuous and which categorical,
with their levels (:class:`ColumnKinds`). A plan carries it; the coordinator reads it, and a site uses it
to count its own rows (:meth:`ColumnKinds.tables`). Reading and encoding the columns is
:mod:`bnsl_cli.io.kinds`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CONTINUOUS", "CATEGORICAL", "ColumnKinds"]

CONTINUOUS = "continuous"
CATEGORICAL = "categorical"


@dataclass(frozen=True)
class ColumnKinds:
    """The variables (``names``, in order) and the levels of each categorical one (``levels``:
    name -> sorted tuple of level texts). Continuous variables are one column of the expanded data; a
    categorical one with ``K`` levels is ``K − 1`` indicator columns named ``name=level`` (the first
    level is the reference)."""

    names: tuple
    levels: tuple  # ((name, (level, ...)), ...) in the order of ``names``

    @property
    def categorical(self) -> dict:
        return dict(self.levels)

    def kind(self, name: str) -> str:
        return CATEGORICAL if name in self.categorical else CONTINUOUS

    @property
    def has_categorical(self) -> bool:
        return bool(self.levels)

    def expanded_names(self) -> tuple:
        out = []
        cat = self.categorical
        for name in self.names:
            if name in cat:
                out.extend(f"{name}={lev}" for lev in cat[name][1:])
            else:
                out.append(name)
        return tuple(out)

    def blocks(self) -> list:
        """Per variable, the indices of its columns in the expanded data."""
        out, k = [], 0
        cat = self.categorical
        for name in self.names:
            w = len(cat[name]) - 1 if name in cat else 1
            out.append(list(range(k, k + w)))
            k += w
        return out

    def level_counts(self) -> list:
        """Per variable, its number of levels (1 for a continuous one)."""
        cat = self.categorical
        return [len(cat[n]) if n in cat else 1 for n in self.names]

    def codes(self, X: np.ndarray, j: int) -> np.ndarray:
        """The level index (0 … K − 1) of categorical variable ``j`` in every row of the expanded data
        ``X`` (0: the reference level, no indicator set)."""
        block = X[:, self.blocks()[j]]
        return np.where(block.sum(axis=1) > 0.5, 1 + np.argmax(block, axis=1), 0).astype(np.int64)

    def tables(self, X: np.ndarray, groups) -> np.ndarray:
        """The contingency tables of ``groups`` (tuples of categorical variables) over the rows of the
        expanded data ``X``, each in C order over its variables' levels, one after another."""
        K = self.level_counts()
        out = []
        for g in groups:
            flat = np.zeros(X.shape[0], dtype=np.int64)
            for v in g:
                flat = flat * K[v] + self.codes(X, v)
            out.append(np.bincount(flat, minlength=int(np.prod([K[v] for v in g]))).astype(float))
        return np.concatenate(out) if out else np.zeros(0)

    def to_dict(self) -> dict:
        return {"names": list(self.names),
                "kinds": [self.kind(n) for n in self.names],
                "levels": {n: list(lv) for n, lv in self.levels}}

    @classmethod
    def from_dict(cls, entry: dict) -> "ColumnKinds":
        names = tuple(str(n) for n in entry["names"])
        lv = {str(k): tuple(str(x) for x in v) for k, v in dict(entry.get("levels") or {}).items()}
        return cls(names, tuple((n, lv[n]) for n in names if n in lv))
