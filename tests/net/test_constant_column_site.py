"""A site's constant column (issue 20 item 7): whether a column is constant is a function of the site's
rows, so ``bnsl join`` checks it only for a non-private plan. A private run goes on with a site whose
column is constant (before, that site stopped with an error before joining — a signal about its rows);
a non-private run still stops with the one-line error naming the file and the column."""

from __future__ import annotations

import numpy as np
import pytest

from tests.net.conftest import error_lines, join, serve


def _flatten(path, tmp_path):
    X = np.genfromtxt(path, delimiter=",", skip_header=1)
    header = path.read_text().splitlines()[0]
    X[:, 2] = 0.5
    flat = tmp_path / path.name
    np.savetxt(flat, X, delimiter=",", header=header, comments="", fmt="%.10g")
    return flat, header.split(",")[2]


@pytest.mark.slow  # a heavy end-to-end networked run
def test_private_run_ignores_a_constant_column_non_private_refuses_it(small_world, tmp_path):
    certs, paths = small_world
    flat, col = _flatten(paths[0], tmp_path)
    sites_csv = [flat, *paths[1:]]
    out = tmp_path / "private"
    coord, port = serve(certs, out, "-m", "fed-sparse", "--dp", "--epsilon", "10", "--value-bound", "20", "--rounds", "3",
                        "--steps", "5")
    # 300 rows per site: the plan's default δ = 1/300² is above join's default bound (1e-5)
    sites = [join(certs, port, p, f"site{k + 1}", "--max-epsilon", "10", "--max-delta", "1e-4")
             for k, p in enumerate(sites_csv)]
    for party in (*sites, coord):
        code, _, err = party.done()
        assert code == 0 and "constant" not in err, err
    out2 = tmp_path / "plain"
    coord, port = serve(certs, out2, "--rounds", "3")
    sites = [join(certs, port, p, f"site{k + 1}", "--allow-non-private") for k, p in enumerate(sites_csv)]
    results = [s.done() for s in sites]
    code, _, err = coord.done()
    assert code != 0, err
    assert results[0][0] == 3, results[0][2]
    lines = error_lines(results[0][2])
    assert len(lines) == 1 and "site1.csv" in lines[0] and repr(col) in lines[0] and "constant" in lines[0]
