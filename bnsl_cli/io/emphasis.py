"""What an edge's width, opacity and label say in ``bnsl show``'s pictures and in graph.dot (numpy only).

:func:`edge_emphasis` chooses, in this order: the edge's **strength** (the share of bootstrap runs
with the edge, either way: label, width and opacity) when the run has one; else its **standardised
weight** ``W[i, j]·sd(i)/sd(j)`` (the change of ``j``, in its standard deviations, per standard
deviation of ``i``) when the columns' spreads are known; else the weight as it is, the width by the
rank of ``|weight|`` (raw weights in different units — 256 next to 0.00045 — say nothing by their
size). Labels have 2 significant digits and never an exponent (:func:`short_number`); a 0/1 graph
has no labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Emphasis", "edge_emphasis", "short_number"]


def short_number(v: float, digits: int = 2) -> str:
    """``v`` with ``digits`` significant digits and never an exponent: ``1.5``, ``-0.31``,
    ``0.00045``, ``-0.00001``; ``256`` for values of 100 and more (an integer, not ``260``)."""
    v = float(v)
    if v == 0 or not np.isfinite(v):
        return "0" if v == 0 else str(v)
    if abs(v) >= 10 ** digits:
        return f"{v:.0f}"
    text = np.format_float_positional(v, precision=digits, unique=False, fractional=False, trim="-")
    return "0" if text in ("-0", "0") else text


@dataclass(frozen=True)
class Emphasis:
    """What an edge's width, opacity and label say (:func:`edge_emphasis`).

    ``what``: ``"strength"``, ``"standardised weight"``, ``"weight"`` or None (a 0/1 graph: no labels);
    ``value``: the labelled value per entry (d × d); ``level``: per entry in [0, 1], the width (and,
    for strength, the opacity) of its arrow; ``note``: one line for the picture's caption."""

    what: str | None
    value: np.ndarray
    level: np.ndarray
    note: str

    def label(self, i: int, j: int) -> str | None:
        if self.what is None:
            return None
        v = float(self.value[i, j])
        return f"{v:.2f}" if self.what == "strength" else short_number(v)


def _valid_sd(sd, d: int) -> np.ndarray | None:
    if sd is None:
        return None
    try:
        sd = np.asarray(sd, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        return None
    if sd.shape != (d,) or not np.all(np.isfinite(sd)) or not np.all(sd > 0):
        return None
    return sd


def edge_emphasis(W, strength=None, sd=None) -> Emphasis:
    """The width, opacity and label of every edge of ``W`` (``W[i, j]``: edge ``i → j``).

    ``strength``: d × d, the share of bootstrap runs holding the edge ``i → j`` either way (in
    [0, 1]), read where ``W`` has an edge; ``sd``: the columns' standard deviations (the run's
    ``standardize.sd``), used when there is no strength. See the module docstring."""
    W = np.asarray(W, dtype=float)
    d = W.shape[0]
    E = W != 0
    if strength is not None:
        S = np.clip(np.where(E, np.nan_to_num(np.asarray(strength, dtype=float)), 0.0), 0.0, 1.0)
        return Emphasis("strength", S, S, "label, width and opacity: strength (share of bootstrap runs with the edge)")
    sd = _valid_sd(sd, d)
    if sd is not None:
        V = np.where(E, W * sd[:, None] / sd[None, :], 0.0)
        top = float(np.abs(V).max()) if E.any() else 1.0
        level = np.abs(V) / top if top > 0 else E.astype(float)
        return Emphasis("standardised weight", V, level,
                        "label: standardised weight W[i, j]·sd(i)/sd(j); width grows with its size")
    mags = np.abs(W[E])
    if mags.size == 0 or np.all(mags == mags[0]):
        return Emphasis(None, W.copy(), E.astype(float), "")
    # width by the rank of |weight| (ties share a rank): raw weights in different units do not compare
    uniq = np.unique(mags)
    rank = (np.searchsorted(uniq, mags) + 1) / uniq.size
    level = np.zeros_like(W)
    level[E] = rank
    return Emphasis("weight", W.copy(), level, "label: weight W[i, j] (raw units); width by the rank of |weight|")


