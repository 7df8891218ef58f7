"""Who is on the other end of a mutual-TLS link: certificate identities, roles and fingerprints.

A networked run has two roles, and a certificate says which one its holder may play through its
extended key usage (EKU): the coordinator's certificate is a TLS *server* certificate
(``serverAuth``) for its hostnames; a site's is a TLS *client* certificate (``clientAuth``) for
its name. ``bnsl certs`` issues exactly these (:func:`~bnsl_cli.net.tls.make_certs`).

- A site's **identity** is its certificate's name: the URI SAN ``site:NAME`` when the certificate
  has one (``bnsl certs`` writes it), else its subject common name. The coordinator gives each
  identity one participant slot and records it, with the certificate's SHA-256 fingerprint, in the
  report (:func:`peer_identity` reads it from the gRPC call).
- A site checks, before it says anything, that the coordinator's certificate is a server
  certificate for the address it dials (:func:`probe_coordinator`) and records its fingerprint in
  its transcript.
- Each party checks its own certificate has its role (:func:`check_role`), so that a swapped
  file is one clear error and not an opaque handshake failure.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import ssl
import tempfile
from dataclasses import dataclass
from typing import Optional

from bnsl_cli.net.common import FederationError
from bnsl_cli.net.tls import SITE_URI_PREFIX, TLSError

__all__ = ["PeerIdentity", "identity_of", "peer_identity", "check_role", "probe_coordinator",
           "SERVER", "CLIENT", "SITE_URI_PREFIX"]

SERVER, CLIENT = "serverAuth", "clientAuth"


@dataclass(frozen=True)
class PeerIdentity:
    """One certificate as a party: its ``name`` (see the module docstring), ``sha256`` (hex of the
    DER bytes), ``roles`` (the EKU purposes among serverAuth/clientAuth; ``None`` when the
    certificate has no EKU extension, i.e. is not restricted) and ``subject`` (RFC 4514 text)."""

    name: str
    sha256: str
    roles: Optional[tuple]
    subject: str

    def may(self, role: str) -> bool:
        return self.roles is None or role in self.roles

    def to_dict(self) -> dict:
        return {"identity": self.name, "certificate_sha256": self.sha256,
                "roles": list(self.roles) if self.roles is not None else "any (no extended key usage)"}


def identity_of(cert) -> PeerIdentity:
    """The :class:`PeerIdentity` of a certificate (PEM or DER bytes, or a cryptography object)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if isinstance(cert, (bytes, bytearray)):
        data = bytes(cert)
        cert = x509.load_pem_x509_certificate(data) if data.lstrip().startswith(b"-----") else x509.load_der_x509_certificate(data)
    der = cert.public_bytes(serialization.Encoding.DER)
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        roles = tuple(r for r, oid in ((SERVER, ExtendedKeyUsageOID.SERVER_AUTH), (CLIENT, ExtendedKeyUsageOID.CLIENT_AUTH))
                      if oid in eku)
    except x509.ExtensionNotFound:
        roles = None
    name = None
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        for uri in san.get_values_for_type(x509.UniformResourceIdentifier):
            if uri.startswith(SITE_URI_PREFIX) and len(uri) > len(SITE_URI_PREFIX):
                name = uri[len(SITE_URI_PREFIX):]
                break
    except x509.ExtensionNotFound:
        pass
    if name is None:
        cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        name = str(cn[0].value) if cn else ""
    return PeerIdentity(name, hashlib.sha256(der).hexdigest(), roles, cert.subject.rfc4514_string())


def peer_identity(context) -> Optional[PeerIdentity]:
    """The identity of the client certificate of a gRPC call (server side); ``None`` on a
    plaintext call or when gRPC gives no certificate."""
    try:
        auth = context.auth_context() or {}
    except Exception:  # noqa: BLE001 - a call without an auth context: no identity
        return None
    pem = auth.get("x509_pem_cert") or []
    if not pem:
        return None
    try:
        return identity_of(pem[0])
    except ValueError:
        return None


def check_role(cert_pem: bytes, role: str, option: str, path) -> PeerIdentity:
    """This party's own certificate must allow ``role`` (SERVER for ``bnsl serve``, CLIENT for
    ``bnsl join``): a swapped certificate is a usage error naming the file (exit 2)."""
    ident = identity_of(cert_pem)
    if not ident.may(role):
        if role == SERVER:
            raise TLSError(
                f"{option} {path}: a site certificate ({', '.join(ident.roles) or 'no TLS role'}), not a coordinator's: "
                "bnsl serve needs a certificate with the serverAuth role (bnsl certs makes one: --coordinator NAME)"
            )
        raise TLSError(
            f"{option} {path}: a coordinator certificate ({', '.join(ident.roles) or 'no TLS role'}), not a site's: "
            "bnsl join needs this site's certificate with the clientAuth role (bnsl certs makes one per site)"
        )
    return ident


def probe_coordinator(host: str, port: int, credentials, timeout: float) -> PeerIdentity:
    """A TLS handshake with the coordinator at ``host:port`` made with this site's credentials,
    before the gRPC session: the coordinator's certificate must be issued by the CA, name ``host``
    (DNS or IP SAN) and carry the serverAuth role. Returns its identity (for the transcript);
    raises :class:`~bnsl_cli.net.common.FederationError` (exit 6) saying what is wrong. The gRPC connection that follows
    checks CA and hostname again (its TLS layer); this handshake gives the clear message and the
    fingerprint."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=credentials.ca.decode("ascii"))
    ctx.check_hostname = True
    # Python 3.13 verifies strictly by default (e.g. it requires key identifier extensions); the
    # gRPC connection's TLS layer does not, and both must accept the same certificates
    ctx.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
    tmp = None
    try:
        cert_path, key_path = getattr(credentials, "cert_path", None), getattr(credentials, "key_path", None)
        if not cert_path or not key_path:  # credentials built in memory: a private copy for the ssl module
            tmp = tempfile.mkdtemp(prefix="bnsl-probe-")
            cert_path, key_path = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
            for path, data in ((cert_path, credentials.cert), (key_path, credentials.key)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
        ctx.load_cert_chain(cert_path, key_path)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    ctx.set_alpn_protocols(["h2"])
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=timeout) as raw:
            with ctx.wrap_socket(raw, server_hostname=host.strip("[]")) as tls:
                der = tls.getpeercert(binary_form=True)
    except ssl.SSLCertVerificationError as exc:
        detail = getattr(exc, "verify_message", None) or str(exc)
        if "purpose" in detail:
            raise FederationError(
                f"the coordinator at {where} presented a certificate without the server role "
                f"({detail}): a site's certificate cannot act as the coordinator; refused"
            ) from None
        if "hostname" in detail.lower() or "ip address" in detail.lower():
            raise FederationError(
                f"the coordinator at {where} presented a certificate not issued for {host} ({detail}); refused"
            ) from None
        raise FederationError(f"TLS handshake with the coordinator at {where} failed: its certificate is "
                                       f"not from --ca or not valid now ({detail})") from None
    except (ssl.SSLError, OSError) as exc:
        raise FederationError(
            f"TLS handshake with the coordinator at {where} failed: its certificate is not from --ca, or it rejected "
            f"ours (other CA, expired, not a site certificate), or it runs --insecure ({exc})"
        ) from None
    if not der:
        raise FederationError(f"the coordinator at {where} presented no certificate; refused")
    ident = identity_of(der)
    if ident.roles is None or SERVER not in ident.roles:
        raise FederationError(
            f"the coordinator at {where} presented certificate {ident.name!r} without the serverAuth role "
            f"(roles: {', '.join(ident.roles or ()) or 'none given'}); a coordinator needs a server certificate; refused"
        )
    return ident
