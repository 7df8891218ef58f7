"""The ADMM methods (``fed-sparse``: Fed-Sparse-BNSL, ADMM + PGCD, private: DP-PGCD; ``fed-bnsl``:
Fed-BNSL, Ng & Zhang 2022, private: one noisy covariance per participant), one package by job:
:mod:`.driver` (the coordinator side around the round loop, the release lists, the reply rules),
:mod:`.coordinator` (the consensus engine: W-step, duals, penalties), :mod:`.protocol` (the round loop),
:mod:`.update_guard` (the coordinator's check of the updates), :mod:`.site` (the participants and what
they accept of a broadcast), :mod:`.dp_site` (the private participants and their releases). The driver
imports no participant code; the participant factories are bound in the registry.
"""

from bnsl_cli.federated.methods.admm.driver import (
    ENCODING,
    coordinator_for,
    dp_fed_bnsl_builder,
    dp_pgcd_builder,
    drive_admm,
    reply_rules,
    update_guard,
)

__all__ = [
    "ENCODING",
    "coordinator_for",
    "update_guard",
    "drive_admm",
    "reply_rules",
    "dp_pgcd_builder",
    "dp_fed_bnsl_builder",
]
