"""When does --standardize help? (issue 21 item 5: the scale warning's advice.)

ER draws, d = 10, 20 expected edges, P = 4 x 1,000 rows, seeds 1-5, fed-sparse defaults with and
without --standardize, on the columns as simulated and on columns times log-uniform factors in
[0.01, 100] (which make the scale warning fire). Prints one line per draw.

Usage: python benchmarks/scale_advice.py
"""
import sys, warnings, numpy as np
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import _common as C
from bnsl_cli.simulate import simulate
from bnsl_cli.learn import LearnConfig, learn
from bnsl_cli.stats import exact_scale_warning
warnings.simplefilter("ignore")
for cs in (None, (1e-2, 1e2)):
    for seed in (1, 2, 3, 4, 5):
        sim = simulate(10, 20, participants=4, samples=1000, seed=seed, column_scale=cs)
        tables = C.tables_of(sim.shards, sim.names)
        w = exact_scale_warning(tables, sim.names) is not None
        out = []
        for std in (False, True):
            res = learn(tables, LearnConfig(method="fed-sparse", seed=0, standardize=std))
            out.append(C.metrics(res.W, sim.W)["shd"])
        print(f"column_scale={cs} seed={seed} warns={w} SHD default={out[0]} --standardize={out[1]}", flush=True)
