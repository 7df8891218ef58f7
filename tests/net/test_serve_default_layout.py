"""A networked private run gets the noise layout ``bnsl learn`` uses (issue 27, part 6).

``bnsl serve --dp`` with fed-suffstats (the ``--dp`` default) and two or more sites uses the secure sum
and distributed noise by default, as ``bnsl learn --dp`` does in process: the same adjacency.csv,
edges.csv and graph.dot, byte for byte, and the same privacy section. ``--no-secure-sum`` plans
per-site noise (one warning line naming the √P cost), again ``bnsl learn --noise per-site``'s bytes.
A site's ``bnsl join`` limits still apply, and a site that did not accept distributed noise
(``--accept-split-noise``) stops the run before any plan is sent.

Real ``bnsl serve``/``bnsl join`` processes with mutual TLS on loopback (helpers: conftest.py), and the
layout rule itself (:func:`bnsl_cli.net.layout.resolve_secure_sum`, which serve imports) without a network.
"""

import json

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.cli.serve import resolve_secure_sum  # noqa: E402
from bnsl_cli.net.session import check_consent  # noqa: E402
from bnsl_cli.errors import RefusedError  # noqa: E402
from bnsl_cli.federated.methods.registry import method_spec  # noqa: E402
from bnsl_cli.plan.options import DPConfig, LearnConfig  # noqa: E402
from tests.net.conftest import Party, all_ok, error_lines, join, no_outputs, serve  # noqa: E402

PRIVATE = ["--dp", "--epsilon", "5", "--seed", "4"]
#: what every site accepts for these runs (400 rows per site: the default δ = 1/400² is below 1e-5)
SITE = ["--max-epsilon", "5", "--accept-seeded-noise"]
OUTPUTS = ("adjacency.csv", "edges.csv", "graph.dot")


def _report(folder):
    return json.loads((folder / "report.json").read_text())


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _networked(world, tmp_path, serve_args, join_args, learn_args):
    """``bnsl serve`` + three ``bnsl join`` and ``bnsl learn`` on the same CSVs: (served folder,
    learned folder, serve's stderr)."""
    certs, paths = world
    learned, served = tmp_path / "learned", tmp_path / "served"
    learn = Party(["learn", *map(str, paths), *PRIVATE, *learn_args, "--out", str(learned), "-q"])
    coord, port = serve(certs, served, *PRIVATE, *serve_args)
    sites = [join(certs, port, p, f"site{k + 1}", *SITE, *join_args, "--transcript", str(tmp_path / f"t{k + 1}.jsonl"))
             for k, p in enumerate(paths)]
    code, _, err = learn.done()
    assert code == 0, err
    all_ok(coord, sites)
    return served, learned, coord.stderr


def _same_privacy(a: dict, b: dict) -> None:
    """The privacy sections of two reports agree on every figure (the participants' file labels aside)."""
    pa, pb = dict(a["privacy"]), dict(b["privacy"])
    parts_a, parts_b = pa.pop("participants"), pb.pop("participants")
    assert pa == pb
    assert [{k: v for k, v in p.items() if k != "file"} for p in parts_a] == [
        {k: v for k, v in p.items() if k != "file"} for p in parts_b]


@pytest.mark.slow  # a heavy end-to-end networked run
def test_default_private_serve_is_learns_distributed_noise(world, tmp_path):
    served, learned, err = _networked(world, tmp_path, [], ["--accept-split-noise"], [])
    for name in OUTPUTS:
        assert (served / name).read_bytes() == (learned / name).read_bytes(), name
    a, b = _report(served), _report(learned)
    assert a["method"] == b["method"] and a["method"].startswith("fed-suffstats")
    assert a["network"]["secure_sum"] is True and a["network"]["secure_sum_bits"] == 32
    _same_privacy(a, b)
    noise = a["privacy"]["noise"]
    assert noise["mode"] == "distributed" and noise["sites"] == 3 and noise["collusion_tolerance"] == 0
    assert "secure sum" in noise["trust"] and "up to 0 colluding site(s)" in noise["trust"]
    assert {r["split"] for r in a["privacy"]["plan"]["releases"]} == {3}
    assert "--no-secure-sum" not in err
    # every share left a site masked: nothing summable in the clear
    for k in range(3):
        sent = [r["frame"] for r in _records(tmp_path / f"t{k + 1}.jsonl") if r["event"] == "sent"]
        assert sent.count("MASKED") >= 3 and sent.count("DATA") == 0, sent


@pytest.mark.slow  # a heavy end-to-end networked run
def test_collusion_tolerance_reaches_the_networked_default(world, tmp_path):
    served, learned, _ = _networked(world, tmp_path, ["--collusion-tolerance", "1"], ["--accept-distributed-noise"],
                                    ["--collusion-tolerance", "1"])
    for name in OUTPUTS:
        assert (served / name).read_bytes() == (learned / name).read_bytes(), name
    a, b = _report(served), _report(learned)
    _same_privacy(a, b)
    assert {r["split"] for r in a["privacy"]["plan"]["releases"]} == {2}  # each share: σ²/(P − T)
    assert a["privacy"]["noise"]["collusion_tolerance"] == 1 and "up to 1 colluding site(s)" in a["privacy"]["noise"]["trust"]


@pytest.mark.slow  # a heavy end-to-end networked run
def test_no_secure_sum_plans_per_site_noise_with_one_warning(world, tmp_path):
    served, learned, err = _networked(world, tmp_path, ["--no-secure-sum"], [], ["--noise", "per-site"])
    for name in OUTPUTS:
        assert (served / name).read_bytes() == (learned / name).read_bytes(), name
    a, b = _report(served), _report(learned)
    assert a["network"]["secure_sum"] is False
    _same_privacy(a, b)
    assert a["privacy"]["noise"] == {"mode": "per-site", "sites": 3}
    assert {r.get("split", 1) for r in a["privacy"]["plan"]["releases"]} == {1}
    warns = [line for line in err.splitlines() if "--no-secure-sum" in line]
    assert len(warns) == 1 and warns[0].startswith("warning:") and "√P = √3" in warns[0] and "per-site" in warns[0]
    for k in range(3):
        sent = [r["frame"] for r in _records(tmp_path / f"t{k + 1}.jsonl") if r["event"] == "sent"]
        assert "MASKED" not in sent


@pytest.mark.slow  # a heavy end-to-end networked run
@pytest.mark.parametrize("limit, needle", [
    (["--max-epsilon", "3"], "more than this site's --max-epsilon 3"),
    (["--max-delta", "1e-7"], "exceeds this site's --max-delta"),
    (["--methods", "fed-sparse"], "not among --methods fed-sparse"),
])
def test_a_sites_limits_still_apply_to_the_default(world, tmp_path, limit, needle):
    certs, paths = world
    out = tmp_path / "out"
    coord, port = serve(certs, out, *PRIVATE)
    sites = [join(certs, port, p, f"site{k + 1}", *SITE, "--accept-split-noise", *(limit if k == 1 else []))
             for k, p in enumerate(paths)]
    results = [s.done() for s in sites]
    code, _, err = coord.done()
    assert code == 5, err
    lines = error_lines(err)
    assert len(lines) == 1 and "site 2 (site2) refused the run" in lines[0] and needle in lines[0], lines
    assert results[1][0] == 5 and needle in results[1][2]
    assert results[0][0] == 6 and results[2][0] == 6
    assert no_outputs(out)


@pytest.mark.slow  # a heavy end-to-end networked run
def test_a_site_that_did_not_accept_distributed_noise_stops_the_run_before_the_plan(world, tmp_path):
    certs, paths = world
    out = tmp_path / "out"
    coord, port = serve(certs, out, *PRIVATE)
    sites = [join(certs, port, p, f"site{k + 1}", *SITE, *([] if k == 2 else ["--accept-split-noise"]),
                  "--transcript", str(tmp_path / f"t{k + 1}.jsonl")) for k, p in enumerate(paths)]
    results = [s.done() for s in sites]
    code, _, err = coord.done()
    assert code == 5, err
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("error: site 3 (site3) did not accept distributed noise"), lines
    assert "--accept-split-noise" in lines[0] and "serve --no-secure-sum" in lines[0]
    assert all(r[0] == 6 and "did not accept distributed noise" in r[2] for r in results)
    assert no_outputs(out)
    # no plan reached any site
    for k in range(3):
        assert not [r for r in _records(tmp_path / f"t{k + 1}.jsonl") if r["event"] == "plan"]


# -- the layout rule, without a network --------------------------------------------------------


def _cfg(method="fed-suffstats", dp=True, **dp_kw):
    cfg = LearnConfig(method=method, dp=DPConfig(epsilon=5, **dp_kw) if dp else None)
    cfg.check()
    return cfg


@pytest.mark.parametrize("cfg_kw, participants, given, want", [
    (dict(), 3, None, True),  # the --dp default: distributed noise under the secure sum
    (dict(noise="distributed"), 2, None, True),
    (dict(collusion_tolerance=1), 3, None, True),
    (dict(noise="per-site"), 3, None, False),  # learn --noise per-site has no secure sum either
    (dict(), 1, None, False),  # one site: nothing to distribute
    (dict(dp=False), 3, None, False),  # non-private: learn's bytes need the sum in the clear
    (dict(method="fed-sparse", dp=False), 3, None, False),
    (dict(method="fed-sparse", value_bound=20.0), 3, None, False),  # no distributed noise: today's default
    (dict(method="fed-moments"), 3, None, False),
    (dict(method="fed-bnsl"), 3, True, True),  # --secure-sum keeps working everywhere
    (dict(noise="per-site"), 3, True, True),
    (dict(method="fed-sparse", dp=False), 3, False, False),
])
def test_the_default_layout(cfg_kw, participants, given, want):
    cfg = _cfg(**cfg_kw)
    noise = cfg.dp.noise if cfg.dp is not None else None
    got, warning = resolve_secure_sum(cfg, method_spec(cfg.method), participants, given)
    assert got is want and warning is None
    assert (cfg.dp.noise if cfg.dp is not None else None) == noise


def test_no_secure_sum_falls_back_to_per_site_noise_and_says_what_it_costs():
    cfg = _cfg()
    got, warning = resolve_secure_sum(cfg, method_spec(cfg.method), 4, False)
    assert got is False and cfg.dp.noise == "per-site"
    assert "√P = √4 ≈ 2.00" in warning and "\n" not in warning


@pytest.mark.parametrize("dp_kw, needle", [
    (dict(noise="distributed"), "--noise distributed needs the secure sum"),
    (dict(collusion_tolerance=1), "--collusion-tolerance applies to distributed noise"),
])
def test_no_secure_sum_with_distributed_noise_asked_is_a_usage_error(dp_kw, needle):
    from bnsl_cli.errors import OptionError

    cfg = _cfg(**dp_kw)
    with pytest.raises(OptionError) as exc:
        resolve_secure_sum(cfg, method_spec(cfg.method), 3, False)
    assert exc.value.exit_code == 2  # a usage error on the command line
    assert needle in str(exc.value) and "drop --no-secure-sum" in str(exc.value)


def test_consent_is_read_from_the_hellos():
    from types import SimpleNamespace

    hello = lambda name, accept: {"site": name, "limits": {"accept_split_noise": accept}}  # noqa: E731
    suffstats = method_spec("fed-suffstats")  # a plan answers for its method (RunPlan.spec)
    split = SimpleNamespace(method="fed-suffstats", spec=suffstats,
                            privacy=SimpleNamespace(releases=[SimpleNamespace(split=3)]))
    unsplit = SimpleNamespace(method="fed-suffstats", spec=suffstats,
                              privacy=SimpleNamespace(releases=[SimpleNamespace(split=1)]))
    check_consent(split, [hello("a", True), hello("b", True), {"site": "lib"}])  # a HELLO without limits: its own check
    check_consent(unsplit, [hello("a", False)])
    with pytest.raises(RefusedError, match=r"^site 2 \(b\) did not accept distributed noise.*--no-secure-sum"):
        check_consent(split, [hello("a", True), hello("b", False), hello("c", True)])
    moments = SimpleNamespace(method="fed-moments", spec=method_spec("fed-moments"), privacy=split.privacy)  # serve --split-noise
    with pytest.raises(RefusedError, match=r"^site 1 \(a\), site 3 \(c\) did not accept split noise.*--split-noise$"):
        check_consent(moments, [hello("a", False), hello("b", True), hello("c", False)])
