"""bnsl as a Flower app: the same run, the same bytes and the same site guard over a Flower federation.

Needs the optional extra (Python ≥ 3.11): ``pip install 'bnsl-cli[flower]'`` (it brings flwr 1.42; see
``docs/federation.md``, section "Flower"). Nothing here imports ``flwr`` at module level except
:mod:`.app`, the module Flower loads; the rest of bnsl never imports this package.

Modules:

- :mod:`.envelope`: one bnsl frame (:mod:`bnsl_cli.net.frames`, the same bytes ``serve``/``join``
  send) carried as bytes inside a Flower ``Message``'s ``ConfigRecord``, with the run tag and the
  per-site sequence number;
- :mod:`.fleet`: :class:`~.fleet.FlowerFleet`, the coordinator's transport: a
  :class:`~bnsl_cli.net.fleet.NetworkFleet` (its reply validation, secure-sum unmasking, summaries)
  whose frames travel through a Flower ``Grid`` instead of bnsl's gRPC service;
- :mod:`.state`: a site's run state persisted in its node's state directory (every message may start
  a fresh ClientApp process; nothing can reset the ledger);
- :mod:`.site`: the ClientApp's answer to one message: the site's limits from the SuperNode's
  ``node_config``, then ``join``'s guard (:class:`~bnsl_cli.net.policy.SiteGuard`,
  :class:`~bnsl_cli.net.policy.SpendGuard`) and transcript (:class:`~bnsl_cli.net.transcript.Transcript`);
- :mod:`.server`: the ServerApp's run: options from the run config, the plan resolved from the sites'
  HELLOs as ``bnsl serve`` resolves it, ``run(plan, fleet)``, the run folder;
- :mod:`.app`: the ``ServerApp`` and ``ClientApp`` objects (``bnsl_cli.net.flower.app:server_app``,
  ``bnsl_cli.net.flower.app:client_app``).
"""

from __future__ import annotations

from bnsl_cli.errors import BnslError

__all__ = ["FLWR_SERIES", "need_flwr"]

#: The Flower minor series this app was written and tested against (``pyproject.toml``'s extra pins it).
FLWR_SERIES = "1.42"


def need_flwr():
    """Import flwr, or explain how to install the extra."""
    try:
        import flwr
    except ImportError:
        raise BnslError(
            "the Flower app needs the optional extra (Python >= 3.11): pip install 'bnsl-cli[flower]' "
            "(docs/federation.md, section Flower)"
        ) from None
    return flwr
