"""The Flower app's pieces without a federation: the run configuration is ``bnsl serve``'s (the same
run options, the same secure-sum rule), the site's configuration comes from its node config, the
envelope refuses what is not a bnsl request, and bnsl without flwr still imports (Python 3.10)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("flwr")

from bnsl_cli.errors import OptionError
from bnsl_cli.net.flower import envelope as E
from bnsl_cli.net.flower.server import (
    NOT_ON_FLOWER,
    RUN_OPTION_FIELDS,
    RunConfig,
    learn_config,
    resolve_secure_sum,
)
from bnsl_cli.net.flower.site import SiteConfig


def test_the_run_options_are_serves():
    from bnsl_cli.cli.serve import RUN_OPTIONS

    """Every run option of ``bnsl serve`` is taken by the app or refused by name (NOT_ON_FLOWER), no other."""
    assert RUN_OPTION_FIELDS | NOT_ON_FLOWER == RUN_OPTIONS and not RUN_OPTION_FIELDS & NOT_ON_FLOWER
    with pytest.raises(OptionError, match="not offered by the Flower app"):
        learn_config("--bootstrap 10")


@pytest.mark.parametrize("options", [
    "",
    "--dp --epsilon 5",
    "-m fed-sparse --rounds 7 --lambda 0.02 --no-polish --seed 3",
    "--method fed-moments --dp --epsilon=4 --accountant zcdp --standardize",
    "--dp --epsilon 5 --noise per-site --accountant zcdp --require x1->x2 --forbid x3->x1",
    "-m fed-bnsl --rounds 30 --personal --trace",
])
def test_learn_config_equals_serves(options, monkeypatch):
    """The options string gives the LearnConfig ``bnsl serve`` builds from the same command line."""
    import shlex

    from typer.testing import CliRunner

    from bnsl_cli.cli import serve
    from bnsl_cli.cli.app import build_app

    captured = {}

    def fake(ctx=None, **kw):  # serve's own parsing and its _config; no network
        captured["cfg"] = serve.run_options({k: v for k, v in kw.items() if k in serve.RUN_OPTIONS}, ctx)

    monkeypatch.setattr(serve, "_serve", fake)
    for var in ("BNSL_EPSILON", "BNSL_DELTA", "BNSL_SEED", "BNSL_METHOD", "BNSL_ROUNDS", "BNSL_QUIET"):
        monkeypatch.delenv(var, raising=False)
    res = CliRunner().invoke(build_app({"serve"}), ["serve", "-P", "3", *shlex.split(options)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert learn_config(options) == captured["cfg"]


@pytest.mark.parametrize("options, says", [
    ("--dp", "--dp needs --epsilon"),
    ("--epsilon 5", "without --dp"),
    ("--rounds", "needs a value"),
    ("--no-such 3", "no such option"),
    ("site1.csv", "unexpected"),
    ("--rounds three", "not a valid int"),
    ("--workers 2", "no such option"),
])
def test_bad_options_are_refused(options, says):
    with pytest.raises(OptionError, match=says):
        learn_config(options)


@pytest.mark.parametrize("options, P, choice", [
    ("--dp --epsilon 5", 3, "auto"), ("--dp --epsilon 5", 1, "auto"), ("--dp --epsilon 5 --noise per-site", 3, "auto"),
    ("--dp --epsilon 5", 3, "off"), ("-m fed-sparse", 3, "on"), ("-m fed-bnsl --dp --epsilon 5", 3, "off"),
])
def test_the_secure_sum_rule_is_serves(options, P, choice):
    from bnsl_cli.cli import serve
    from bnsl_cli.federated.methods.registry import method_spec

    ours = learn_config(options)
    theirs = learn_config(options)
    got = resolve_secure_sum(ours, P, choice)
    want = serve.resolve_secure_sum(theirs, method_spec(theirs.method), P, {"auto": None, "on": True, "off": False}[choice])
    assert got[0] == want[0] and (got[1] is None) == (want[1] is None) and ours == theirs


def test_run_config_is_typed():
    rc = RunConfig.from_run_config({"options": "--dp --epsilon 5", "participants": 3, "timeout": 10, "other-app": 1})
    assert rc.participants == 3 and rc.timeout == 10.0
    for bad in ({"participants": "3"}, {"secure-sum": "maybe"}, {"secure-sum-bits": 60}, {"force": 1}):
        with pytest.raises(OptionError):
            RunConfig.from_run_config(bad)


def test_site_config_comes_from_the_node_config(tmp_path):
    cfg = SiteConfig.from_node_config({"csv": str(tmp_path / "a.csv"), "max-epsilon": 3, "methods": "fed-suffstats, fed-sparse",
                                       "accept-split-noise": "true", "partition-id": 0})
    assert cfg.limits.max_epsilon == 3.0 and cfg.limits.methods == ("fed-suffstats", "fed-sparse")
    assert cfg.limits.accept_split_noise is True and cfg.name == "a.csv"
    assert cfg.state_dir == tmp_path / "a.bnsl-state" and cfg.transcript == tmp_path / "a.transcript.jsonl"
    with pytest.raises(OptionError, match="csv"):
        SiteConfig.from_node_config({"max-epsilon": 3.0})
    with pytest.raises(OptionError, match="say what this site accepts"):
        SiteConfig.from_node_config({"csv": "a.csv"})
    with pytest.raises(OptionError, match="unknown key 'method'"):  # a misspelt limit never lifts it
        SiteConfig.from_node_config({"csv": "a.csv", "max-epsilon": 1.0, "method": "fed-sparse"})
    with pytest.raises(OptionError, match="max-rounds"):
        SiteConfig.from_node_config({"csv": "a.csv", "max-epsilon": 1.0, "max-rounds": "ten"})


def test_the_envelope_refuses_what_is_not_a_bnsl_request():
    from flwr.app import ConfigRecord, RecordDict

    good = E.request_content(E.FRAME, "tag", 2, b"\x04\x02abc")
    assert E.read_request(good) == E.Request(E.FRAME, "tag", 2, b"\x04\x02abc")
    for rec in ({"op": "frame", "run": "tag", "seq": 2}, {"op": "hello", "run": "tag", "seq": True},
                {"op": "shell", "run": "tag", "seq": 1}, {"op": "hello", "run": "", "seq": 1}):
        with pytest.raises(ValueError):
            E.read_request(RecordDict({E.RECORD: ConfigRecord(rec)}))
    with pytest.raises(ValueError):
        E.read_request(RecordDict())
    assert E.read_reply(E.reply_content([b"ab", b"c"])) == [b"ab", b"c"]


def test_bnsl_imports_without_flwr():
    """With flwr unimportable (as on Python 3.10) bnsl and its CLI import, the Flower package says how
    to install the extra, and only its app module needs flwr."""
    code = (
        "import sys; sys.modules['flwr'] = None\n"
        "import bnsl_cli, bnsl_cli.cli.app, bnsl_cli.learn, bnsl_cli.net.fleet\n"
        "import bnsl_cli.net.flower, bnsl_cli.net.flower.server, bnsl_cli.net.flower.site, bnsl_cli.net.flower.fleet\n"
        "from bnsl_cli.errors import BnslError\n"
        "try:\n    bnsl_cli.net.flower.need_flwr()\nexcept BnslError as e:\n    print('refused:', e)\n"
        "try:\n    import bnsl_cli.net.flower.app\nexcept ImportError:\n    print('app needs flwr')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert "refused: the Flower app needs the optional extra" in res.stdout and "app needs flwr" in res.stdout
