"""benchmarks/networks.py (public Gaussian networks: load, check, sample, write shards) and the
magic-irri table of benchmarks/magic_irri.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bnsl_cli.io.shards import read_shards
from bnsl_cli.io.graph_formats import read_graph
from tests._bench import bench_modules


@pytest.fixture(scope="module")
def networks():
    with bench_modules("networks") as (mod,):
        yield mod


@pytest.fixture(scope="module")
def magic_irri_mod(networks):
    with bench_modules("magic_irri") as (mod,):
        yield mod


def test_magic_irri_has_the_published_size_and_values(networks):
    net = networks.load_network("magic-irri")
    assert (net.d, net.arcs, net.parameters) == (64, 102, 230)
    idx = {n: k for k, n in enumerate(net.nodes)}
    # a few values as the source lists them
    assert net.intercept[idx["HT"]] == -1.3523 and net.variance[idx["HT"]] == 52.3676
    assert net.W[idx["FT"], idx["HT"]] == 1.0564
    assert net.W[idx["GW"], idx["CHALK"]] == 27.0624
    assert np.count_nonzero(net.W[:, idx["YLD"]]) == 11
    order = net.order()
    pos = {j: k for k, j in enumerate(order)}
    assert sorted(order) == list(range(64))
    assert all(pos[i] < pos[j] for i, j in zip(*np.nonzero(net.W)))


def _write(folder: Path, nodes: str, arcs: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nodes.csv").write_text(nodes)
    (folder / "arcs.csv").write_text(arcs)


NODES = "node,intercept,variance\na,1.0,1.0\nb,0.0,0.25\nc,-2.0,4.0\n"


@pytest.mark.parametrize("nodes, arcs, message", [
    (NODES, "parent,child,coef\na,b,1\nb,c,1\nc,a,1\n", "cycle"),
    (NODES, "parent,child,coef\na,z,1\n", "unknown node 'z'"),
    (NODES, "parent,child,coef\na,b,1\na,b,2\n", "listed twice"),
    (NODES, "parent,child,coef\na,a,1\n", "self-loop"),
    (NODES, "parent,child,coef\na,b,x\n", "not a number"),
    (NODES, "from,to\na,b\n", "header"),
    ("node,intercept,variance\na,0,0\n", "parent,child,coef\n", "variance must be > 0"),
    ("node,intercept,variance\na,0,1\na,0,1\n", "parent,child,coef\n", "listed twice"),
])
def test_malformed_network_files_are_refused_naming_the_file(networks, tmp_path, nodes, arcs, message):
    _write(tmp_path / "bad", nodes, arcs)
    with pytest.raises(ValueError, match=message) as info:
        networks.load_network("bad", root=tmp_path)
    assert str(tmp_path / "bad") in str(info.value)


def test_sampling_follows_the_parameters(networks, tmp_path):
    _write(tmp_path / "tri", NODES, "parent,child,coef\na,b,0.5\na,c,-1.5\nb,c,2.0\n")
    net = networks.load_network("tri", root=tmp_path)
    X = net.sample(200_000, np.random.default_rng(0))
    assert np.allclose(X.mean(axis=0), [1.0, 0.5, -2.0 - 1.5 + 1.0], atol=0.02)
    A = np.c_[np.ones(len(X)), X[:, :2]]
    beta, *_ = np.linalg.lstsq(A, X[:, 2], rcond=None)
    assert np.allclose(beta, [-2.0, -1.5, 2.0], atol=0.03)
    assert np.var(X[:, 2] - A @ beta) == pytest.approx(4.0, rel=0.02)
    same = net.sample(5, np.random.default_rng(7))
    assert np.array_equal(same, net.sample(5, np.random.default_rng(7)))


def test_written_shards_and_truth_read_back_with_bnsl(networks, tmp_path):
    net = networks.load_network("magic-irri")
    manifest = networks.write_shards(net, tmp_path / "data", sites=3, rows=70, seed=5)
    assert manifest["seed"] == 5 and manifest["arcs"] == 102
    tables = read_shards(sorted((tmp_path / "data" / "shards").glob("*.csv")))
    assert [t.X.shape for t in tables] == [(70, 64)] * 3
    assert tables[0].names == net.nodes
    truth = read_graph(tmp_path / "data" / "truth.csv").reorder(list(net.nodes)).W
    assert np.array_equal(truth, net.W)
    X = np.vstack([t.X for t in tables])
    assert np.allclose(X, net.sample(210, np.random.default_rng(5)), rtol=1e-10, atol=1e-9)


def test_table_reports_failed_runs_and_the_empty_graph(magic_irri_mod):
    rows = [
        {"run": "default", "seed": 1, "exit": 0, "shd": 10, "shd_cpdag": 9, "skeleton_recall": 1.0, "edges": 100,
         "seconds": 3.0},
        {"run": "default", "seed": 2, "exit": 0, "shd": 20, "shd_cpdag": 19, "skeleton_recall": 0.5, "edges": 90,
         "seconds": 5.0},
        {"run": "suffstats-dp1", "seed": 1, "exit": 4, "seconds": 1.0, "message": "error: x"},
    ]
    text = magic_irri_mod.table(rows, ["default", "suffstats-dp1"], 102)
    assert "empty graph SHD = 102" in text
    assert "| default | `(defaults)` | 10 20 | 15.0 | 14.0 | 0.75 | 95.0 | 4.0 |" in text
    assert "| suffstats-dp1 | `-m fed-suffstats --dp --epsilon 1` | exit 4 | – |" in text
