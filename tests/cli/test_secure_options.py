"""bnsl serve's secure-aggregation options: combinations refused with one line, before listening."""

import pytest
from typer.testing import CliRunner

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.cli.app import app  # noqa: E402

BASE = ["serve", "-P", "2", "--listen", "127.0.0.1:0", "--insecure"]


@pytest.mark.parametrize("extra, needle", [
    (["--secure-sum", "--method", "fed-bnsl", "--personal"], "--personal asks every site for its own B_p"),
    (["--split-noise", "--method", "fed-moments", "--dp", "--epsilon", "5"], "--split-noise needs --secure-sum"),
    (["--secure-sum", "--split-noise", "--method", "fed-sparse", "--dp", "--epsilon", "5"], "only --method fed-moments --dp"),
    (["--secure-sum", "--split-noise", "--method", "fed-moments"], "only --method fed-moments --dp"),
])
def test_refused_combinations(extra, needle):
    r = CliRunner().invoke(app, BASE + extra)
    assert r.exit_code == 2, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0]
    assert "Traceback" not in r.output
