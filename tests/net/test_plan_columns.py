"""Issue 21.1: in a networked run the plan carries the column names; the coordinator may choose
fewer (serve --columns/--drop) and every site uses exactly those, in the plan's order."""

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.net.session import plan_columns  # noqa: E402
from bnsl_cli.errors import OptionError, ShardMismatchError  # noqa: E402
from bnsl_cli.io.table import Table  # noqa: E402
from bnsl_cli.plan.options import LearnConfig  # noqa: E402
from bnsl_cli.plan.run_plan import RunPlan  # noqa: E402
from bnsl_cli.plan.shapes import ParticipantShape, Shapes  # noqa: E402
from tests.net.test_site_limits import _limits  # noqa: E402


def test_plan_columns_choose_by_name():
    names = ["a", "b", "c", "d"]
    assert plan_columns(names) == ("a", "b", "c", "d")
    assert plan_columns(names, columns="d,a,c") == ("d", "a", "c")
    assert plan_columns(names, drop="b") == ("a", "c", "d")
    assert plan_columns(names, columns="d, a,c", drop="c") == ("d", "a")
    with pytest.raises(OptionError, match=r"--columns names 'x', which the sites do not hold"):
        plan_columns(names, columns="a,x")
    with pytest.raises(OptionError, match=r"--drop names 'x'"):
        plan_columns(names, drop="x")
    with pytest.raises(OptionError, match="fewer than two columns"):
        plan_columns(names, drop="a,b,c")


def test_a_site_uses_the_plans_columns_in_the_plans_order():
    from bnsl_cli.net.policy import check_plan

    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4))
    site = Table(X, ("a", "b", "c", "d"), "site0")
    names = plan_columns(site.names, columns="c,a,d")
    shapes = Shapes(names=names, participants=(ParticipantShape("site0", 50), ParticipantShape("site1", 50)))
    plan = RunPlan.resolve(LearnConfig(), shapes)
    body = {"plan": plan.to_dict(), "index": 0, "secure_sum": None}
    acc = check_plan(body, site, _limits(), "site0")
    assert acc.plan.names == ("c", "a", "d") and acc.index == 0
    np.testing.assert_array_equal(acc.X, X[:, [2, 0, 3]])
    # a plan naming a column this site does not hold is refused
    other = Shapes(names=("a", "zz"), participants=shapes.participants)
    body = {"plan": RunPlan.resolve(LearnConfig(), other).to_dict(), "index": 0, "secure_sum": None}
    with pytest.raises(ShardMismatchError, match="the plan's columns differ"):
        check_plan(body, site, _limits(), "site0")
