"""A site's side of a Flower run: the ClientApp's answer to one message.

The site's limits and its data come from the SuperNode's own node configuration
(``flower-supernode --node-config "..."``, Flower's ``context.node_config``), never from the run
configuration the ServerApp sends: :meth:`SiteConfig.from_node_config`. Its keys are ``bnsl join``'s
options (``csv``, ``site-id``, ``max-epsilon``, ``max-delta``, ``allow-non-private``, ``max-rounds``,
``methods``, ``releases``, ``accept-seeded-noise``, ``accept-split-noise``, ``refuse-standardize``,
``require-secure-sum``, ``max-total-epsilon``, ``max-sessions``, ``sep``, ``transcript``) and ``state-dir`` (:mod:`.state`;
it holds the site's budget ledger across runs, ``budget.jsonl``).

Each message is answered exactly as ``bnsl join`` answers the same frame on its stream
(:mod:`bnsl_cli.net.site`): the plan is checked by :class:`~bnsl_cli.net.policy.SiteGuard`
(``check_plan``) and answered through the participant behind its
:class:`~bnsl_cli.net.policy.SpendGuard`; summable replies are masked with bnsl's secure sum when the
plan asks for it; every frame sent and every release made is appended to the site's transcript
(:class:`~bnsl_cli.net.transcript.Transcript`) before the reply leaves; a refusal answers ABORT
(``refused``) and closes the run for this site. The state between messages is :mod:`.state`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bnsl_cli.errors import (
    BnslError,
    FederationError,
    GuardRefusedError,
    OptionError,
    RefusedError,
    public_reason,
)
from bnsl_cli.federated.messages import HEADER, is_stop, summable_span
from bnsl_cli.net import frames as F
from bnsl_cli.net.flower import envelope as E
from bnsl_cli.net.flower.state import RunStore, SiteState, key_noise
from bnsl_cli.net.policy import SiteGuard, SiteLimits, plan_record
from bnsl_cli.net.site import (
    _events,
    _is_private,
    _masked,
    _record_refusal,
    _secure_sum,
    wire_summary,
)
from bnsl_cli.net.transcript import Transcript

__all__ = ["FLOWER_KEYS", "NODE_CONFIG_KEYS", "SiteConfig", "answer"]

#: node-configuration keys and their types (as ``bnsl join``'s options)
NODE_CONFIG_KEYS = {
    "csv": str, "site-id": str, "state-dir": str, "transcript": str, "sep": str,
    "max-epsilon": float, "max-delta": float, "allow-non-private": bool, "max-rounds": int,
    "methods": str, "releases": str, "accept-seeded-noise": bool, "accept-split-noise": bool,
    "refuse-standardize": bool, "require-secure-sum": bool, "max-total-epsilon": float, "max-sessions": int,
    "categorical": str, "max-levels": int, "allow-tables": bool,
}


#: node-configuration keys that Flower's own examples and simulation set (ignored here)
FLOWER_KEYS = frozenset({"partition-id", "num-partitions"})


def _typed(key: str, value):
    want = NODE_CONFIG_KEYS[key]
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if want is bool and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, want) or (want is not bool and isinstance(value, bool)):
        raise OptionError(f"node config {key} = {value!r}: expected a {want.__name__}")
    return value


@dataclass(frozen=True)
class SiteConfig:
    """One SuperNode's site: its CSV, name, limits, state directory and transcript."""

    csv: Path
    name: str
    limits: SiteLimits
    state_dir: Path
    transcript: Path
    sep: str | None = None
    #: declared categorical columns (``categorical = "a,b"``; columns of text are categorical anyway)
    categorical: tuple = ()
    max_levels: int = 20

    @classmethod
    def from_node_config(cls, node_config) -> SiteConfig:
        """From the SuperNode's ``node_config``. A key that is neither a site key
        (:data:`NODE_CONFIG_KEYS`) nor one of Flower's conventional ones (:data:`FLOWER_KEYS`) is
        refused: a misspelt limit (``method`` for ``methods``) must not silently lift it."""
        cfg = {}
        for key, value in dict(node_config or {}).items():
            if key in NODE_CONFIG_KEYS:
                cfg[key] = _typed(key, value)
            elif key not in FLOWER_KEYS:
                raise OptionError(f"node config: unknown key {key!r} (a site's keys: {', '.join(NODE_CONFIG_KEYS)})")
        if not cfg.get("csv"):
            raise OptionError("node config: csv = '/path/to/this-site.csv' is required (flower-supernode --node-config)")
        if cfg.get("max-epsilon") is None and not cfg.get("allow-non-private"):
            raise OptionError(
                "node config: say what this site accepts: max-epsilon = E (private runs up to ε = E) and/or "
                "allow-non-private = true"
            )
        csv = Path(cfg["csv"]).expanduser()

        def names(key):
            v = cfg.get(key)
            return None if v is None else [x.strip() for x in v.split(",") if x.strip()]

        limits = SiteLimits(
            max_epsilon=cfg.get("max-epsilon"), max_delta=cfg.get("max-delta"),
            allow_non_private=bool(cfg.get("allow-non-private", False)), max_rounds=cfg.get("max-rounds"),
            methods=names("methods"), releases=names("releases"),
            accept_seeded_noise=bool(cfg.get("accept-seeded-noise", False)),
            accept_split_noise=bool(cfg.get("accept-split-noise", False)),
            refuse_standardize=bool(cfg.get("refuse-standardize", False)),
            require_secure_sum=bool(cfg.get("require-secure-sum", False)),
            allow_tables=bool(cfg.get("allow-tables", False)),
            **({"max_levels": cfg["max-levels"]} if "max-levels" in cfg else {}),
            max_total_epsilon=cfg.get("max-total-epsilon"),
            **({"max_sessions": cfg["max-sessions"]} if "max-sessions" in cfg else {}),
        )
        state_dir = Path(cfg["state-dir"]).expanduser() if cfg.get("state-dir") else csv.with_name(csv.stem + ".bnsl-state")
        transcript = (Path(cfg["transcript"]).expanduser() if cfg.get("transcript")
                      else csv.with_name(csv.stem + ".transcript.jsonl"))
        from bnsl_cli.io.kinds import MAX_LEVELS

        max_levels = cfg.get("max-levels", MAX_LEVELS)
        if max_levels < 2:
            raise OptionError(f"node config: max-levels must be at least 2, got {max_levels}")
        return cls(csv, cfg.get("site-id") or csv.name, limits, state_dir, transcript, cfg.get("sep"),
                   tuple(names("categorical") or ()), max_levels)

    def read(self):
        """``(table, variables, levels)``: this site's rows, its variables in the file's order, and its levels
        of each categorical column (``{}`` without any; as ``bnsl join`` reads them)."""
        from bnsl_cli.io.csv_reader import file_separator, read_table
        from bnsl_cli.io.kinds import site_table, text_columns_of
        from bnsl_cli.io.table import ReadOptions

        header, text = text_columns_of([self.csv], lambda p: self.sep or file_separator(p, ReadOptions()))
        cat = list(self.categorical) + [c for c in text if c not in self.categorical]
        if cat and not self.limits.allow_non_private:
            raise OptionError(
                f"{self.csv.name}: column {cat[0]!r} is categorical: networked runs learn categorical columns without "
                "--dp only (this site's levels go to the coordinator in its HELLO); set allow-non-private = true")
        table = read_table(self.csv, sep=self.sep, min_columns=max(2 - len(cat), 0), check_constant=False,
                           keep=tuple(cat))
        if not cat:
            return table, tuple(table.names), {}
        return site_table(table, cat, self.max_levels, order=header)


# ---- the transcript across processes ----------------------------------------------------------


def _open_transcript(cfg: SiteConfig, state: SiteState | None) -> Transcript:
    tr = Transcript(cfg.transcript)
    if state is not None and state.transcript:
        tr.bytes_sent = state.transcript["bytes_sent"]
        tr.rho_total = state.transcript["rho_total"]
        tr._seen = dict(state.transcript["seen"])
    return tr


def _keep_transcript(tr: Transcript, state: SiteState) -> None:
    state.transcript = {"bytes_sent": tr.bytes_sent, "rho_total": tr.rho_total, "seen": dict(tr._seen)}


class _Out:
    """The frames of one reply, each recorded in the transcript as sent."""

    def __init__(self, tr: Transcript):
        self.tr, self.frames = tr, []

    def control(self, kind: int, body: dict) -> None:
        raw = F.control(kind, body)
        self.tr.sent(F.KIND_NAMES[kind], raw, body=body)
        self.frames.append(raw)

    def data(self, name: str, raw: bytes, payload: bytes | None) -> None:
        self.tr.sent(name, raw, payload)
        self.frames.append(raw)


def _close(state: SiteState, tr: Transcript, status: str) -> None:
    state.phase, state.status = "closed", status
    _keep_transcript(tr, state)
    tr.close(status)


def _stop(state: SiteState, tr: Transcript, out: _Out, exc: BaseException, refused: bool) -> None:
    """Tell the coordinator why this site stops (``refused``: beyond its limits or plan) and close."""
    body = {"reason": public_reason(exc)}  # nothing about this site's data leaves with it
    if refused:
        body["refused"] = True
    out.control(F.ABORT, body)
    _close(state, tr, f"stopped: {exc}")


# ---- one message ------------------------------------------------------------------------------


def answer(content, run_id: int, node_config) -> list:
    """The frames a site answers to one request (a Flower message's ``content``) of Flower run
    ``run_id``, the site being ``node_config``'s. Never raises: an error of any kind (the node
    configuration, the CSV, a message that is not a bnsl request, a bug) is answered by an ABORT with
    a fixed, data-free reason (:func:`~bnsl_cli.errors.public_reason`) and ends this site's run; the
    details go to the site's own transcript (or, before its configuration is known, its own log).
    Flower would otherwise put the exception's text — a cell, a path — into its error reply."""
    cfg = None
    try:
        cfg = SiteConfig.from_node_config(node_config)
        return _answer(cfg, content, run_id)
    except Exception as exc:  # noqa: BLE001 - every error becomes a data-free ABORT
        _keep_locally(cfg, run_id, exc)
        return [F.control(F.ABORT, {"reason": public_reason(exc)})]


def _keep_locally(cfg, run_id: int, exc: BaseException) -> None:
    """The error's full text where only the site reads it: its transcript, and its run closed in its
    state (a later message is refused), else its own log."""
    import logging

    text = F.printable(f"{type(exc).__name__}: {exc}", 2000)
    try:
        if cfg is None:
            raise RuntimeError("no site configuration")
        tr = Transcript(cfg.transcript)
        try:
            tr.write({"event": "error", "run": int(run_id), "detail": text})
        finally:
            tr._fh.close()
        store = RunStore(cfg.state_dir, run_id)
        with store.locked():
            state = store.load()
            if state is not None and state.phase != "closed":
                state.phase, state.status = "closed", f"stopped: {text}"
                store.save(state)
    except Exception:  # noqa: BLE001 - nowhere to write: the SuperNode's own log
        logging.getLogger("bnsl.site").error("bnsl site, Flower run %s: %s", run_id, text)


def _answer(cfg: SiteConfig, content, run_id: int) -> list:
    req = E.read_request(content)
    store = RunStore(cfg.state_dir, run_id)
    with store.locked():
        state = store.load()
        if req.op == E.HELLO:
            if state is not None:  # a run has one HELLO: its state exists from then on
                return [_refusal_frame(f"a second HELLO request for Flower run {run_id} (this site "
                                       f"already answered one; a restarted coordinator is a new run)")]
            if req.seq != 1:
                return [_refusal_frame(f"a HELLO request numbered {req.seq}, not 1")]
            state, frames = _hello(cfg, run_id, req.run)
            store.save(state)
            return frames
        if state is None:
            return [_refusal_frame(f"a message for Flower run {run_id} before its HELLO")]
        tr = _open_transcript(cfg, state)
        try:
            out = _Out(tr)
            why = None
            if state.phase == "closed":
                why = f"a message after this site's run ended ({state.status or 'closed'})"
            elif req.run != state.run_tag:
                why = "a message of another run (its run tag is not this run's)"
            elif req.seq != state.seq + 1:
                what = "replayed or repeated" if req.seq <= state.seq else "out of order (a message was skipped)"
                why = f"message number {req.seq} where {state.seq + 1} was due: {what}"
            if why is not None:
                exc = GuardRefusedError(f"refused a message beyond the accepted run: {why}")
                if state.phase != "closed":
                    _record_refusal(tr, exc, None)
                    _stop(state, tr, out, exc, refused=True)
                    store.save(state)
                else:
                    out.frames.append(_refusal_frame(str(exc)))
                return out.frames
            state.seq = req.seq
            _step(cfg, state, tr, out, req.frame)
            if state.phase != "closed":
                _keep_transcript(tr, state)
            store.save(state)  # before the reply leaves
            return out.frames
        finally:
            tr._fh.close()


def _refusal_frame(reason: str) -> bytes:
    return F.control(F.ABORT, {"reason": reason, "refused": True})


def _hello(cfg: SiteConfig, run_id: int, run_tag: str):
    """A new run: read the CSV, make this run's X25519 key, record the run and send the HELLO."""
    from cryptography.hazmat.primitives import serialization

    from bnsl_cli.federated.secure_sum import generate_keypair

    table, variables, levels = cfg.read()
    sk, pk = generate_keypair()
    raw_sk = sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                              serialization.NoEncryption())
    hello = {"site": cfg.name, "columns": list(variables), "rows": table.n, "limits": cfg.limits.to_dict(),
             "x25519": pk.hex(), **({"levels": levels} if levels else {})}
    state = SiteState(run_id=int(run_id), run_tag=run_tag, name=cfg.name, seq=1, hello=hello, secure_key=raw_sk)
    tr = _open_transcript(cfg, None)
    try:
        tr.write({"event": "run", "site": cfg.name, "coordinator": f"Flower run {run_id}", "csv": str(cfg.csv),
                  "rows": table.n, "columns": list(variables), "limits": cfg.limits.to_dict(),
                  "transport": "Flower (SuperNode ClientApp)", "identity": None, "state": str(cfg.state_dir)})
        out = _Out(tr)
        out.control(F.HELLO, hello)
        _keep_transcript(tr, state)
    finally:
        tr._fh.close()
    return state, out.frames


def _secure_key(state: SiteState):
    if state.secure_key is None:
        return None
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    return X25519PrivateKey.from_private_bytes(state.secure_key)


def _step(cfg: SiteConfig, state: SiteState, tr: Transcript, out: _Out, raw: bytes) -> None:
    """Answer one frame as ``bnsl join`` does on its stream (:func:`bnsl_cli.net.site.run_site`)."""
    try:
        frame = F.decode(raw)
    except F.FrameError as exc:
        _stop(state, tr, out, FederationError(f"the coordinator sent malformed bytes ({exc})"), refused=False)
        return
    if frame.kind == F.ABORT:
        reason = F.printable(frame.body.get("reason", "no reason given"))
        _close(state, tr, f"stopped: the coordinator stopped the run: {reason}")
        return
    if state.phase == "hello":
        if frame.kind != F.PLAN:
            _stop(state, tr, out, FederationError(f"the coordinator sent {frame.name} before the plan (out of order)"),
                  refused=False)
            return
        _plan(cfg, state, tr, out, frame.body)
        return
    if frame.kind == F.PLAN:  # one plan per run: a second could widen what the site spends
        exc = GuardRefusedError("the coordinator sent a second plan; a site accepts one plan per run")
        _record_refusal(tr, exc, None)
        _stop(state, tr, out, exc, refused=True)
        return
    if state.summary is not None:
        if frame.kind == F.DONE:
            _close(state, tr, "ok")
            return
        _stop(state, tr, out, FederationError(f"the coordinator sent {frame.name} after the run (out of order)"),
              refused=False)
        return
    if frame.kind == F.FINISH:  # the exchanges are over without a stop broadcast (fed-moments)
        _report(state, out)
        return
    if frame.kind != F.DATA:
        _stop(state, tr, out, FederationError(f"the coordinator sent {frame.name} during the rounds (out of order)"),
              refused=False)
        return
    guard = state.guard
    if state.noise_key is not None:  # noise that no restored state can reuse for another message
        key_noise(guard.noise, state.noise_key, state.seq, frame.body)
    try:
        reply = guard.handle(frame.body)
    except RefusedError as exc:  # the site's guard: beyond the accepted plan; nothing is sent
        _record_refusal(tr, exc, frame.body)
        _stop(state, tr, out, exc, refused=True)
        return
    except (ValueError, IndexError) as exc:
        _stop(state, tr, out, FederationError(f"the coordinator sent a malformed protocol message ({exc})"),
              refused=False)
        return
    tr.releases(_events(guard))  # the releases made for this reply, recorded before it leaves
    masker = _secure_sum(state.plan_body, _secure_key(state))
    if masker is not None and summable_span(reply) is not None:
        try:
            masked = _masked(masker, reply)
        except BnslError as exc:  # out of range: tell the coordinator why, send nothing else
            _stop(state, tr, out, exc, refused=False)
            return
        out.data("MASKED", F.encode(F.Frame(F.MASKED, masked)), masked[: HEADER.size])
    else:
        out.data("DATA" if reply is not None else "EMPTY", F.data(reply), reply)
    if reply is None and is_stop(frame.body):  # the stop broadcast: report (then DONE ends the run)
        _report(state, out)


def _report(state: SiteState, out: _Out) -> None:
    body = wire_summary(state.guard.summary(), state.private)
    out.control(F.SUMMARY, body)
    state.summary = body


def _plan(cfg: SiteConfig, state: SiteState, tr: Transcript, out: _Out, body: dict) -> None:
    """The plan checked against this site's limits (``join``'s :class:`SiteGuard`), the participant
    built behind its spend guard, ACCEPT; or a refusal."""
    table, variables, levels = cfg.read()
    if ([*variables] != state.hello["columns"] or table.n != state.hello["rows"]
            or levels != state.hello.get("levels", {})):
        _stop(state, tr, out, FederationError(f"{cfg.csv} changed since this site's HELLO; the run is refused"),
              refused=True)
        return

    def accepted(acc) -> None:
        if not acc.plan.private:  # a private run must not depend on whether a column is constant
            from bnsl_cli.io.shards import check_constant_columns

            check_constant_columns(table)
        tr.write({"event": "plan", "decision": "accepted", **plan_record(acc.plan), "index": acc.index,
                  "secure_sum": acc.secure_sum, **acc.total})

    budget = None
    if cfg.limits.max_epsilon is not None:  # the site's spend over Flower runs, in its state directory
        from bnsl_cli.net.site_budget import SiteBudget

        budget = SiteBudget(cfg.state_dir / "budget.jsonl", cfg.limits.max_total_epsilon)
    site_guard = SiteGuard(table, cfg.limits, cfg.name, on_accept=accepted, budget=budget)
    try:
        guard = site_guard.on_plan(body)
        _secure_sum(body, _secure_key(state))  # a malformed secure-sum part is refused now
    except BnslError as exc:
        tr.write({"event": "plan", "decision": f"refused: {exc}", **_plan_record_safe(body)})
        _stop(state, tr, out, exc, refused=isinstance(exc, RefusedError))
        return
    events = _events(guard)
    state.guard, state.plan_body, state.phase = guard, body, "run"
    state.private = _is_private(body, events)
    if state.private and site_guard.accepted.plan.seed is None and getattr(guard, "noise", None) is not None:
        import secrets

        state.noise_key = secrets.token_bytes(32)  # each message's noise keyed to it (state.key_noise)
    tr.releases(events)  # one-off releases made while the participant was built
    out.control(F.ACCEPT, {})


def _plan_record_safe(body) -> dict:
    try:
        from bnsl_cli.plan.run_plan import RunPlan

        return plan_record(RunPlan.from_dict(body["plan"]))
    except Exception:  # noqa: BLE001 - a malformed plan: record what we got
        return {"plan_raw": str(body)[:2000]}
