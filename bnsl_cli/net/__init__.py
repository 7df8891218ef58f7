"""Multi-site federation over gRPC: the coordinator is a gRPC server, each site dials out.

Needs the optional extra ``pip install 'bnsl-cli[net]'`` (grpcio). Modules:
:mod:`.frames` (the control/data frame encoding), :mod:`.tls` (certificates, credentials),
:mod:`.fleet` (:class:`NetworkFleet`, the coordinator side), :mod:`.site` (a site's loop),
:mod:`.transcript` (a site's audit log). The protocol is described in ``docs/federation.md``.
"""
