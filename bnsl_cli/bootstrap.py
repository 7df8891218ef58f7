"""Edge confidence of a non-private run by resampling the rows (``--bootstrap B``): each participant
draws its own rows with replacement (as many as it has) and the same plan runs again on them, B
times, in this process or in ``plan.workers`` worker processes (one replicate per worker at a
time). The replicates' graphs are counted (:class:`~bnsl_cli.confidence.EdgeCounts`); the run
itself (:func:`bnsl_cli.run.run`) turns the counts into strengths and, with ``--min-strength``, the
averaged network.

A private run does not resample rows (every replicate would be a new release): its method resamples
its released statistics instead, as post-processing (the method's ``resamples_releases``).

Replicate ``b``'s rows at participant ``k`` come from the stream ``SeedSequence(seed, spawn_key=
(RESAMPLE_KEY, b, k))`` (:func:`bnsl_cli.confidence.resampling_rng`): reproducible with ``--seed``,
independent of the participants' other streams, and the same whatever the number of workers.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import warnings
from dataclasses import replace
from typing import Callable, Optional

import numpy as np

from bnsl_cli.confidence import EdgeCounts, Replicates, resample_rows
from bnsl_cli.errors import BnslError
from bnsl_cli.federated.fleet import default_workers
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.run import local_fleet, run

__all__ = ["SOURCE", "resample_rows", "run_replicates"]  # resample_rows: bnsl_cli.confidence's

#: the report's ``confidence.source`` of a non-private run
SOURCE = "each participant resampled its own rows (with replacement, as many as it has) for every replicate"


_JOB: Optional[tuple] = None  # (tables, plan, entropy), set before the worker processes fork


def _quiet_worker() -> None:
    """A replicate worker leaves Ctrl-C to the main process and ends on SIGTERM without a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _one(b: int):
    tables, plan, entropy = _JOB
    resampled = [replace(t, X=resample_rows(t.X, entropy, b, k)) for k, t in enumerate(tables)]
    fleet = local_fleet(plan, resampled)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the replicates' own warnings: the run's are reported once
            result = run(plan, fleet)
        return b, result.W, None
    except BnslError as exc:
        return b, None, str(exc)
    finally:
        fleet.close()


def run_replicates(tables, plan: RunPlan, progress: Optional[Callable[[int, int], None]] = None) -> Replicates:
    """Run ``plan.bootstrap`` replicates of ``plan`` on resampled rows of ``tables`` (see the
    module docstring). A replicate that fails (a resample can make a column constant) is left out
    and named in ``failures``; ``progress(done, total)`` after each."""
    global _JOB
    B = int(plan.bootstrap)
    one = replace(plan, bootstrap=0, min_strength=None, workers=1, trace=False)
    entropy = plan.seed if plan.seed is not None else int(np.random.SeedSequence().entropy)
    # as many processes as the participants' fleet would take, counted in replicates
    workers = default_workers(B) if plan.workers is None else max(1, min(int(plan.workers), B))
    _JOB = (tables, one, entropy)
    graphs, failures = {}, []
    try:
        if workers > 1 and "fork" in mp.get_all_start_methods():
            pool = mp.get_context("fork").Pool(workers, initializer=_quiet_worker)
            try:
                results = pool.imap_unordered(_one, range(B))
                for done, (b, W, why) in enumerate(results, start=1):
                    _collect(graphs, failures, b, W, why)
                    if progress is not None:
                        progress(done, B)
                pool.close()
            except BaseException:
                pool.terminate()  # Ctrl-C or an error here: the workers end at once, without a word
                raise
            finally:
                pool.join()
        else:
            for done, b in enumerate(range(B), start=1):
                _collect(graphs, failures, *_one(b))
                if progress is not None:
                    progress(done, B)
    finally:
        _JOB = None
    counts = EdgeCounts.of([graphs[b] for b in sorted(graphs)]) if graphs else None
    return Replicates(counts, B, tuple(sorted(failures)), SOURCE)


def _collect(graphs: dict, failures: list, b: int, W, why) -> None:
    if W is None:
        failures.append((b, why))
    else:
        graphs[b] = W
