"""The secure sum of a networked run (``bnsl serve``, the Flower app): whether it is on, by the rule
that gives ``bnsl learn``'s layout by default."""

from __future__ import annotations

import math
from typing import Optional

from bnsl_cli.errors import OptionError

__all__ = ["resolve_secure_sum"]


def resolve_secure_sum(cfg, spec, participants: int, secure_sum: Optional[bool], *,
                       off: str = "--no-secure-sum", keep: str = "drop --no-secure-sum") -> tuple:
    """Whether the run uses the secure sum, and a warning line (``None``: none), from the user's
    choice ``secure_sum`` (``None``: neither on nor off was asked for; ``off`` names how "off" was
    asked, ``keep`` how to take it back, in the messages).

    The default is the layout ``bnsl learn`` uses for the same options: the secure sum is on when the
    run is private, its method distributes the noise of its summed releases (the registry's
    ``distributed_noise``), there are two or more sites and ``--noise`` is not ``per-site`` — the
    sites then add distributed noise under the secure sum, and the outputs are ``bnsl learn``'s byte
    for byte (learn masks the shares in process the same way). Everywhere else it is off, as in
    learn, whose outputs are then the same bytes too. Off where the default would distribute the noise
    plans per-site noise (``cfg.dp.noise`` set to ``per-site``) and returns the warning that names its
    √P cost; with ``--noise distributed`` or ``--collusion-tolerance`` it is an :class:`OptionError`
    (a site's share alone is not private)."""
    dp = cfg.dp
    distributes = dp is not None and spec.distributed_noise and participants >= 2 and dp.noise != "per-site"
    if secure_sum is None:
        return distributes, None
    if secure_sum:
        return True, None
    if dp is not None and dp.noise == "distributed":
        raise OptionError(f"--noise distributed needs the secure sum (a site's share alone is not private); {keep}")
    if dp is not None and dp.collusion_tolerance and spec.distributed_noise:
        raise OptionError(f"--collusion-tolerance applies to distributed noise, which needs the secure sum; {keep}")
    if not distributes:
        return False, None
    dp.noise = "per-site"  # without a secure sum the coordinator would see every share
    root = math.sqrt(participants)
    return False, (
        f"{off}: per-site noise — every site adds all of the noise, so the pooled statistics carry "
        f"√P = √{participants} ≈ {root:.2f} times the noise std of the default distributed noise (bnsl learn's "
        f"layout); expect a worse graph at the same ε"
    )
