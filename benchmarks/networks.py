"""Public linear-Gaussian Bayesian networks for the benchmarks: load one, sample it, write shards.

A network lives in ``benchmarks/data/<name>/`` as two CSV files (see the README there):

* ``nodes.csv`` — ``node,intercept,variance``: one row per node, in the source's order; a node's
  value is its intercept plus the weighted sum of its parents plus Gaussian noise of that variance;
* ``arcs.csv`` — ``parent,child,coef``: one row per arc.

:func:`load_network` reads and checks them (known nodes, no duplicate arc or self-loop, positive
variances, acyclic); :meth:`GaussianNetwork.sample` draws rows in topological order exactly as the
parameters say (raw units, intercepts included); :func:`write_shards` writes ``P`` shards of ``n``
rows and the weighted truth in the layout ``bnsl simulate`` uses, so ``bnsl learn OUT/shards`` and
``bnsl evaluate RUN/report.json --truth OUT/truth.csv`` work on it unchanged.

  python benchmarks/networks.py check magic-irri
  python benchmarks/networks.py sample magic-irri --sites 5 --rows 1000 --seed 1 --out data/magic-irri-s1

Benchmark code only: nothing here is part of the package.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class GaussianNetwork:
    """A linear-Gaussian DAG: ``X_j = intercept_j + sum_i W[i, j] X_i + N(0, variance_j)``.

    ``W[i, j]`` is the coefficient of parent ``i`` in child ``j`` (rows are parents, as in bnsl)."""

    name: str
    nodes: tuple[str, ...]
    W: np.ndarray
    intercept: np.ndarray
    variance: np.ndarray

    @property
    def d(self) -> int:
        return len(self.nodes)

    @property
    def arcs(self) -> int:
        return int(np.count_nonzero(self.W))

    @property
    def parameters(self) -> int:
        """Intercepts, coefficients and residual variances (bnlearn's count)."""
        return 2 * self.d + self.arcs

    @property
    def sd(self) -> np.ndarray:
        return np.sqrt(self.variance)

    def order(self) -> list[int]:
        """A topological order (parents first; ties in the file's node order)."""
        return _topological_order(self.W != 0)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` independent rows (n × d, columns in node order), drawn parent before child."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        Z = rng.standard_normal((n, self.d))
        X = np.zeros((n, self.d))
        for j in self.order():
            parents = np.flatnonzero(self.W[:, j])
            X[:, j] = self.intercept[j] + X[:, parents] @ self.W[parents, j] + self.sd[j] * Z[:, j]
        return X


def _topological_order(A: np.ndarray) -> list[int]:
    d = A.shape[0]
    indeg = A.sum(axis=0).astype(int)
    ready = [j for j in range(d) if indeg[j] == 0]
    order: list[int] = []
    while ready:
        i = ready.pop(0)
        order.append(i)
        for j in np.flatnonzero(A[i]):
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(int(j))
        ready.sort()
    if len(order) != d:
        raise ValueError("the arcs form a cycle")
    return order


def _rows(path: Path, header: list[str]) -> list[list[str]]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror})") from None
    if not rows or [h.strip() for h in rows[0]] != header:
        raise ValueError(f"{path}: the header must be {','.join(header)}")
    body = [r for r in rows[1:] if r]
    for k, r in enumerate(body, start=2):
        if len(r) != len(header):
            raise ValueError(f"{path}: line {k} has {len(r)} fields, expected {len(header)}")
    return body


def _number(path: Path, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{path}: {what} {text!r} is not a number") from None
    if not np.isfinite(value):
        raise ValueError(f"{path}: {what} {text!r} is not finite")
    return value


def load_network(name: str, root: Path = DATA) -> GaussianNetwork:
    """Read ``root/name/nodes.csv`` and ``arcs.csv``; ``ValueError`` naming the file when malformed."""
    folder = Path(root) / name
    nodes_path, arcs_path = folder / "nodes.csv", folder / "arcs.csv"
    node_rows = _rows(nodes_path, ["node", "intercept", "variance"])
    nodes = tuple(r[0].strip() for r in node_rows)
    if not nodes:
        raise ValueError(f"{nodes_path}: no nodes")
    if len(set(nodes)) != len(nodes):
        dup = sorted({n for n in nodes if nodes.count(n) > 1})
        raise ValueError(f"{nodes_path}: node(s) listed twice: {', '.join(dup)}")
    index = {n: k for k, n in enumerate(nodes)}
    intercept = np.array([_number(nodes_path, r[1], f"intercept of {r[0]}") for r in node_rows])
    variance = np.array([_number(nodes_path, r[2], f"variance of {r[0]}") for r in node_rows])
    if np.any(variance <= 0):
        bad = [nodes[k] for k in np.flatnonzero(variance <= 0)]
        raise ValueError(f"{nodes_path}: variance must be > 0 ({', '.join(bad)})")
    W = np.zeros((len(nodes), len(nodes)))
    for parent, child, coef in _rows(arcs_path, ["parent", "child", "coef"]):
        parent, child = parent.strip(), child.strip()
        for node in (parent, child):
            if node not in index:
                raise ValueError(f"{arcs_path}: unknown node {node!r} (not in nodes.csv)")
        if parent == child:
            raise ValueError(f"{arcs_path}: self-loop on {parent}")
        i, j = index[parent], index[child]
        if W[i, j] != 0:
            raise ValueError(f"{arcs_path}: arc {parent} -> {child} listed twice")
        w = _number(arcs_path, coef, f"coefficient of {parent} -> {child}")
        if w == 0:
            raise ValueError(f"{arcs_path}: arc {parent} -> {child} has coefficient 0")
        W[i, j] = w
    try:
        _topological_order(W != 0)
    except ValueError:
        raise ValueError(f"{arcs_path}: the arcs form a cycle") from None
    return GaussianNetwork(name, nodes, W, intercept, variance)


def _write_csv(path: Path, names, X: np.ndarray) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(",".join(names) + "\n")
        np.savetxt(fh, X, delimiter=",", fmt="%.12g")


def write_shards(net: GaussianNetwork, out: Path, sites: int, rows: int, seed: int) -> dict:
    """Sample ``sites × rows`` rows with ``numpy.random.default_rng(seed)`` and write
    ``out/shards/participant-01.csv …`` (consecutive blocks of ``rows``), ``out/truth.csv`` (the
    weighted adjacency, rows = parents, with an index column as ``bnsl simulate`` writes it) and
    ``out/manifest.json`` (network, seed, sizes, sha256 of every file). Returns the manifest."""
    if sites < 1 or rows < 1:
        raise ValueError("sites and rows must be >= 1")
    out = Path(out)
    shard_dir = out / "shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    X = net.sample(sites * rows, np.random.default_rng(seed))
    files = []
    for k in range(sites):
        path = shard_dir / f"participant-{k + 1:02d}.csv"
        _write_csv(path, net.nodes, X[k * rows:(k + 1) * rows])
        files.append(path)
    truth = out / "truth.csv"
    with open(truth, "w", encoding="utf-8") as fh:
        fh.write("," + ",".join(net.nodes) + "\n")
        for i, name in enumerate(net.nodes):
            fh.write(name + "," + ",".join(repr(float(w)) for w in net.W[i]) + "\n")
    files.append(truth)
    manifest = {
        "network": net.name,
        "nodes": net.d,
        "arcs": net.arcs,
        "parameters": net.parameters,
        "seed": seed,
        "sites": sites,
        "rows_per_site": rows,
        "sampler": "numpy.random.default_rng(seed).standard_normal((sites*rows, d)), topological order",
        "numpy_version": np.__version__,
        "sha256": {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    check = sub.add_parser("check", help="load a network and print its size")
    check.add_argument("name")
    sample = sub.add_parser("sample", help="write shards, truth.csv and manifest.json")
    sample.add_argument("name")
    sample.add_argument("--sites", type=int, default=5)
    sample.add_argument("--rows", type=int, default=1000, help="rows per site")
    sample.add_argument("--seed", type=int, default=1)
    sample.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    try:
        net = load_network(a.name)
        if a.cmd == "check":
            print(f"{net.name}: {net.d} nodes, {net.arcs} arcs, {net.parameters} parameters, acyclic")
        else:
            m = write_shards(net, a.out, a.sites, a.rows, a.seed)
            print(f"{a.out}: {m['sites']} shards x {m['rows_per_site']} rows of {net.name} (seed {a.seed})")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
