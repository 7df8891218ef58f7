"""Column kinds, part of the data's public shape: which variables are continuous and which categorical,
with their levels (:class:`ColumnKinds`). A plan carries it; the coordinator reads it, and a site uses it
to count its own rows (:meth:`ColumnKinds.tables`). Reading and encoding the columns is
:mod:`bnsl_cli.io.kinds`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bnsl_cli.errors import InputDataError, OptionError

__all__ = ["CONTINUOUS", "CATEGORICAL", "ColumnKinds", "combine_site_levels", "site_specific_levels"]

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


def combine_site_levels(variables, sites, max_levels: int) -> "ColumnKinds | None":
    """The plan's column kinds from what the sites declared (a networked run without ``--dp``): the
    ``variables`` in order, each categorical one with the union of the sites' levels (sorted). ``sites``:
    per site ``(name, levels)``, ``levels`` mapping its categorical columns to its own levels. ``None``
    when no site declared a categorical column among ``variables``. Refused, naming the column and the
    sites: a column categorical at one site and numeric at another, more than ``max_levels`` levels
    in all, one level in all. Returns the kinds and, for a column whose levels no two sites share (it
    names the site rather than measuring a variable), nothing more: the caller warns."""
    variables = list(variables)
    cat = [v for v in variables if any(v in lv for _, lv in sites)]
    if not cat:
        return None
    for v in cat:
        numeric = [name for name, lv in sites if v not in lv]
        if numeric:
            having = next(name for name, lv in sites if v in lv)
            raise InputDataError(
                f"column {v!r} is categorical at site {having!r} but numeric at site {numeric[0]!r}: every site declares "
                f"it the same way (bnsl join --categorical {v} at the sites that read it as numbers)"
            )
    levels = {}
    for v in cat:
        union = sorted(set().union(*(set(map(str, lv[v])) for _, lv in sites)))
        if len(union) > max_levels:
            raise OptionError(
                f"column {v!r} has {len(union)} levels over the sites, more than --max-levels {max_levels}: an identifier "
                f"or free text is not a variable to learn (leave it out with --drop {v}, or raise --max-levels)"
            )
        if len(union) < 2:
            raise InputDataError(
                f"column {v!r} has one level ({union[0] if union else ''!r}) at every site: it carries no information "
                f"about the graph (leave it out with --drop {v})"
            )
        levels[v] = tuple(union)
    return ColumnKinds(tuple(variables), tuple((v, levels[v]) for v in variables if v in levels))


def site_specific_levels(kinds: ColumnKinds, sites) -> list:
    """The categorical columns of ``kinds`` whose levels no two of ``sites`` (``(name, levels)`` pairs)
    share: each level occurs at one site only, so the column names the site (the in-process run's
    warning, :func:`bnsl_cli.io.kinds.encode`)."""
    out = []
    for v, lv in kinds.levels:
        sets = [set(map(str, s[v])) for _, s in sites if v in s]
        if len(sets) > 1 and sum(len(x) for x in sets) == len(set().union(*sets)):
            out.append((v, len(lv)))
    return out
