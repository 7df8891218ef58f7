"""bnsl serve / bnsl join / bnsl certs as separate processes on loopback, with real mutual TLS
(helpers and the session's certificates and CSVs: conftest.py)."""

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.net import frames as F  # noqa: E402
from tests.net.conftest import BNSL, ENV, Party, all_ok, error_lines, join, no_outputs, serve, tls  # noqa: E402


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow  # a heavy end-to-end networked run
def test_three_sites_same_bytes_as_learn(world, tmp_path):
    certs, paths = world
    learned = tmp_path / "learned"
    learn = Party(["learn", *map(str, paths), "--seed", "3", "--format", "modelstring,dagitty", "--out", str(learned), "-q"])
    served = tmp_path / "served"
    coord, port = serve(certs, served, "--seed", "3", "--format", "modelstring,dagitty")
    # garbage on the port, and a site whose certificate is from another CA: neither disturbs the run
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"\x16\x03\x01 not a TLS hello at all" * 10)
    rogue = join(certs, port, paths[0], "site1", "--allow-non-private", "--connect-timeout", "3",
                 creds=tls(certs, "site1", certs / "other"))
    # the three real sites join in reverse order; they are numbered by file name, as bnsl learn sorts
    sites = [join(certs, port, p, f"site{k + 1}", "--allow-non-private", "--transcript", str(tmp_path / f"t{k + 1}.jsonl"))
             for k, p in reversed(list(enumerate(paths)))]
    code, _, err = rogue.done()
    assert code == 6 and len(error_lines(err)) == 1 and "TLS handshake" in err and "Traceback" not in err
    code, _, err = learn.done()
    assert code == 0, err
    all_ok(coord, sites)
    for name in ("adjacency.csv", "edges.csv", "graph.dot", "graph.modelstring", "graph.dagitty"):
        assert (served / name).read_bytes() == (learned / name).read_bytes(), name
    rep = json.loads((served / "report.json").read_text())
    assert rep["network"]["transport"] == "gRPC, mutual TLS"
    assert [s["site"] for s in rep["network"]["sites"]] == ["site1", "site2", "site3"]
    # each participant bound to its certificate: identity and SHA-256 fingerprint, in the report
    # and (the coordinator's) in each site's transcript
    from tests.net.test_identity import _fp

    net = rep["network"]
    assert net["coordinator_certificate_sha256"] == _fp(certs / "coordinator.pem")
    assert [(s["identity"], s["certificate_sha256"]) for s in net["sites"]] == [
        (f"site{k}", _fp(certs / f"site{k}.pem")) for k in (1, 2, 3)]
    t2 = _records(tmp_path / "t2.jsonl")
    assert t2[0]["event"] == "run" and t2[0]["identity"] == "site2" and t2[0]["certificate_sha256"] == _fp(certs / "site2.pem")
    assert [r["certificate_sha256"] for r in t2 if r["event"] == "coordinator"] == [net["coordinator_certificate_sha256"]]
    # every frame a site sent is in its transcript, with its size and hash, control frames with their body
    recs = _records(tmp_path / "t2.jsonl")
    sent = [r for r in recs if r["event"] == "sent"]
    data = [r for r in sent if r["frame"] == "DATA"]
    assert len(data) == rep["rounds"] + 3  # the column statistics (two shares), the rounds, the polish's second moments
    assert sum(r["bytes"] - 2 for r in data) == rep["communication"]["per_participant"][1]["bytes_up"]
    assert [r["frame"] for r in sent if r["frame"] not in ("DATA", "EMPTY")] == ["HELLO", "ACCEPT", "SUMMARY"]
    hello, summary = sent[0]["body"], [r for r in sent if r["frame"] == "SUMMARY"][0]["body"]
    assert hello["site"] == "site2" and hello["rows"] == 400 and hello["limits"]["allow_non_private"] is True
    assert summary["participant"] == 2 and summary["rows"] == 400 and "compute_s" in summary  # non-private: timings too
    for r in sent:
        if "body" in r:  # the body as recorded is the body as sent: it hashes to the frame's sha256
            import hashlib

            raw = bytes([{"HELLO": 1, "ACCEPT": 3, "SUMMARY": 6}[r["frame"]], F.VERSION]) + json.dumps(
                r["body"], separators=(",", ":")).encode()
            assert hashlib.sha256(raw).hexdigest() == r["sha256"] and len(raw) == r["bytes"]
    assert recs[-1] == {**recs[-1], "event": "end", "status": "ok"}


@pytest.mark.slow  # a heavy end-to-end networked run
def test_site_refuses_epsilon_and_nobody_writes(world, tmp_path):
    certs, paths = world
    out = tmp_path / "out"
    coord, port = serve(certs, out, "-m", "fed-sparse", "--dp", "--epsilon", "8", "--value-bound", "20")
    sites = [join(certs, port, p, f"site{k + 1}", "--max-epsilon", "5" if k == 1 else "10",
                  "--transcript", str(tmp_path / f"t{k + 1}.jsonl")) for k, p in enumerate(paths)]
    results = [s.done() for s in sites]
    code, _, err = coord.done()
    assert code == 5, err
    lines = error_lines(err)
    assert len(lines) == 1 and "site 2 (site2) refused the run" in lines[0] and "--max-epsilon 5" in lines[0]
    assert results[1][0] == 5 and "more than this site's --max-epsilon 5" in results[1][2]
    for k in (0, 2):
        assert results[k][0] == 6 and "site 2 (site2) refused the run" in results[k][2]
    for code_, _, err_ in results:
        assert "Traceback" not in err_ and len(error_lines(err_)) == 1
    assert no_outputs(out)
    # the refusing site's transcript: the plan refused, and the ABORT it sent, with its reason
    recs = _records(tmp_path / "t2.jsonl")
    assert [r["decision"] for r in recs if r["event"] == "plan"][0].startswith("refused: the plan spends")
    abort = [r for r in recs if r["event"] == "sent" and r["frame"] == "ABORT"]
    assert len(abort) == 1 and abort[0]["body"]["refused"] is True and "--max-epsilon 5" in abort[0]["body"]["reason"]


@pytest.mark.slow  # a heavy end-to-end networked run
def test_site_requires_secure_sum(world, tmp_path):
    """A join limit other than ε: the same exit codes (5 on the refusing site and the coordinator, 6 elsewhere)."""
    certs, paths = world
    out = tmp_path / "out"
    coord, port = serve(certs, out)
    sites = [join(certs, port, p, f"site{k + 1}", "--allow-non-private", *(["--require-secure-sum"] if k == 0 else []))
             for k, p in enumerate(paths)]
    results = [s.done() for s in sites]
    code, _, err = coord.done()
    assert code == 5 and "site 1 (site1) refused the run" in err and "--require-secure-sum" in err, err
    assert results[0][0] == 5 and "no secure aggregation" in results[0][2]
    assert all(r[0] == 6 and "site 1 (site1) refused the run" in r[2] for r in results[1:])
    assert all(len(error_lines(r[2])) == 1 and "Traceback" not in r[2] for r in results)
    assert no_outputs(out)


@pytest.mark.slow  # a heavy end-to-end networked run
def test_mismatched_columns_and_expired_certificate(world, tmp_path):
    certs, paths = world
    bad = tmp_path / "site3.csv"
    head, body = paths[2].read_text().split("\n", 1)
    cols = head.split(",")
    old = cols[3]
    cols[3] = "renamed"
    bad.write_text(",".join(cols) + "\n" + body)
    expired = join(certs, 1, paths[0], "site1", "--allow-non-private", creds=tls(certs, "site1", certs / "old"))
    out = tmp_path / "out"
    coord, port = serve(certs, out)
    sites = [join(certs, port, p, f"site{k + 1}", "--allow-non-private") for k, p in enumerate([paths[0], paths[1], bad])]
    code, _, err = expired.done()
    assert code == 2 and "certificate expired on" in err and len(error_lines(err)) == 1
    results = [s.done() for s in sites]
    code, _, err = coord.done()
    assert code == 3, err
    assert f"site 3 (site3) has different columns from site 1 (site1): lacks {old!r}; has extra 'renamed'" in err
    assert all(r[0] == 6 and "site 3 (site3) has different columns" in r[2] for r in results)
    assert no_outputs(out)


#: site2 as a script: a participant that stalls from its ``stall_from``-th message on (``secs``
#: seconds each), so that the coordinator is certainly mid-run when a test acts
SLOW_SITE = r"""
import sys, time
from bnsl_cli.net.site import run_site
from bnsl_cli.net.tls import load_party
from bnsl_cli.net.transcript import Transcript
from bnsl_cli.federated.methods.registry import make_participant
from bnsl_cli.io.csv_reader import read_table
from bnsl_cli.plan.run_plan import RunPlan
port, csv, certs, tpath, stall_from, secs = sys.argv[1:]
t = read_table(csv)
class Slow:
    def __init__(self, inner): self.inner, self.n = inner, 0
    def handle(self, data):
        self.n += 1
        if self.n >= int(stall_from):
            time.sleep(float(secs))
        return self.inner.handle(data)
def on_plan(body):
    return Slow(make_participant(RunPlan.from_dict(body["plan"]), body["index"], t.X, None))
creds = load_party(f"{certs}/ca.pem", f"{certs}/site2.pem", f"{certs}/site2.key")
run_site(f"127.0.0.1:{port}", {"site": "site2", "columns": list(t.names), "rows": t.n}, on_plan,
         credentials=creds, transcript=Transcript(tpath))
"""


def _slow_site(certs, port, csv, tpath, stall_from, secs):
    proc = subprocess.Popen([sys.executable, "-c", SLOW_SITE, str(port), str(csv), str(certs), str(tpath),
                             str(stall_from), str(secs)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    for _ in range(2400):  # until the slow site has answered its first two messages
        if tpath.exists() and tpath.read_text().count('"frame":"DATA"') >= 2:
            return proc
        if proc.poll() is not None:
            raise AssertionError(f"the slow site ended early: {proc.communicate()[1]}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the slow site never answered two messages")


@pytest.mark.slow  # a heavy end-to-end networked run
def test_site_killed_mid_run(world, tmp_path):
    certs, paths = world
    out = tmp_path / "out"
    coord, port = serve(certs, out)
    tpath = tmp_path / "slow.jsonl"
    others = [join(certs, port, paths[k], f"site{k + 1}", "--allow-non-private") for k in (0, 2)]
    slow = _slow_site(certs, port, paths[1], tpath, stall_from=3, secs=60)
    time.sleep(0.2)
    slow.send_signal(signal.SIGKILL)
    slow.communicate(timeout=10)
    code, _, err = coord.done()
    assert code == 6, err
    lines = error_lines(err)
    assert len(lines) == 1 and "site 2 (site2)" in lines[0] and ("disconnected" in lines[0] or "closed" in lines[0])
    for s in others:
        c, _, e = s.done()
        assert c == 6 and "site 2 (site2)" in e and "Traceback" not in e
    assert no_outputs(out)


def _interrupt_the_coordinator(coord, sites, out, says="interrupted"):
    """SIGINT to ``coord``: it ends at once (a hang fails here) with 130 and one line, each of
    ``sites`` with 6 and one line saying why — told at once, not after its --timeout of 600 s —
    and no output is left."""
    coord.send_signal(signal.SIGINT)
    code, _, err = coord.done(timeout=30)
    assert code == 130 and "interrupted" in err and "Traceback" not in err and len(error_lines(err)) == 1
    for s in sites:
        c, _, e = s.done(timeout=30)
        assert c == 6 and says in e and "Traceback" not in e and len(error_lines(e)) == 1
    assert no_outputs(out)


@pytest.mark.slow  # a heavy end-to-end networked run
def test_ctrl_c_on_the_coordinator_waiting_for_sites(world, tmp_path):
    certs, paths = world
    out = tmp_path / "out"
    coord, port = serve(certs, out, participants=3)
    site = join(certs, port, paths[0], "site1", "--allow-non-private", "--timeout", "600")
    coord.wait_for("site 'site1' joined")  # the coordinator holds the site's connection
    _interrupt_the_coordinator(coord, [site], out)


def _mid_run(world, out, stall_s):
    """A run under way: ``bnsl serve``, sites 1 and 3 (``bnsl join``), and site 2 stalling
    ``stall_s`` seconds on each message from its third on (returned once it answered two)."""
    certs, paths = world
    coord, port = serve(certs, out)
    site1, site3 = (join(certs, port, paths[k], f"site{k + 1}", "--allow-non-private", "--timeout", "600") for k in (0, 2))
    slow = _slow_site(certs, port, paths[1], out.parent / "slow.jsonl", stall_from=3, secs=stall_s)
    return coord, site1, site3, slow


@pytest.mark.slow  # a heavy end-to-end networked run
def test_ctrl_c_on_the_coordinator_mid_run(world, tmp_path):
    out = tmp_path / "out"
    coord, site1, site3, slow = _mid_run(world, out, 3)  # the coordinator waits for site 2, mid-run
    _interrupt_the_coordinator(coord, [site1, site3], out, says="the coordinator was interrupted (Ctrl-C)")
    slow.communicate(timeout=30)


@pytest.mark.slow  # a heavy end-to-end networked run
def test_ctrl_c_on_a_site_mid_run_stops_everyone(world, tmp_path):
    out = tmp_path / "out"
    coord, site1, site3, slow = _mid_run(world, out, 2)
    site1.send_signal(signal.SIGINT)
    c1, _, e1 = site1.done(timeout=30)
    code, _, err = coord.done(timeout=30)
    c3, _, e3 = site3.done(timeout=30)
    slow.communicate(timeout=30)
    seen = f"site 1 ({c1}): {e1}\ncoordinator ({code}): {err}\nsite 3 ({c3}): {e3}"
    assert c1 == 130 and "interrupted" in e1 and "Traceback" not in e1 and len(error_lines(e1)) == 1, seen
    assert code == 6 and len(error_lines(err)) == 1 and "site 1 (site1)" in err and "Traceback" not in err, seen
    assert c3 == 6 and "site 1 (site1)" in e3 and len(error_lines(e3)) == 1 and "Traceback" not in e3, seen
    assert no_outputs(out)


def test_ctrl_c_on_a_site_before_the_plan(world, tmp_path):
    certs, paths = world
    out = tmp_path / "out"
    coord, port = serve(certs, out, participants=2)
    site1 = join(certs, port, paths[0], "site1", "--allow-non-private", "--timeout", "600")
    coord.wait_for("site 'site1' joined")
    site1.send_signal(signal.SIGINT)
    c, _, e = site1.done(timeout=30)
    assert c == 130 and "interrupted" in e and "Traceback" not in e
    # before the plan a departing site is dropped (it may join again): the coordinator keeps waiting
    coord.wait_for("left before the run started")
    coord.send_signal(signal.SIGINT)
    code, _, err = coord.done(timeout=30)
    assert code == 130 and "Traceback" not in err
    assert no_outputs(out)


def test_insecure_only_on_loopback(world):
    certs, paths = world
    r = subprocess.run(BNSL + ["serve", "-P", "2", "--listen", "0.0.0.0:0", "--insecure"], capture_output=True, text=True, env=ENV)
    assert r.returncode == 2 and "--insecure is only allowed on a loopback address" in r.stderr
    r = subprocess.run(BNSL + ["join", "127.0.0.1:1", str(paths[0]), "--allow-non-private", "--insecure"],
                       capture_output=True, text=True, env=ENV)
    assert r.returncode == 6 and "cannot reach the coordinator at 127.0.0.1:1" in r.stderr
    assert "plaintext" in r.stderr  # the --insecure warning


@pytest.mark.slow  # a heavy end-to-end networked run
def test_private_run_with_secure_sum_transcripts_match_the_report(world, tmp_path):
    certs, paths = world
    out = tmp_path / "out"
    coord, port = serve(certs, out, "-m", "fed-sparse", "--dp", "--epsilon", "5", "--value-bound", "20", "--rounds", "4", "--secure-sum",
                        "--standardize", "--trace")
    # site 3 keeps its rows ';'-separated: join --sep reads them as learn --sep would
    semi = tmp_path / "site3.csv"
    semi.write_text(paths[2].read_text().replace(",", ";"))
    sites = [join(certs, port, p, f"site{k + 1}", "--max-epsilon", "5", "--require-secure-sum",
                  "--transcript", str(tmp_path / f"t{k + 1}.jsonl"), *(["--sep", ";"] if k == 2 else []))
             for k, p in enumerate(paths[:2] + [semi])]
    all_ok(coord, sites)
    rep = json.loads((out / "report.json").read_text())
    assert rep["network"]["secure_sum"] is True
    assert rep["network"]["participant_timing"].startswith("reply times observed by the coordinator")
    for k in range(3):
        recs = _records(tmp_path / f"t{k + 1}.jsonl")
        sent = [r for r in recs if r["event"] == "sent"]
        assert [r["frame"] for r in sent].count("MASKED") == 3  # two statistics shares, the polish moments
        assert not [r for r in sent if r["frame"] == "DATA" and r["type"] in ("dense-update", "second-moment-reply")]
        # the site's releases, as its transcript lists them, are the report's ledger of that participant
        mine = {}
        for r in recs:
            if r["event"] == "release":
                key = (r["release"], r["mechanism"], r["sensitivity"], r["noise_scale"])
                mine[key] = mine.get(key, 0) + r["count"]
        theirs = {(e["release"], e["mechanism"], e["sensitivity"], e["noise_scale"]): e["count"]
                  for e in rep["privacy"]["participants"][k]["events"]}
        assert mine == theirs and len(mine) >= 3
        rho = sum(r["rho"] for r in recs if r["event"] == "release")
        assert rho == pytest.approx(rep["privacy"]["participants"][k]["rho"], rel=1e-9)
        # what the private SUMMARY carried: public or ledgered keys only, no timing
        summary = [r for r in sent if r["frame"] == "SUMMARY"][0]["body"]
        assert set(summary) <= {"participant", "rows", "steps_taken", "events", "notes", "B"}
        assert "compute_s" not in summary and summary["B"] is None
        assert recs[-1]["status"] == "ok"
