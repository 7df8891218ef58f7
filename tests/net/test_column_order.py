"""A site whose CSV has its columns in another order than site 1's: the networked run's outputs are
byte-identical to ``bnsl learn`` on the same files (each reorders the shard to C order)."""

import json

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from tests.net.conftest import Party, all_ok, join, serve  # noqa: E402


def _permuted(src, dst, order):
    lines = src.read_text().splitlines()
    names = lines[0].split(",")
    X = np.loadtxt(src, delimiter=",", skiprows=1)
    np.savetxt(dst, X[:, order], delimiter=",", header=",".join(names[k] for k in order), comments="", fmt="%.10g")


@pytest.mark.slow  # a heavy end-to-end networked run
def test_reordered_columns_give_the_bytes_of_learn(world, tmp_path):
    certs, paths = world
    d = len(paths[0].read_text().splitlines()[0].split(","))
    order = list(range(d))[::-1]
    order[0], order[3] = order[3], order[0]  # not just reversed
    here = tmp_path / "sites"  # one folder: learn orders its shards by path, serve its sites by name
    here.mkdir()
    files = [here / p.name for p in paths]
    for src, dst in zip(paths, files):
        dst.write_bytes(src.read_bytes())
    _permuted(paths[1], files[1], order)
    learned = tmp_path / "learned"
    learn = Party(["learn", *map(str, files), "--seed", "3", "--out", str(learned), "-q"])
    served = tmp_path / "served"
    coord, port = serve(certs, served, "--seed", "3")
    sites = [join(certs, port, p, f"site{k + 1}", "--allow-non-private") for k, p in enumerate(files)]
    code, _, err = learn.done()
    assert code == 0, err
    all_ok(coord, sites)
    for name in ("adjacency.csv", "edges.csv", "graph.dot"):
        assert (served / name).read_bytes() == (learned / name).read_bytes(), name
    a, b = (json.loads((p / "report.json").read_text()) for p in (served, learned))
    assert a["rounds"] == b["rounds"] and a["final"] == b["final"]
