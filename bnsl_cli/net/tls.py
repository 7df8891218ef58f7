"""Certificates for mutual TLS: a throwaway CA with one certificate per party, and gRPC credentials.

:func:`make_certs` writes ``ca.pem`` and, per party, ``NAME.pem`` + ``NAME.key`` (key file mode 0600).
The CA's private key is not written: the CA is throwaway (make a new directory to add parties).
Certificates are role-specific (ECDSA P-256): the coordinator's (the party named ``coordinator``,
or as given) is a TLS *server* certificate only (extended key usage serverAuth) whose SANs are
``localhost``, ``127.0.0.1`` and the given hostnames; each site's is a TLS *client* certificate
only (clientAuth) that names the site (common name and the URI SAN ``site:NAME``) and no host, so
it can neither act as the coordinator nor be mistaken for it (:mod:`.identity`).
:func:`load_party` reads a CA/cert/key triple and checks it (files readable, key matches the
certificate, certificate within its validity period and issued by that CA) so that a wrong file
gives one clear error here instead of an opaque TLS handshake failure later.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from bnsl_cli.errors import OptionError, TLSError

__all__ = ["make_certs", "load_party", "PartyCredentials", "TLSError", "is_loopback", "split_hostport", "SITE_URI_PREFIX"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
#: The URI SAN that names a site in the certificates :func:`make_certs` makes: ``site:NAME``.
SITE_URI_PREFIX = "site:"


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _san(names: Sequence[str]):
    from cryptography import x509

    out, seen = [], set()
    for n in names:
        if n in seen:
            continue
        seen.add(n)
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(out)


def make_certs(
    directory: Path,
    parties: Sequence[str],
    hostnames: Sequence[str] = (),
    days: float = 30.0,
    not_before: Optional[_dt.datetime] = None,
    coordinator: Optional[str] = "coordinator",
) -> dict[str, Path]:
    """Write a throwaway CA and one certificate per party into ``directory``; returns the paths
    (``"ca"`` and each party name → its ``.pem``). The party named ``coordinator`` gets the
    server certificate (with ``hostnames``), every other party a site certificate.
    ``not_before``/``days`` set the validity window (tests use a window in the past for an expired
    certificate)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    parties = list(parties)
    if not parties:
        raise OptionError("--parties: give at least one party name")
    for p in parties:
        if not _NAME.match(p) or p == "ca":
            raise OptionError(f"--parties: {p!r} is not a valid party name (letters, digits, . _ -; not 'ca')")
    if len(set(parties)) != len(parties):
        raise OptionError("--parties: party names must be distinct")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    start = (not_before or _now()) - _dt.timedelta(minutes=5)
    end = start + _dt.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bnsl throwaway CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = {"ca": directory / "ca.pem"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for p in parties:
        key = ec.generate_private_key(ec.SECP256R1())
        if p == coordinator:  # the server: its hostnames, serverAuth only
            san = _san(["localhost", "127.0.0.1", *hostnames])
            eku = [ExtendedKeyUsageOID.SERVER_AUTH]
        else:  # a site: its name, clientAuth only
            san = x509.SubjectAlternativeName([x509.UniformResourceIdentifier(SITE_URI_PREFIX + p)])
            eku = [ExtendedKeyUsageOID.CLIENT_AUTH]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, p)]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(san, critical=False)
            .add_extension(x509.ExtendedKeyUsage(eku), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        (directory / f"{p}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path = directory / f"{p}.key"
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(
                key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                )
            )
        paths[p] = directory / f"{p}.pem"
    return paths


@dataclass(frozen=True)
class PartyCredentials:
    ca: bytes
    cert: bytes
    key: bytes
    name: str  # the certificate's common name
    #: where the certificate and key were read from (the coordinator probe's TLS handshake uses them)
    cert_path: Optional[str] = None
    key_path: Optional[str] = None


def _read(path: Path, option: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TLSError(f"{option} {path}: cannot read ({exc.strerror or exc})") from None


def load_party(ca: Path, cert: Path, key: Path) -> PartyCredentials:
    """Read and check a CA certificate, this party's certificate and its private key."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import NameOID

    ca_b, cert_b, key_b = _read(ca, "--ca"), _read(cert, "--cert"), _read(key, "--key")
    try:
        ca_c = x509.load_pem_x509_certificate(ca_b)
    except ValueError:
        raise TLSError(f"--ca {ca}: not a PEM certificate") from None
    try:
        c = x509.load_pem_x509_certificate(cert_b)
    except ValueError:
        raise TLSError(f"--cert {cert}: not a PEM certificate") from None
    try:
        k = serialization.load_pem_private_key(key_b, password=None)
    except (ValueError, TypeError):
        raise TLSError(f"--key {key}: not an unencrypted PEM private key") from None
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    enc = serialization.Encoding.DER
    if k.public_key().public_bytes(enc, pub) != c.public_key().public_bytes(enc, pub):
        raise TLSError(f"--key {key} does not belong to --cert {cert}")
    now = _now()
    for what, path, crt in (("--ca", ca, ca_c), ("--cert", cert, c)):
        if now < crt.not_valid_before_utc:
            raise TLSError(f"{what} {path}: certificate not valid before {crt.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")
        if now > crt.not_valid_after_utc:
            raise TLSError(
                f"{what} {path}: certificate expired on {crt.not_valid_after_utc:%Y-%m-%d %H:%M} UTC; "
                "make new ones (bnsl certs)"
            )
    try:
        c.verify_directly_issued_by(ca_c)
    except (ValueError, TypeError, InvalidSignature):
        raise TLSError(f"--cert {cert} was not issued by --ca {ca}") from None
    cn = c.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return PartyCredentials(ca_b, cert_b, key_b, cn[0].value if cn else "", str(cert), str(key))


def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_hostport(text: str, option: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) → ``(host, port)``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise OptionError(f"{option} {text!r}: expected HOST:PORT with a port from 0 to 65535, e.g. 127.0.0.1:7443")
    return host, int(port)

