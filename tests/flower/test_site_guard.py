"""The site guard on Flower: a malicious ServerApp (more rounds than its plan, a replayed round, a
replayed Flower message, a second plan, the crafted basis of the message-privacy issue) is refused
as ``bnsl join`` refuses it; the site's limits are its node configuration's, never the run
configuration's; and no ClientApp restart, lost reply or replay resets the site's ledger.

The coordinator here is :class:`~bnsl_cli.net.flower.fleet.FlowerFleet` driven by hand (the
attacks) or the ServerApp's own :func:`~bnsl_cli.net.flower.server.coordinate`; the sites are the
real ClientApp, reached through :class:`tests.flower._grid.LoopbackGrid` (a fresh context per
message, the messages serialised as Flower carries them).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from bnsl_cli.errors import FederationError, SiteRefusedError
from bnsl_cli.net import frames as F
from bnsl_cli.net.flower import envelope as E
from bnsl_cli.net.flower.fleet import FlowerFleet
from bnsl_cli.net.flower.state import RunStore
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import ParticipantShape, Shapes
from tests.flower._grid import LoopbackGrid
from tests.flower.conftest import (
    NODES,
    OUTPUTS,
    flower_run,
    learn_cli,
    node_configs,
    records,
)

ROUNDS, STEPS = 5, 20


from tests.net.test_malicious_coordinator import _round  # noqa: E402 - the rounds a site expects


def _malicious(csv, tmp_path, attack, config=None):
    """One site (the real ClientApp, node config ε ≤ 8) against a coordinator in this process that
    resolves an honest private plan (``config``; default fed-sparse, 5 rounds) and then runs
    ``attack(fleet, plan, grid)``. Returns (what the attack raised, the site's transcript, the grid)."""
    nodes = node_configs([csv], tmp_path)
    grid = LoopbackGrid(nodes)
    fleet = FlowerFleet(grid, 1, timeout=30)
    raised = None
    try:
        (hello,) = fleet.gather(10)
        shapes = Shapes(tuple(hello["columns"]), (ParticipantShape(hello["site"], hello["rows"]),))
        cfg = config or LearnConfig(method="fed-sparse", rounds=ROUNDS, steps=STEPS,
                                    dp=DPConfig(epsilon=5.0, value_bound=10.0))
        plan = RunPlan.resolve(cfg, shapes)
        body = plan.to_dict()
        fleet.start(lambda i: {"plan": body, "index": i, "secure_sum": None})
        try:
            attack(fleet, plan, grid)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            raised = exc
    finally:
        fleet.close(ok=False)
    return raised, records(tmp_path / "site1.transcript.jsonl"), grid


def _spend(recs):
    accepted = next(r for r in recs if r["event"] == "plan" and r["decision"] == "accepted")
    spent = sum(r["rho"] for r in recs if r["event"] == "release")
    return accepted["rho"], spent


def _later_messages_refused(grid, tmp_path):
    """After a refusal the site's run is closed: even the next in-sequence message is refused."""
    store = RunStore(tmp_path / "state-1", grid.run_id)
    state = store.load()
    assert state.phase == "closed" and state.status.startswith("stopped")
    nid, last = grid.sent[-1]
    content = E.request_content(E.FRAME, E.read_request(last.content).run, state.seq + 1, _round(1, 8))
    from flwr.app import Message

    reply = grid.deliver(Message(content, dst_node_id=nid, message_type=E.MESSAGE_TYPE))
    (raw,) = E.read_reply(reply.content)
    frame = F.decode(raw)
    assert frame.kind == F.ABORT and frame.body["refused"] is True and "after this site's run ended" in frame.body["reason"]


def test_rounds_beyond_the_plan_are_refused(site_csvs, tmp_path):
    answered = []

    def attack(fleet, plan, grid):
        for r in range(1, 16):
            fleet.exchange(_round(r, plan.d))
            answered.append(r)

    raised, recs, grid = _malicious(site_csvs[0], tmp_path, attack)
    assert answered == [1, 2, 3, 4, 5]
    assert isinstance(raised, SiteRefusedError) and "beyond the plan's 5 rounds" in str(raised)
    refusals = [r for r in recs if r["event"] == "refused"]
    assert len(refusals) == 1 and refusals[0]["round"] == 6
    assert not any(r["event"] == "sent" and r.get("round") == 6 and r["frame"] == "DATA" for r in recs)
    rho, spent = _spend(recs)
    assert 0 < spent <= rho * (1 + 1e-9)
    assert recs[-1]["event"] == "end" and recs[-1]["status"].startswith("stopped")
    _later_messages_refused(grid, tmp_path)


def test_a_replayed_round_is_refused(site_csvs, tmp_path):
    def attack(fleet, plan, grid):
        for r in (1, 2, 3, 4, 2):
            fleet.exchange(_round(r, plan.d))

    raised, recs, grid = _malicious(site_csvs[0], tmp_path, attack)
    assert isinstance(raised, SiteRefusedError) and "numbered 2 after round 4" in str(raised)
    rho, spent = _spend(recs)
    assert spent <= rho * (1 + 1e-9)
    _later_messages_refused(grid, tmp_path)


def test_a_replayed_flower_message_is_refused(site_csvs, tmp_path):
    """The same Flower message delivered again (a replay by the ServerApp, the SuperLink or a
    network): its number is not the next one, the site refuses and closes its run."""
    from flwr.app import Message

    got = {}

    def attack(fleet, plan, grid):
        for r in (1, 2, 3):
            fleet.exchange(_round(r, plan.d))
        nid, old = grid.sent[-2]  # round 2's message, delivered again as it was
        again = Message(old.content, dst_node_id=nid, message_type=E.MESSAGE_TYPE)
        got["reply"] = grid.deliver(again)
        fleet.exchange(_round(4, plan.d))

    raised, recs, _grid = _malicious(site_csvs[0], tmp_path, attack)
    (raw,) = E.read_reply(got["reply"].content)
    frame = F.decode(raw)
    assert frame.kind == F.ABORT and frame.body["refused"] is True and "replayed or repeated" in frame.body["reason"]
    # the honest round 4 then finds the site's run closed
    assert isinstance(raised, SiteRefusedError) and "after this site's run ended" in str(raised)
    assert [r["round"] for r in recs if r["event"] == "sent" and r["frame"] == "DATA"] == [1, 2, 3]
    rho, spent = _spend(recs)
    assert spent <= rho * (1 + 1e-9)


def test_a_second_plan_is_refused(site_csvs, tmp_path):
    from dataclasses import replace

    def attack(fleet, plan, grid):
        fleet.exchange(_round(1, plan.d))
        wider = replace(plan, rounds=50)
        for s in fleet.sites:
            s.send(F.control(F.PLAN, {"plan": wider.to_dict(), "index": 0, "secure_sum": None}))
        fleet.exchange(_round(2, plan.d))

    raised, recs, _grid = _malicious(site_csvs[0], tmp_path, attack)
    assert "second plan" in str(raised)
    assert any(r["event"] == "refused" and "second plan" in r["reason"] for r in recs)


def test_the_crafted_basis_is_refused(site_csvs, tmp_path):
    """fed-suffstats --dp: the issue's crafted basis (L₁₁ = 4 / float64-max, L₂₁ = L₃₁ = L₃₂ = 1) is
    refused before the rows are touched, as under ``bnsl join``."""
    from bnsl_cli.federated.methods.suffstats import CENTRE_BINS, pair_bins, value_bins
    from bnsl_cli.federated.methods.suffstats.messages import (
        CENTRE_ROUND,
        BasisBroadcast,
        CentreRequest,
        FirstRequest,
    )
    from tests.privacy.test_adversarial_messages import crafted_basis

    def attack(fleet, plan, grid):
        d = plan.d
        fleet.exchange(FirstRequest(0, d, d * (value_bins() + pair_bins())).encode())
        fleet.exchange(CentreRequest(CENTRE_ROUND, d, d * CENTRE_BINS, np.zeros(d), np.ones(d)).encode())
        centre, scale, L = crafted_basis(d)
        fleet.exchange(BasisBroadcast(1, d, centre, scale, L).encode())

    cfg = LearnConfig(method="fed-suffstats", dp=DPConfig(epsilon=5.0, noise="per-site"))
    raised, recs, grid = _malicious(site_csvs[0], tmp_path, attack, cfg)
    assert isinstance(raised, SiteRefusedError) and "whitening" in str(raised), raised
    refusal = [r for r in recs if r["event"] == "refused"]
    assert len(refusal) == 1 and refusal[0]["round"] == 1
    rho, spent = _spend(recs)
    assert spent <= rho * (1 + 1e-9)
    _later_messages_refused(grid, tmp_path)


# -- the site's limits are its node configuration's ----------------------------------------------


@pytest.mark.parametrize("limit, needle", [
    ({"max_epsilon": 3.0}, "more than this site's --max-epsilon 3"),
    ({"max_delta": 1e-7}, "exceeds this site's --max-delta"),
    ({"methods": "fed-sparse"}, "not among --methods fed-sparse"),
])
@pytest.mark.filterwarnings("ignore:the noise was drawn from --seed")
def test_node_config_limits_refuse_whatever_the_run_config_says(site_csvs, tmp_path, limit, needle):
    nodes = node_configs(site_csvs, tmp_path, **limit)
    generous = {"options": "--dp --epsilon 5", "max-epsilon": 100.0, "max-delta": 1.0, "methods": "fed-suffstats",
                "accept-split-noise": True, "csv": "/nonexistent.csv"}
    from bnsl_cli.net.flower.server import coordinate

    grid = LoopbackGrid(nodes, run_config=generous)
    with pytest.raises(SiteRefusedError, match=needle):
        coordinate(grid, {"options": "--dp --epsilon 5 --seed 1", "participants": 3, "timeout": 30.0})
    plan_recs = [r for r in records(tmp_path / "site1.transcript.jsonl") if r["event"] == "plan"]
    assert plan_recs and plan_recs[-1]["decision"].startswith("refused")


def test_the_split_noise_consent_is_checked_before_any_plan_is_sent(site_csvs, tmp_path):
    """The coordinator session is bnsl serve's: a node whose configuration does not accept split noise
    is named from its HELLO, and no site is sent the plan (the check once ran only on the gRPC path)."""
    from bnsl_cli.errors import RefusedError

    nodes = node_configs(site_csvs, tmp_path)
    nodes[NODES[1]]["accept-split-noise"] = False
    result, grid, out = flower_run(site_csvs, tmp_path, "--dp --epsilon 5 --seed 1", nodes=nodes)
    assert isinstance(result, RefusedError) and "site 2" in str(result) and "did not accept distributed noise" in str(result)
    for _, msg in grid.sent:
        req = E.read_request(msg.content)
        assert req.frame is None or F.decode(req.frame).kind != F.PLAN
    assert not (out / "report.json").exists()


def test_a_node_without_site_configuration_fails_the_run_naming_it(site_csvs, tmp_path):
    nodes = node_configs(site_csvs, tmp_path)
    del nodes[NODES[1]]["csv"]
    result, _, out = flower_run(site_csvs, tmp_path, "-m fed-moments", nodes=nodes)
    # the coordinator learns that the node's configuration is invalid, not what it holds (a path, a value)
    assert isinstance(result, FederationError) and "configuration is invalid" in str(result)
    assert f"node {NODES[1]}" in str(result)
    assert not (out / "report.json").exists()


SECRET = "SECRET-4711"


@pytest.mark.parametrize("options", ["--dp --epsilon 5 --seed 1", "-m fed-moments"])
def test_a_secret_cell_never_reaches_the_coordinator(site_csvs, tmp_path, options, caplog):
    """Site 2's CSV holds a cell that is not a number. The ClientApp answers with a fixed, data-free
    ABORT: neither the cell, its row, nor the site's file path reaches the coordinator (the error it
    raises, any reply, the run folder); the site's own transcript keeps the details."""
    import logging

    bad = tmp_path / "site2-secret.csv"
    lines = site_csvs[1].read_text().splitlines()
    cells = lines[7].split(",")
    cells[3] = SECRET
    lines[7] = ",".join(cells)
    bad.write_text("\n".join(lines) + "\n")
    csvs = [site_csvs[0], bad, site_csvs[2]]
    with caplog.at_level(logging.INFO):
        result, grid, out = flower_run(csvs, tmp_path, options)
    assert isinstance(result, FederationError), result
    assert "cannot use its data" in str(result)
    seen = [str(result), caplog.text]
    for _, msg in grid.sent:
        seen.append(repr(msg.content))
    for reply in grid.replies:
        seen.append(repr(reply.content) if reply.has_content() else repr(reply.error.reason))
    if out.exists():
        seen += [f.read_text(errors="replace") for f in out.rglob("*") if f.is_file()]
    text = "\n".join(seen)
    for needle in (SECRET, str(bad), bad.name, str(tmp_path)):
        assert needle not in text, needle
    # the details stay at the site
    recs = records(tmp_path / "site2.transcript.jsonl")
    assert any(r["event"] == "error" and SECRET in r["detail"] for r in recs)


# -- no restart, lost reply or replay resets the ledger -----------------------------------------


@pytest.mark.filterwarnings("ignore:the noise was drawn from --seed")
def test_a_clientapp_that_dies_before_its_state_is_written_is_answered_again_the_same(site_csvs, tmp_path,
                                                                                       monkeypatch):
    """Site 2's ClientApp process dies while answering its 6th message, before its state was written
    (the reply never left). The message is delivered again to a fresh ClientApp: it answers from the
    state it had, with the same bytes (its noise source is part of the state), and the run completes
    with ``bnsl learn``'s outputs."""
    import bnsl_cli.net.flower.state as state_mod

    real_save = state_mod.RunStore.save
    died = {}

    class Retrying(LoopbackGrid):
        def deliver(self, msg):
            nid = int(msg.metadata.dst_node_id)
            if nid == NODES[1] and E.read_request(msg.content).seq == 6 and not died:
                def crash(store, state):
                    died["at"] = state.seq
                    raise SystemExit("killed")  # the process ends: no state written, no reply

                monkeypatch.setattr(state_mod.RunStore, "save", crash)
                with pytest.raises(SystemExit):
                    self.client_app(msg, self._context(nid))
                monkeypatch.setattr(state_mod.RunStore, "save", real_save)
            return super().deliver(msg)

    opts = "--dp --epsilon 8 --seed 3 --noise per-site"
    from bnsl_cli.net.flower.server import coordinate

    grid = Retrying(node_configs(site_csvs, tmp_path))
    out = tmp_path / "flower-out"
    coordinate(grid, {"options": opts, "participants": 3, "out": str(out)})
    assert died == {"at": 6}
    learned = learn_cli(site_csvs, tmp_path / "learned", opts)
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (learned / name).read_bytes(), name


@pytest.mark.filterwarnings("ignore:the noise was drawn from --seed")
def test_a_reply_lost_after_the_state_was_written_is_never_answered_again(site_csvs, tmp_path):
    """Site 1 answered its 5th message and wrote its state, but the reply was lost (the ClientApp or
    the network died after the write). The run stops naming the site; the same message sent again
    is refused as a replay, a new HELLO for the run is refused, and the state still holds every
    release made (nothing was reset)."""
    from flwr.app import Message

    lost = {}

    def drop_reply(grid):
        real = grid.deliver

        def deliver(msg):
            reply = real(msg)
            nid = int(msg.metadata.dst_node_id)
            if nid == NODES[0] and E.read_request(msg.content).seq == 5 and not lost:
                lost["msg"] = msg
                return None
            return reply

        grid.deliver = deliver

    grid = LoopbackGrid(node_configs(site_csvs, tmp_path))
    drop_reply(grid)
    from bnsl_cli.net.flower.server import coordinate

    with pytest.raises(FederationError, match="sent no reply"):
        coordinate(grid, {"options": "--dp --epsilon 8 --seed 3 --noise per-site", "participants": 3, "timeout": 5.0})
    store = RunStore(tmp_path / "state-1", grid.run_id)
    before = store.load()
    spent_before = before.guard.spent()
    # message 5 was answered (its releases are in the state), then the coordinator's ABORT (6) closed the run
    assert before.seq == 6 and before.phase == "closed" and "coordinator stopped" in before.status
    assert spent_before[1] > 0
    msg = lost["msg"]
    again = grid.deliver(Message(msg.content, dst_node_id=NODES[0], message_type=E.MESSAGE_TYPE))
    frame = F.decode(E.read_reply(again.content)[0])
    assert frame.kind == F.ABORT and frame.body["refused"] is True
    hello = Message(E.request_content(E.HELLO, "another-tag", 1), dst_node_id=NODES[0], message_type=E.MESSAGE_TYPE)
    frame = F.decode(E.read_reply(grid.deliver(hello).content)[0])
    assert frame.kind == F.ABORT and "second HELLO" in frame.body["reason"]
    after = store.load()
    assert after.guard.spent() == spent_before and after.phase == "closed"


# -- noise that no restored state can reuse --------------------------------------------------------


def test_a_restored_state_never_answers_another_message_with_the_same_noise(site_csvs, tmp_path):
    """Site 1's state file is copied before it answers the centre-histogram request (A) and put back
    after the run. From that restored state, a request that differs from A only by a shift of the bin
    edges far below any value's resolution (B: the same counts) must get independent noise: before,
    B − A was exactly 0 (the same noise source), so the difference of two replies was noise-free. The
    same request A again gets the same bytes (a retry after a crash releases nothing new)."""
    from flwr.app import Message

    from bnsl_cli.federated.messages import HEADER, read_header
    from bnsl_cli.federated.methods.suffstats.messages import CentreRequest

    grid = LoopbackGrid(node_configs(site_csvs, tmp_path))
    real = grid.deliver
    seen = {}
    state_file = None

    def deliver(msg):
        nonlocal state_file
        nid = int(msg.metadata.dst_node_id)
        req = E.read_request(msg.content)
        if nid == NODES[0] and req.frame is not None and "msg" not in seen:
            frame = F.decode(req.frame)
            if frame.kind == F.DATA and read_header(frame.body).kind == CentreRequest.kind:
                state_file = RunStore(tmp_path / "state-1", grid.run_id)
                files = sorted((tmp_path / "state-1").glob("*.state"))
                seen["snapshot"] = {f: f.read_bytes() for f in files}
                seen["msg"], seen["req"], seen["body"] = msg, req, frame.body
                reply = real(msg)
                seen["A"] = reply
                return reply
        return real(msg)

    grid.deliver = deliver
    from bnsl_cli.net.flower.server import coordinate

    coordinate(grid, {"options": "--dp --epsilon 5 --noise per-site", "participants": 3, "timeout": 60.0})
    assert "A" in seen and state_file is not None

    def restore():
        for f, raw in seen["snapshot"].items():
            f.write_bytes(raw)

    def values(reply) -> np.ndarray:
        (raw,) = E.read_reply(reply.content)
        frame = F.decode(raw)
        assert frame.kind == F.DATA, frame
        return np.frombuffer(frame.body, "<f8", offset=HEADER.size)

    req = CentreRequest.decode(seen["body"])
    shifted = CentreRequest(req.round, req.d, req.count, req.lo + 1e-9 * req.width, req.width).encode()
    restore()
    content = E.request_content(E.FRAME, seen["req"].run, seen["req"].seq, F.data(shifted))
    b = real(Message(content, dst_node_id=NODES[0], message_type=E.MESSAGE_TYPE))
    a = values(seen["A"])
    diff = values(b) - a
    # independent noise (a share of the counts over n: its std is about 0.02 here), not a difference of
    # 1e-14 (the same noise, the counts unchanged by the shift) as before
    assert np.std(diff) > 1e-4, np.std(diff)
    restore()
    again = real(Message(seen["msg"].content, dst_node_id=NODES[0], message_type=E.MESSAGE_TYPE))
    assert np.array_equal(values(again), a)  # the same request: the same bytes
