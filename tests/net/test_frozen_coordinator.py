"""A coordinator that stops answering — its process frozen (SIGSTOP), its machine or network gone —
is noticed by its sites within FROZEN_COORDINATOR_S (keep-alive pings it cannot acknowledge), while
a coordinator that is merely busy, silent for longer than that, is waited for."""

import inspect
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.net import common  # noqa: E402
from tests.net.conftest import ENV, Party, error_lines, tls  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_keepalive_settings_match_the_documented_time():
    """The site's channel pings a silent coordinator and gives up on an unanswered ping within the
    documented time; the coordinator's server lets it ping that often; join --help and
    docs/federation.md state that time."""
    opts = dict(common.CHANNEL_OPTIONS)
    assert opts["grpc.keepalive_time_ms"] == common.KEEPALIVE_S * 1000
    # gRPC waits grpc.http2.ping_timeout_ms (60 s unless set) for a keep-alive ping's acknowledgement
    assert opts["grpc.http2.ping_timeout_ms"] == opts["grpc.keepalive_timeout_ms"] == common.PING_TIMEOUT_S * 1000
    assert opts["grpc.keepalive_permit_without_calls"] == 1 and opts["grpc.http2.max_pings_without_data"] == 0
    assert common.KEEPALIVE_S + common.PING_TIMEOUT_S < common.FROZEN_COORDINATOR_S
    server = dict(common.SERVER_OPTIONS)
    assert server["grpc.http2.min_ping_interval_without_data_ms"] <= opts["grpc.keepalive_time_ms"] // 2
    assert server["grpc.http2.ping_timeout_ms"] == server["grpc.keepalive_timeout_ms"]
    from bnsl_cli.cli import join

    help_text = inspect.signature(join.command).parameters["timeout"].default.help
    assert f"given up within {common.FROZEN_COORDINATOR_S} s" in help_text, help_text
    doc = (ROOT / "docs" / "federation.md").read_text()
    assert f"within {common.FROZEN_COORDINATOR_S} s" in doc


#: a coordinator (the fleet of bnsl serve, mutual TLS) that takes one site, computes for ``busy``
#: seconds without sending anything (a pure-Python loop), says so, then waits
BUSY_COORDINATOR = r"""
import sys, time
from bnsl_cli.net.fleet import NetworkFleet
from bnsl_cli.net.tls import load_party
certs, busy = sys.argv[1], float(sys.argv[2])
fleet = NetworkFleet("127.0.0.1:0", 1, load_party(f"{certs}/ca.pem", f"{certs}/coordinator.pem", f"{certs}/coordinator.key"),
                     timeout=600)
print(fleet.port, flush=True)
fleet.gather(60)
print("gathered", flush=True)
end, x = time.monotonic() + busy, 0
while time.monotonic() < end:
    x += sum(i * i for i in range(1000))
print("computed", flush=True)
time.sleep(600)
"""


@pytest.mark.slow  # about 20 s: a coordinator busy for longer than the documented time, then frozen
def test_a_frozen_coordinator_is_noticed_within_the_documented_time(certs, tmp_path):
    csv = tmp_path / "site1.csv"
    csv.write_text("a,b,c\n" + "".join(f"{i % 7},{i % 5},{i % 3}\n" for i in range(40)))
    busy = common.FROZEN_COORDINATOR_S + 2
    coord = subprocess.Popen([sys.executable, "-c", BUSY_COORDINATOR, str(certs), str(busy)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    site = None
    try:
        port = int(coord.stdout.readline())
        site = Party(["join", f"127.0.0.1:{port}", str(csv), "--allow-non-private", "--timeout", "600",
                      "--transcript", str(tmp_path / "t.jsonl"), *tls(certs, "site1")])
        assert coord.stdout.readline().strip() == "gathered"
        # busy (silent, but its process answers the pings) for longer than the documented time: the site waits
        assert coord.stdout.readline().strip() == "computed"
        assert site.proc.poll() is None, site.stderr
        coord.send_signal(signal.SIGSTOP)  # frozen: the connection stays open, nothing answers
        frozen = time.monotonic()
        code, _, err = site.done(timeout=common.FROZEN_COORDINATOR_S + 30)
        took = time.monotonic() - frozen
        lines = error_lines(err)
        assert code == 6 and len(lines) == 1 and "Traceback" not in err, err
        assert f"the coordinator at 127.0.0.1:{port} stopped answering" in lines[0] and "keep-alive" in lines[0], err
        assert took <= common.FROZEN_COORDINATOR_S, f"noticed after {took:.1f} s: {err}"
    finally:
        if site is not None and site.proc.poll() is None:
            site.proc.kill()
        coord.send_signal(signal.SIGCONT)
        coord.kill()
        coord.communicate(timeout=30)
