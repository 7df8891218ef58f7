"""The library's front door: ``learn(tables, options)``.

``options`` is a :class:`~bnsl_cli.plan.options.LearnConfig` (the plan is resolved from the tables' public
shape) or an already resolved :class:`~bnsl_cli.plan.run_plan.RunPlan`. The participants are built from the
tables in this process (or in ``plan.workers`` worker processes) and :func:`bnsl_cli.run.run` runs
the plan. Participants elsewhere (``bnsl serve``) go through ``run(plan, fleet)`` directly.
This module also re-exports the public names a script needs.
"""

from __future__ import annotations

import time

from typing import Callable, Optional, Union

from bnsl_cli.bootstrap import run_replicates
from bnsl_cli.federated.methods.registry import METHODS, method_spec
from bnsl_cli.io.csv_reader import check_magnitudes
from bnsl_cli.numerics import single_blas_thread
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan, check_verdict, default_delta, default_steps
from bnsl_cli.plan.shapes import Shapes
from bnsl_cli.report import InputRecord
from bnsl_cli.run import SCHEMA_VERSION, LearnResult, local_fleet, run

__all__ = [
    "METHODS",
    "LearnConfig",
    "DPConfig",
    "RunPlan",
    "Shapes",
    "LearnResult",
    "learn",
    "run",
    "default_lambda",
    "default_steps",
    "default_delta",
    "SCHEMA_VERSION",
]


def learn(
    tables,
    options: Union[LearnConfig, RunPlan] = LearnConfig(),
    progress: Optional[Callable[[dict], None]] = None,
    *,
    input_record: Optional[InputRecord] = None,
    bootstrap_progress: Optional[Callable[[int, int], None]] = None,
) -> LearnResult:
    """Learn a DAG from participant tables (one table = one participant, same columns): resolve
    the plan (unless ``options`` is one), build the participants here (or in worker processes), run.
    ``input_record``: the columns and rows chosen when the tables were read (the report's ``input``).
    With ``--bootstrap B`` (non-private) the B replicates on resampled rows run first
    (:func:`bnsl_cli.bootstrap.run_replicates`; ``bootstrap_progress(done, B)`` after each)."""
    plan = options if isinstance(options, RunPlan) else RunPlan.resolve(options, Shapes.of_tables(tables))
    check_verdict(plan)  # a private plan expected to be lost in its noise is refused before any value is drawn
    if not plan.private:
        # values whose squares overflow the moments are bad input (a private run clips them instead)
        for t in tables:
            check_magnitudes(t)
    replicates = None
    started = time.perf_counter()  # report.json's timing.wall_s covers the replicates too
    if plan.bootstrap and not plan.private:  # a private run's method resamples its releases instead
        replicates = run_replicates(tables, plan, bootstrap_progress)
    with single_blas_thread():
        fleet = local_fleet(plan, tables)
    try:
        return run(plan, fleet, progress, input_record=input_record, replicates=replicates,
                   started=started if replicates is not None else None)
    finally:
        fleet.close()


def default_lambda(method: str) -> float:
    """The method's default ℓ₁ weight (non-private)."""
    return method_spec(method).default_lambda
