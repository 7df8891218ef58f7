"""SIGTERM to bnsl serve and bnsl join mid-run: handled like Ctrl-C (one line, exit 143), the other
parties told at once, the coordinator's staging folder and lock removed, the site's transcript closed
with its end record."""

import json
import signal

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from tests.net.conftest import error_lines, no_outputs  # noqa: E402
from tests.net.test_cli_net import _mid_run  # noqa: E402


def _one_line(code, err, want_code, *says):
    assert code == want_code and "Traceback" not in err and len(error_lines(err)) == 1, (code, err)
    for s in says:
        assert s in err, (s, err)


@pytest.mark.slow  # a heavy end-to-end networked run
def test_sigterm_to_the_coordinator_mid_run(world, tmp_path):
    out = tmp_path / "out"
    coord, site1, site3, slow = _mid_run(world, out, 3)  # the coordinator waits for site 2, mid-run
    coord.send_signal(signal.SIGTERM)
    code, _, err = coord.done(timeout=30)
    _one_line(code, err, 143, "terminated (SIGTERM)")
    for s in (site1, site3):
        c, _, e = s.done(timeout=30)  # told at once, not after their --timeout of 600 s
        _one_line(c, e, 6, "the coordinator was terminated (SIGTERM)")
    slow.communicate(timeout=30)
    assert no_outputs(out)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no staging folder, no lock


@pytest.mark.slow  # a heavy end-to-end networked run
def test_sigterm_to_a_site_mid_run(world, tmp_path):
    certs, paths = world
    out = tmp_path / "out"
    coord, site1, site3, slow = _mid_run(world, out, 2)
    site1.send_signal(signal.SIGTERM)
    c1, _, e1 = site1.done(timeout=30)
    _one_line(c1, e1, 143, "terminated (SIGTERM)")
    code, _, err = coord.done(timeout=30)
    _one_line(code, err, 6, "site 1 (site1)", "terminated (SIGTERM)")
    c3, _, e3 = site3.done(timeout=30)
    _one_line(c3, e3, 6, "site 1 (site1)")
    slow.communicate(timeout=30)
    recs = [json.loads(line) for line in paths[0].with_name("site1.transcript.jsonl").read_text().splitlines()]
    ends = [r for r in recs if r["event"] == "end"]
    assert ends and ends[-1] is recs[-1] and ends[-1]["status"] == "terminated (SIGTERM)"
    assert no_outputs(out)
