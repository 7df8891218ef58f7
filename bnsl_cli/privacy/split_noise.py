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

__all__ = ["SPLITTABLE", "NOISE_MODES", "split_noise_plan", "split_of", "check_split_allowed",
           "distribute_noise", "trust_statement"]

#: Release kinds that may be split (see the module docstring).
SPLITTABLE = {ReleaseKind.MOMENT_MATRIX, ReleaseKind.SCALE_HISTOGRAM, ReleaseKind.CENTRE_HISTOGRAM,
              ReleaseKind.WHITENED_MOMENTS}
NOISE_MODES = ("auto", "distributed", "per-site")


def distribute_noise(privacy, method: str, distributable: bool, sites: int, noise: str = "auto", tolerance: int = 0):
    """The privacy plan with its summed releases' noise distributed over ``sites`` sites when
    ``noise`` asks for it (``auto``: when the method's releases are ``distributable``, the registry's
    ``distributed_noise``; ``per-site``: never).

    Distributed with collusion tolerance ``t``: every release keeps its calibrated noise ``σ`` and
    gets ``split = sites − t``: each site adds ``N(0, σ²/(sites − t))``, so the shares of any
    ``sites − t`` sites alone already carry ``σ²`` (the sum of all carries ``σ²·sites/(sites − t)``).
    The cost per release is that of ``σ`` either way; what changes is who must be trusted."""
    if noise not in NOISE_MODES:
        raise OptionError(f"--noise: unknown value {noise!r}; use {', '.join(NOISE_MODES)}")
    t = tolerance
    if isinstance(t, bool) or int(t) != t or t < 0:
        raise OptionError(f"--collusion-tolerance must be a whole number >= 0, got {t!r}")
    t = int(t)
    on = noise == "distributed" or (noise == "auto" and distributable)
    if noise == "distributed" and not distributable:
        raise OptionError(
            f"--noise distributed: --method {method} has releases whose noise is in each site's own units "
            "(a method with sum-shaped releases in public units can distribute its noise)"
        )
    if t and not on:
        raise OptionError("--collusion-tolerance applies to distributed noise only (--noise distributed)")
    if not on or sites < 2:
        if t and sites < 2:
            raise OptionError("--collusion-tolerance needs at least two sites")
        return privacy
    if t >= sites:
        raise OptionError(f"--collusion-tolerance {t}: must be below the number of sites ({sites})")
    releases = tuple(replace(r, split=sites - t) if r.kind in SPLITTABLE else r for r in privacy.releases)
    return replace(privacy, releases=releases)


def trust_statement(split: int, sites: int) -> str:
    """What a distributed-noise release's guarantee rests on, in one sentence."""
    t = sites - split
    return (
        f"distributed noise: each of the {sites} sites added 1/{split} of the calibrated noise variance and the "
        f"coordinator saw only the secure sum (honest-but-curious coordinator); the guarantee holds against the "
        f"coordinator together with up to {t} colluding site(s), whose shares it could subtract; a site that "
        "drops out stops the run (the masks do not cancel), nothing is released without it"
    )


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
    if k > plan.P:
        raise OptionError(f"{where}: the plan splits noise over {k} sites but has {plan.P}")
