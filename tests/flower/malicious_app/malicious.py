"""A malicious ServerApp (tests/flower/test_run_local.py): it runs on a real SuperLink against the
real ClientApp on four SuperNodes and attacks each site differently after an honest start; what
each site answered is written to ``OUT/outcome.json``.

- site 1: fed-sparse --dp, 2 rounds planned; rounds 1, 2, then a 3rd (beyond the plan);
- site 2: the same plan; rounds 1, 2, then round 1 again (a replayed round, a fresh Flower message);
- site 3: the same plan; rounds 1, 2, then round 2's Flower message again, as it was (a replay);
- site 4: fed-suffstats --dp --noise per-site; the first and centre requests, then the crafted
  basis of the message-privacy issue (L₁₁ = 4 / float64-max, L₂₁ = L₃₁ = L₃₂ = 1).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from flwr.app import Context, Message
from flwr.serverapp import Grid, ServerApp

server_app = ServerApp()


def _rho2(r):
    from bnsl_cli.plan.options import LearnConfig

    c = LearnConfig()
    v = float(c.rho2)
    for _ in range(r - 1):
        v = min(v * float(c.rho2_growth), float(c.rho_max))
    return v


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    from bnsl_cli.federated.messages import ConsensusBroadcast
    from bnsl_cli.federated.methods.suffstats import CENTRE_BINS, pair_bins, value_bins
    from bnsl_cli.federated.methods.suffstats.messages import (
        CENTRE_ROUND,
        BasisBroadcast,
        CentreRequest,
        FirstRequest,
    )
    from bnsl_cli.net import frames as F
    from bnsl_cli.net.flower import envelope as E
    from bnsl_cli.net.flower.fleet import FlowerFleet
    from bnsl_cli.plan.options import DPConfig, LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import ParticipantShape, Shapes

    out = Path(str(context.run_config["out"]))
    out.mkdir(parents=True, exist_ok=True)
    fleet = FlowerFleet(grid, int(context.run_config["participants"]), timeout=120.0)
    hellos = fleet.gather(120)
    shapes = Shapes(tuple(hellos[0]["columns"]), tuple(ParticipantShape(h["site"], h["rows"]) for h in hellos))
    sparse = RunPlan.resolve(LearnConfig(method="fed-sparse", rounds=2, steps=20,
                                         dp=DPConfig(epsilon=5.0, value_bound=10.0)), shapes)
    suff = RunPlan.resolve(LearnConfig(method="fed-suffstats", dp=DPConfig(epsilon=5.0, noise="per-site")), shapes)
    plans = [sparse, sparse, sparse, suff]
    fleet.start(lambda i: {"plan": plans[i].to_dict(), "index": i, "secure_sum": None})
    d = sparse.d
    sites = fleet.sites
    seen = {s.name: [] for s in sites}

    def ask(pairs):
        """Send each (site, raw frame), one batch; record what each answered."""
        for site, raw in pairs:
            site.send(raw)
        fleet.flush(time.monotonic() + 120)
        for site, _ in pairs:
            got = site.inbox.get_nowait()
            seen[site.name].append([got.name, got.body if got.kind == F.ABORT else None]
                                   if isinstance(got, F.Frame) else ["lost", str(got)])

    rnd = lambda r: F.data(ConsensusBroadcast(r, d, np.zeros((d, d)), _rho2(r)).encode())
    first = F.data(FirstRequest(0, d, d * (value_bins() + pair_bins())).encode())
    centre = F.data(CentreRequest(CENTRE_ROUND, d, d * CENTRE_BINS, np.zeros(d), np.ones(d)).encode())
    ask([(sites[0], rnd(1)), (sites[1], rnd(1)), (sites[2], rnd(1)), (sites[3], first)])
    ask([(sites[0], rnd(2)), (sites[1], rnd(2)), (sites[2], rnd(2)), (sites[3], centre)])
    L = np.eye(d)
    L[0, 0] = 4.0 / float(np.finfo(np.float64).max)
    L[1, 0] = L[2, 0] = L[2, 1] = 1.0
    basis = F.data(BasisBroadcast(1, d, np.zeros(d), np.ones(d), L).encode())
    ask([(sites[0], rnd(3)), (sites[1], rnd(1)), (sites[3], basis)])
    # site 3: round 2's Flower message again, exactly (its number is the last one used)
    again = Message(E.request_content(E.FRAME, fleet.run_tag, sites[2].seq, rnd(2)),
                    dst_node_id=int(sites[2].node_id), message_type=E.MESSAGE_TYPE)
    for reply in fleet.round_trip([again], 120):
        seen[sites[2].name].append([F.decode(r).name for r in E.read_reply(reply.content)]
                                   + [F.decode(r).body for r in E.read_reply(reply.content)])
    (out / "outcome.json").write_text(json.dumps(seen, indent=1, default=str))
    fleet.close(ok=False)
