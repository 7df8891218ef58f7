"""Certificate identities: role-specific certificates, one identity per participant slot, the
coordinator's certificate never a site's, --allow-sites, and a site that refuses a coordinator
certificate without the server role or its hostname (sites in threads, the fleet here)."""

import datetime as dt
import hashlib
import ipaddress
import threading
import time

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.net.common import FederationError  # noqa: E402
from bnsl_cli.net.fleet import NetworkFleet  # noqa: E402
from bnsl_cli.net.identity import identity_of  # noqa: E402
from bnsl_cli.net.site import run_site  # noqa: E402
from bnsl_cli.net.tls import load_party, make_certs  # noqa: E402
from bnsl_cli.net.transcript import Transcript  # noqa: E402
from bnsl_cli.federated.methods.admm.site import SparseParticipant  # noqa: E402
from bnsl_cli.federated.methods.admm.protocol import run_admm  # noqa: E402
from tests.net.conftest import Party, error_lines, tls  # noqa: E402


def _coord(d, p):
    from bnsl_cli.federated.methods.admm.coordinator import Coordinator, PenaltySchedule

    return Coordinator(d, p, PenaltySchedule(1e-3, 1e-3, 1.75, 1.25, 1e16), snap=0.05)


def _party(certs, name):
    return load_party(certs / "ca.pem", certs / f"{name}.pem", certs / f"{name}.key")


def _fp(pem_path) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(pem_path.read_bytes())
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


class Site(threading.Thread):
    """``run_site`` in a thread: ``error`` is what stopped it (``None``: it finished)."""

    def __init__(self, port, creds, name, table, part=None, host="127.0.0.1", transcript=None):
        super().__init__(daemon=True)
        self.error, self.args_ = None, (port, creds, name, table, part, host, transcript)
        self.start()

    def run(self):
        port, creds, name, t, part, host, tr = self.args_
        try:
            run_site(f"{host}:{port}", {"site": name, "columns": list(t.names), "rows": t.n},
                     lambda plan: part, credentials=creds, connect_timeout=3, timeout=20, transcript=tr)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            self.error = exc

    def outcome(self, timeout=30):
        self.join(timeout)
        assert not self.is_alive()
        return self.error


def _run(fleet, tables, sites):
    fleet.gather(20)
    fleet.start(lambda i: {"index": i})
    run_admm(_coord(tables[0].d, len(sites)), fleet, 2)
    fleet.finish()
    fleet.close(ok=True)
    for s in sites:
        assert s.outcome() is None, s.error


def _parts(tables):
    n = sum(t.n for t in tables)
    return [SparseParticipant(k, t.X, n, 0.005, 20) for k, t in enumerate(tables)]


def test_certs_are_role_specific(tmp_path):
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    make_certs(tmp_path, ["coordinator", "site1"], hostnames=["coord.example.org", "10.0.0.5"])
    coord = x509.load_pem_x509_certificate((tmp_path / "coordinator.pem").read_bytes())
    site = x509.load_pem_x509_certificate((tmp_path / "site1.pem").read_bytes())
    eku = lambda c: list(c.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)  # noqa: E731
    san = lambda c: c.extensions.get_extension_for_class(x509.SubjectAlternativeName).value  # noqa: E731
    assert eku(coord) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert eku(site) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert sorted(san(coord).get_values_for_type(x509.DNSName)) == ["coord.example.org", "localhost"]
    assert sorted(str(a) for a in san(coord).get_values_for_type(x509.IPAddress)) == ["10.0.0.5", "127.0.0.1"]
    assert san(site).get_values_for_type(x509.UniformResourceIdentifier) == ["site:site1"]
    assert not san(site).get_values_for_type(x509.DNSName) and not san(site).get_values_for_type(x509.IPAddress)
    ident = identity_of((tmp_path / "site1.pem").read_bytes())
    assert ident.name == "site1" and ident.roles == ("clientAuth",) and ident.sha256 == _fp(tmp_path / "site1.pem")


def test_a_site_certificate_cannot_act_as_the_coordinator(certs, tables):
    fleet = NetworkFleet("127.0.0.1:0", 3, _party(certs, "site1"), timeout=10)  # a site serving (not via bnsl serve)
    try:
        site = Site(fleet.port, _party(certs, "site2"), "site2", tables[1])
        err = site.outcome()
        assert isinstance(err, FederationError) and "server role" in str(err), err
    finally:
        fleet.close()
    # bnsl serve itself refuses a site certificate, naming the file
    res = Party(["serve", "-P", "1", "--listen", "127.0.0.1:0", *tls(certs, "site1")])
    code, _, err = res.done()
    assert code == 2 and len(error_lines(err)) == 1 and "site1.pem" in err and "serverAuth" in err, err


def test_a_coordinator_certificate_not_for_the_dialled_host_is_refused(certs, tables):
    fleet = NetworkFleet("127.0.0.2:0", 1, _party(certs, "coordinator"), timeout=10)
    try:
        site = Site(fleet.port, _party(certs, "site1"), "site1", tables[0], host="127.0.0.2")
        err = site.outcome()
        assert isinstance(err, FederationError) and "not issued for 127.0.0.2" in str(err), err
    finally:
        fleet.close()


def _wait_joined(fleet, n):
    for _ in range(250):
        if len(fleet.sites) >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"{len(fleet.sites)} of {n} sites joined")


def test_one_certificate_takes_one_slot(certs, tables):
    fleet = NetworkFleet("127.0.0.1:0", 2, _party(certs, "coordinator"), timeout=20)
    parts = _parts(tables[:2])
    try:
        first = Site(fleet.port, _party(certs, "site1"), "site1", tables[0], parts[0])
        box = {}
        th = threading.Thread(target=lambda: box.setdefault("hellos", fleet.gather(20)))
        th.start()
        _wait_joined(fleet, 1)
        assert [s.name for s in fleet.sites] == ["site1"]
        # the same certificate again: refused
        second = Site(fleet.port, _party(certs, "site1"), "site1", tables[1], parts[1])
        err = second.outcome()
        assert isinstance(err, FederationError) and "'site1' already holds a participant slot" in str(err), err
        real = Site(fleet.port, _party(certs, "site2"), "site2", tables[1], parts[1])
        th.join(30)
        assert [(s.name, s.identity.name) for s in fleet.sites] == [("site1", "site1"), ("site2", "site2")]
        assert fleet.sites[0].identity.sha256 == _fp(certs / "site1.pem")
        fleet.start(lambda i: {"index": i})
        run_admm(_coord(tables[0].d, 2), fleet, 2)
        fleet.finish()
        fleet.close(ok=True)
        assert first.outcome() is None and real.outcome() is None
    finally:
        fleet.close()


def _dual_role_set(root):
    """A CA and one certificate with both roles for localhost (as bnsl certs made before)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    root.mkdir()
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])

    def build(subject, pub, *ext):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(pub)
             .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1)))
        for e, crit in ext:
            b = b.add_extension(e, critical=crit)
        return b.sign(ca_key, hashes.SHA256())

    ca = build(ca_name, ca_key.public_key(), (x509.BasicConstraints(ca=True, path_length=0), True))
    cert = build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "coordinator")]), key.public_key(),
                 (x509.BasicConstraints(ca=False, path_length=None), True),
                 (x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False),
                 (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), False))
    (root / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (root / "coordinator.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (root / "coordinator.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))
    return root


def test_the_coordinators_certificate_is_not_accepted_as_a_site(certs, tables, tmp_path):
    # a certificate with both roles (TLS lets it through either way): the coordinator refuses its own
    dual = _dual_role_set(tmp_path / "dual")
    fleet = NetworkFleet("127.0.0.1:0", 1, _party(dual, "coordinator"), timeout=10)
    try:
        err = Site(fleet.port, _party(dual, "coordinator"), "sneaky", tables[0]).outcome()
        assert isinstance(err, FederationError) and "the coordinator's own certificate" in str(err), err
        assert not fleet.sites
    finally:
        fleet.close()
    # bnsl certs' coordinator certificate has no client role: bnsl join refuses it, naming the file
    csv = tmp_path / "s.csv"
    csv.write_text("a,b\n1,2\n3,5\n4,4\n")
    res = Party(["join", "127.0.0.1:9", str(csv), "--allow-non-private", *tls(certs, "coordinator")])
    code, _, err = res.done()
    assert code == 2 and len(error_lines(err)) == 1 and "coordinator.pem" in err and "clientAuth" in err, err
    # and at the TLS layer: a client using it is turned away by the coordinator
    fleet = NetworkFleet("127.0.0.1:0", 1, _party(certs, "coordinator"), timeout=10)
    try:
        err = Site(fleet.port, _party(certs, "coordinator"), "sneaky", tables[0]).outcome()
        assert isinstance(err, FederationError), err
        assert not fleet.sites
    finally:
        fleet.close()


def test_allow_sites(certs, tables):
    fleet = NetworkFleet("127.0.0.1:0", 2, _party(certs, "coordinator"), timeout=20, allow_sites=["site1", "site2"])
    parts = _parts(tables[:2])
    try:
        outsider = Site(fleet.port, _party(certs, "site3"), "site3", tables[2])
        err = outsider.outcome()
        assert isinstance(err, FederationError) and "not among --allow-sites" in str(err), err
        sites = [Site(fleet.port, _party(certs, f"site{k + 1}"), f"site{k + 1}", tables[k], parts[k]) for k in range(2)]
        _run(fleet, tables, sites)
    finally:
        fleet.close()


def test_the_site_transcript_records_the_coordinator_fingerprint(certs, tables, tmp_path):
    fleet = NetworkFleet("127.0.0.1:0", 1, _party(certs, "coordinator"), timeout=20)
    tr = Transcript(tmp_path / "t.jsonl")
    try:
        part = _parts(tables[:1])[0]
        site = Site(fleet.port, _party(certs, "site1"), "site1", tables[0], part, transcript=tr)
        _run(fleet, tables, [site])
    finally:
        fleet.close()
        tr.close("ok")
    import json

    recs = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    coord = [r for r in recs if r["event"] == "coordinator"]
    assert len(coord) == 1 and coord[0]["identity"] == "coordinator"
    assert coord[0]["certificate_sha256"] == _fp(certs / "coordinator.pem") and coord[0]["roles"] == ["serverAuth"]
    assert recs.index(coord[0]) < min(k for k, r in enumerate(recs) if r["event"] == "sent")  # before anything is sent


def test_allow_sites_needs_tls():
    res = Party(["serve", "-P", "1", "--listen", "127.0.0.1:0", "--insecure", "--allow-sites", "site1"])
    code, _, err = res.done()
    assert code == 2 and "--allow-sites needs mutual TLS" in err, err


def test_certs_command_names_the_coordinator(tmp_path):
    res = Party(["certs", str(tmp_path / "c"), "--parties", "hub,a,b", "--coordinator", "hub", "--hostname", "hub.lan"])
    code, _, err = res.done()
    assert code == 0, err
    assert "a server certificate + key for hub (localhost, 127.0.0.1, hub.lan)" in err and "for a, b" in err
    hub, a = (identity_of((tmp_path / "c" / f"{n}.pem").read_bytes()) for n in ("hub", "a"))
    assert hub.roles == ("serverAuth",) and a.roles == ("clientAuth",) and a.name == "a"
    # --hostname without a coordinator among the parties: nothing to put it on
    res = Party(["certs", str(tmp_path / "d"), "--parties", "a,b", "--hostname", "hub.lan"])
    code, _, err = res.done()
    assert code == 2 and len(error_lines(err)) == 1 and "--coordinator" in err and not (tmp_path / "d" / "ca.pem").exists()


def _issue(root, parties):
    """A CA and one certificate + key per entry of ``parties`` (file stem → (common name, URI SAN
    site name or ``None``, role)), as any CA may issue them: e.g. two certificates that both name
    'site1' (a renewal, or a mistake)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    root.mkdir()
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])

    def build(subject, pub, *ext):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(pub)
             .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1)))
        for e, crit in ext:
            b = b.add_extension(e, critical=crit)
        return b.sign(ca_key, hashes.SHA256())

    ca = build(ca_name, ca_key.public_key(), (x509.BasicConstraints(ca=True, path_length=0), True))
    (root / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for stem, (cn, uri, role) in parties.items():
        key = ec.generate_private_key(ec.SECP256R1())
        if role == "server":
            san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            eku = ExtendedKeyUsageOID.SERVER_AUTH
        else:
            san = [x509.UniformResourceIdentifier(f"site:{uri}")] if uri else [x509.DNSName(f"{stem}.invalid")]
            eku = ExtendedKeyUsageOID.CLIENT_AUTH
        cert = build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]), key.public_key(),
                     (x509.BasicConstraints(ca=False, path_length=None), True),
                     (x509.SubjectAlternativeName(san), False), (x509.ExtendedKeyUsage([eku]), False))
        (root / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (root / f"{stem}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))
    return root


def test_a_site_name_is_its_certificates_name(tables, tmp_path):
    """A connection must declare its certificate's name: no certificate takes another site's name
    or its place in the order (sites are numbered by name), and two certificates that carry the same
    name (here one by its site:NAME URI, the other by its common name only) take one slot."""
    root = _issue(tmp_path / "set", {"coordinator": ("coordinator", None, "server"), "site1": ("site1", "site1", "client"),
                                     "site1-renewed": ("site1", None, "client"), "site2": ("site2", "site2", "client")})
    assert identity_of((root / "site1-renewed.pem").read_bytes()).name == "site1"
    fleet = NetworkFleet("127.0.0.1:0", 2, _party(root, "coordinator"), timeout=20)
    parts = _parts(tables[:2])
    try:
        th = threading.Thread(target=fleet.gather, args=(30,))
        th.start()
        # site 1's certificate under site 2's name, site 2's under a name that would come first: refused
        for cert, name in (("site1", "site2"), ("site2", "a-first")):
            err = Site(fleet.port, _party(root, cert), name, tables[0]).outcome()
            assert isinstance(err, FederationError) and err.exit_code == 6, err
            msg = str(err)
            assert f"declares site name {name!r} but its certificate is {cert!r}" in msg and "\n" not in msg, msg
        assert not fleet.sites
        first = Site(fleet.port, _party(root, "site1"), "site1", tables[0], parts[0])
        _wait_joined(fleet, 1)
        # another certificate that names site1 (another key, common name only): site1 holds that slot
        err = Site(fleet.port, _party(root, "site1-renewed"), "site1", tables[1]).outcome()
        assert isinstance(err, FederationError) and "'site1' already holds a participant slot" in str(err), err
        second = Site(fleet.port, _party(root, "site2"), "site2", tables[1], parts[1])
        th.join(30)
        assert [(s.name, s.identity.name, s.identity.sha256) for s in fleet.sites] == [
            ("site1", "site1", _fp(root / "site1.pem")), ("site2", "site2", _fp(root / "site2.pem"))]
        fleet.start(lambda i: {"index": i})
        run_admm(_coord(tables[0].d, 2), fleet, 2)
        fleet.finish()
        fleet.close(ok=True)
        assert first.outcome() is None and second.outcome() is None
    finally:
        fleet.close()


def test_join_names_the_site_after_its_certificate(certs, tmp_path):
    """bnsl join under mutual TLS declares its certificate's name (not the CSV's file name);
    --site-id may repeat it, and any other --site-id is a usage error naming both, before anything
    is sent."""
    csv = tmp_path / "data.csv"
    csv.write_text("a,b\n1,2\n3,5\n4,4\n")
    res = Party(["join", "127.0.0.1:9", str(csv), "--allow-non-private", "--site-id", "site3", *tls(certs, "site1")])
    code, _, err = res.done()
    assert code == 2 and len(error_lines(err)) == 1 and "Traceback" not in err, err
    assert "--site-id 'site3' is not the name in --cert" in err and "('site1')" in err, err
    fleet = NetworkFleet("127.0.0.1:0", 1, _party(certs, "coordinator"), timeout=20)
    try:
        site = Party(["join", f"127.0.0.1:{fleet.port}", str(csv), "--allow-non-private", "--site-id", "site1",
                      "--transcript", str(tmp_path / "t.jsonl"), *tls(certs, "site1")])
        (hello,) = fleet.gather(30)
        assert hello["site"] == "site1" and fleet.sites[0].identity.name == "site1"
        fleet.abort("test over")
    finally:
        fleet.close()
    assert site.done()[0] == 6
    site = Party(["join", "127.0.0.1:9", str(csv), "--allow-non-private", *tls(certs, "site2")])
    code, _, err = site.done()  # no --site-id: the certificate's name, not data.csv
    assert code == 6 and "cannot reach the coordinator" in err and "site2: 3 rows" in err, err
