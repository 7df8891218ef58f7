"""A site's transcript records each privacy release before the frame that carries it is sent."""

import json

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.federated.methods.registry import make_participant  # noqa: E402
from bnsl_cli.plan.options import DPConfig, LearnConfig  # noqa: E402
from bnsl_cli.plan.run_plan import RunPlan  # noqa: E402
from bnsl_cli.plan.shapes import Shapes  # noqa: E402
from tests.net.conftest import networked  # noqa: E402


def _rho(participant) -> float:
    return sum(float(ev.rho_each) * int(ev.count) for ev in participant.events())


@pytest.mark.slow  # a heavy end-to-end networked run
@pytest.mark.parametrize("secure", [False, True])
def test_release_records_precede_their_frame(tmp_path, tables, secure):
    plan = RunPlan.resolve(LearnConfig(method="fed-sparse", rounds=4, dp=DPConfig(epsilon=8, value_bound=20.0),
                                       seed=4), Shapes.of_tables(tables))
    after = {k: [] for k in range(plan.P)}  # each site's total ρ after answering each data message

    def part_for(plan, k, X, rng):
        part = make_participant(plan, k, X, rng)
        handle = part.handle

        def spy(msg):
            reply = handle(msg)
            if reply is not None:
                after[k].append(_rho(part))
            return reply

        part.handle = spy
        return part

    paths = [tmp_path / f"t{k}.jsonl" for k in range(plan.P)]
    result, _, errors = networked(plan, tables, secure=secure, part_for=part_for, transcripts=paths)
    assert not errors and not isinstance(result, Exception), (errors, result)
    for k, path in enumerate(paths):
        recs = [json.loads(line) for line in path.read_text().splitlines()]
        seen, at_send = 0.0, []
        for r in recs:
            if r["event"] == "release":
                seen = r["rho_total"]
            elif r["event"] == "sent" and r["frame"] in ("DATA", "MASKED"):
                at_send.append(seen)  # what the transcript held when this frame left
        assert len(at_send) == len(after[k]) > 3
        assert at_send == pytest.approx(after[k], rel=1e-12, abs=0)
        assert at_send[0] > 0  # the first data frame already carries a release
