"""Options shared by ``bnsl serve`` and ``bnsl join``: TLS credentials and ``--insecure``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from bnsl_cli.cli import common


def credentials(ca: Optional[Path], cert: Optional[Path], key: Optional[Path], insecure: bool, host: str, where: str,
                role: Optional[str] = None):
    """Mutual-TLS credentials from ``--ca/--cert/--key``, or ``None`` with ``--insecure`` (loopback
    only, announced on stderr). ``role`` (``"serverAuth"`` for serve, ``"clientAuth"`` for join):
    the certificate must allow it (a swapped certificate is a usage error naming the file)."""
    from bnsl_cli.net.tls import is_loopback, load_party

    given = [x is not None for x in (ca, cert, key)]
    if insecure:
        if any(given):
            raise common.fail("--insecure and --ca/--cert/--key exclude each other", 2)
        if not is_loopback(host):
            raise common.fail(
                f"--insecure is only allowed on a loopback address (127.0.0.1, ::1, localhost), not {host!r} "
                f"({where}); use mutual TLS: --ca, --cert, --key (bnsl certs makes a set for trying it out)",
                2,
            )
        common.err_console.print(
            "[bold yellow]warning:[/] --insecure: plaintext, unauthenticated gRPC on loopback; "
            "never use it between machines", soft_wrap=True,
        )
        return None
    if not all(given):
        missing = [n for n, g in zip(("--ca", "--cert", "--key"), given) if not g]
        raise common.fail(
            f"mutual TLS needs --ca, --cert and --key (missing {', '.join(missing)}); "
            "bnsl certs DIR --parties coordinator,site1,… makes a set; --insecure for loopback tests only",
            2,
        )
    creds = load_party(ca, cert, key)
    if role is not None:
        from bnsl_cli.net.identity import check_role

        check_role(creds.cert, role, "--cert", cert)
    return creds
