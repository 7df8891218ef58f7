"""The run plan: the user's choices (:mod:`~bnsl_cli.plan.options`), the data's public shape
(:mod:`~bnsl_cli.plan.shapes`), the privacy plan (:mod:`~bnsl_cli.plan.privacy_plan`) and the
resolved, frozen :class:`~bnsl_cli.plan.run_plan.RunPlan` (:mod:`~bnsl_cli.plan.run_plan`).

The package re-exports the three names of the library's documented surface; everything else is
imported from the module that defines it.
"""

from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan

__all__ = ["LearnConfig", "DPConfig", "RunPlan"]
