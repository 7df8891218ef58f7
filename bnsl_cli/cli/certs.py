"""``bnsl certs``: a throwaway CA and one certificate per party, for trying mutual TLS."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from bnsl_cli.cli import common


def command(
    directory: Path = typer.Argument(..., metavar="DIR", help="Directory to write ca.pem, NAME.pem and NAME.key into."),
    parties: str = typer.Option(
        ..., "--parties", help="Comma-separated party names, e.g. coordinator,site1,site2,site3: the one named as "
        "--coordinator gets the coordinator's (server) certificate, every other one a site (client) certificate.",
    ),
    coordinator: str = typer.Option(
        "coordinator", "--coordinator", help="Which of --parties is the coordinator (bnsl serve).",
    ),
    hostname: Optional[List[str]] = typer.Option(
        None, "--hostname", help="DNS name or IP the sites dial the coordinator at (repeatable): SANs of the "
        "coordinator's certificate only; localhost and 127.0.0.1 are always included.",
    ),
    days: float = typer.Option(30.0, "--days", help="Validity in days."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing certificate files in DIR."),
    quiet: bool = typer.Option(False, "--quiet", "-q", envvar="BNSL_QUIET", help="No summary line on stderr."),
) -> None:
    """Make a throwaway CA and one certificate + key per party (for bnsl serve / bnsl join).

    The coordinator's certificate is a TLS server certificate for its hostnames only; each site's
    is a TLS client certificate naming the site only (site:NAME), so no site can act as the
    coordinator and no certificate can take two places. A site's name in the run is its
    certificate's and the sites are numbered in the order of their names: name them in the order of
    their CSV files (site1, site2, … for site1.csv, site2.csv, …). The CA's private key is not kept: to add a party, make a new directory for everyone. For a
    real deployment use certificates from your organisation's CA."""
    from bnsl_cli.net.common import need_grpc

    need_grpc()
    from bnsl_cli.net.tls import make_certs

    names = [p.strip() for p in parties.split(",") if p.strip()]
    if not names:
        raise common.fail("--parties: give at least one name, e.g. --parties coordinator,site1,site2", 2)
    if not 0 < days <= 36525:  # an X.509 date ends at 9999; a throwaway CA needs no more than a century
        raise common.fail("--days must be > 0 and at most 36525 (100 years)", 2)
    if directory.exists() and not directory.is_dir():
        raise common.fail(f"{directory}: exists and is not a directory", 2)
    if not force:
        for n in ["ca.pem"] + [f"{p}.{e}" for p in names for e in ("pem", "key")]:
            if (directory / n).exists():
                raise common.fail(f"{directory / n}: already exists; choose another DIR or pass --force", 2)
    if coordinator not in names and hostname:
        raise common.fail(f"--hostname names the coordinator's hosts, but --coordinator {coordinator!r} is not among "
                          "--parties", 2)
    make_certs(directory, names, hostname or [], days=days, coordinator=coordinator)
    if quiet:
        return
    sites = [n for n in names if n != coordinator]
    roles = []
    if coordinator in names:
        hosts = ", ".join(["localhost", "127.0.0.1", *(hostname or [])])
        roles.append(f"a server certificate + key for {coordinator} ({hosts})")
    if sites:
        roles.append(f"client certificate{'s' if len(sites) > 1 else ''} + key{'s' if len(sites) > 1 else ''} "
                     f"for {', '.join(sites)}")
    common.err_console.print(
        f"wrote {directory}/ca.pem, {' and '.join(roles)} (valid {days:g} days); "
        "give each party ca.pem and its own NAME.pem/NAME.key only", highlight=False, markup=False, soft_wrap=True,
    )
