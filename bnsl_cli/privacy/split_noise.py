"""Split DP noise over securely aggregated sites (``bnsl serve --secure-sum --split-noise``).

With a secure sum the coordinator sees only ``Σ_p y_p``. A Gaussian release that is summed can then
have each of the ``P`` sites add ``N(0, σ²/P)`` so that the sum carries ``N(0, σ²)``: the pooled value
has √P times less noise than when every site adds ``σ`` itself. The guarantee of a site holds only
against a party that sees nothing but the sum, and only while no other site colludes with it
(colluders know their own shares and can subtract them) — so:

- only releases whose sum is all that leaves the sites, and whose every site's noise is in the
  **same public units**, may be split. Today that is fed-moments' moment matrix when it is released
  on rows scaled by the pooled standard deviations (a public value every site receives), see
  :mod:`bnsl_cli.federated.methods.moments`. The polish's moments scale each site's noise by its own
  released spreads: the other sites' shares would not be in its units, so they are never split;
- the release list marks a split release (``PlannedRelease.split = P``), each site's ledger records
  it with the noise scale of the **sum** and ``split = P`` (its cost is the same as an unsplit
  release with that noise), and the event carries :data:`~bnsl_cli.privacy.ledger.SPLIT_ASSUMPTION`;
- a site must opt in (``bnsl join --accept-split-noise``), and refuses a split plan without a secure
  sum; an in-process run (``bnsl learn``, which has no secure sum) refuses it
  (:func:`check_split_allowed`).
"""

from __future__ import annotations

from dataclasses import replace

from bnsl_cli.errors import OptionError
from bnsl_cli.privacy.releases import ReleaseKind

__all__ = ["SPLITTABLE", "split_noise_plan", "split_of", "check_split_allowed"]

#: Release kinds that may be split (see the module docstring).
SPLITTABLE = {ReleaseKind.MOMENT_MATRIX}


def split_of(plan) -> int:
    """How many sites share the noise of the plan's split releases (1: none is split)."""
    pv = getattr(plan, "privacy", None)
    if pv is None:
        return 1
    return max((int(r.split) for r in pv.releases), default=1)


def split_noise_plan(plan):
    """``plan`` with its splittable releases split over its ``P`` participants; an
    :class:`OptionError` naming the option when the plan has none or fewer than two participants."""
    if plan.privacy is None:
        raise OptionError("--split-noise: needs --dp (it splits DP noise across the sites)")
    if plan.P < 2:
        raise OptionError("--split-noise: needs at least two sites")
    if not any(r.kind in SPLITTABLE for r in plan.privacy.releases):
        raise OptionError(
            f"--split-noise: --method {plan.method} has no release that can be split (only fed-moments' moment "
            "matrix: the other summed releases scale each site's noise by its own spreads)"
        )
    releases = tuple(replace(r, split=plan.P) if r.kind in SPLITTABLE else r for r in plan.privacy.releases)
    return replace(plan, privacy=replace(plan.privacy, releases=releases))


def check_split_allowed(plan, secure_sum: bool, where: str = "this run") -> None:
    """An :class:`OptionError` when ``plan`` splits noise but ``secure_sum`` is off (``bnsl learn``
    in process never has a secure sum), or its split count is not its number of participants."""
    k = split_of(plan)
    if k == 1:
        return
    if not secure_sum:
        raise OptionError(
            f"{where}: the plan splits DP noise across the sites, which is only private under a secure sum "
            "(bnsl serve --secure-sum --split-noise); bnsl learn cannot use it"
        )
    if k != plan.P:
        raise OptionError(f"{where}: the plan splits noise over {k} sites but has {plan.P}")
