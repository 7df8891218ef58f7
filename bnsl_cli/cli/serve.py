"""``bnsl serve``: the coordinator of a networked run. It waits for the sites, resolves the run plan
from their HELLOs, and runs the same rounds as ``bnsl learn`` with the sites' participants reached
over gRPC; it writes the same outputs.

The learn options are ``bnsl learn``'s own (this command's signature is built from that command's),
so both always offer the same choices. Every parameter of ``bnsl learn`` is classified below —
:data:`RUN_OPTIONS` go into the run plan, :data:`OUTPUT_OPTIONS` say what the coordinator writes,
:data:`NOT_HERE` make sense only where the rows are (they are not offered) — and a test fails when
learn gains a parameter that is in none of them.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Optional

import typer

from bnsl_cli.cli import common, dataopts
from bnsl_cli.net.layout import resolve_secure_sum  # the rule serve and the Flower app share

#: learn options that go into the LearnConfig, hence the run plan the sites check (DPConfig fields
#: under ``--dp``; ``dp`` and ``epsilon`` select it)
RUN_OPTIONS = frozenset({
    "method", "lam", "threshold", "rounds", "steps", "rho1", "rho2", "rho1_growth", "rho2_growth", "snap",
    "acyclicity", "polish", "standardize", "seed", "personal", "trace",
    "dp", "epsilon", "delta", "clip", "selection_share", "polish_share", "conversion", "accountant", "public_means",
    "value_bound", "clip_levels", "noise", "collusion_tolerance",
    "require", "forbid", "knowledge_file", "require_file", "forbid_file",
    "bootstrap", "min_strength",
})
#: the prior-knowledge options (read into one KnowledgeSource, part of the plan)
KNOWLEDGE_OPTIONS = ("require", "forbid", "knowledge_file", "require_file", "forbid_file")
#: learn options about what the coordinator writes and prints
OUTPUT_OPTIONS = frozenset({"out", "adjacency_out", "edges_out", "formats", "json_out", "quiet", "verbose", "force"})
#: learn options that choose the columns: the coordinator puts the chosen names in the plan and every
#: site uses those columns, in the plan's order (a site's own --columns/--drop/--index-col shape its HELLO)
COLUMN_OPTIONS = frozenset({"columns", "drop"})
#: learn parameters that make sense only where the rows are: the shard arguments, the CSV
#: separator (bnsl join --sep), the worker processes that host participants (each site is one)
NOT_HERE = frozenset({"shards", "files_from", "sep", "workers", "index_col", "na", "header", "encoding", "decimal",
                      # categorical columns: each site declares its own (bnsl join --categorical); serve's own
                      # --max-levels bounds the sites' union of levels
                      "categorical", "max_levels"})
#: learn's click context: serve has its own (``ctx`` below), used the same way
CONTEXT_PARAMETERS = frozenset({"ctx"})


def _serve(
    ctx: typer.Context,
    participants: int = typer.Option(..., "--participants", "-P", help="Number of sites that must join.", rich_help_panel=dataopts.NETWORK),
    listen: str = typer.Option(
        "127.0.0.1:7443", "--listen", help="HOST:PORT to listen on (0.0.0.0:7443 for every interface; port 0 picks a free one).",
        rich_help_panel=dataopts.NETWORK,
    ),
    ca: Optional[Path] = typer.Option(None, "--ca", help="CA certificate that issued every site's certificate (PEM).", rich_help_panel=dataopts.NETWORK),
    cert: Optional[Path] = typer.Option(None, "--cert", help="The coordinator's certificate (PEM).", rich_help_panel=dataopts.NETWORK),
    key: Optional[Path] = typer.Option(None, "--key", help="The coordinator's private key (PEM).", rich_help_panel=dataopts.NETWORK),
    insecure: bool = typer.Option(False, "--insecure", help="Plaintext without authentication; loopback addresses only.", rich_help_panel=dataopts.NETWORK),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds to wait for any site's reply before stopping the run.", rich_help_panel=dataopts.NETWORK),
    join_timeout: float = typer.Option(600.0, "--join-timeout", help="Seconds to wait for all sites to join.", rich_help_panel=dataopts.NETWORK),
    secure_sum: Optional[bool] = typer.Option(
        None, "--secure-sum/--no-secure-sum", show_default=False,
        help="Secure aggregation of every summed reply (column statistics, fed-moments, fed-suffstats, fed-bnsl's B_p, "
        "the polish's second moments): the coordinator learns only their sums (pairwise X25519 masks; "
        "docs/federation.md). Default: on for a private run whose method distributes its noise (fed-suffstats, the "
        "--dp default) over two or more sites: each site then adds only a share of the noise, as in bnsl learn (the "
        "sites join with --accept-split-noise); off otherwise. --no-secure-sum: per-site noise, √P times the noise "
        "in the pooled statistics. Where bnsl learn has no secure sum (every other layout), weights then differ from "
        "bnsl learn by the fixed-point rounding carried through the solver (about 1e-10 for fed-bnsl, up to 5e-3 for "
        "fed-moments under --dp; the graphs were the same in the tests).",
        rich_help_panel=dataopts.NETWORK,
    ),
    secure_sum_bits: int = typer.Option(
        32, "--secure-sum-bits", min=8, max=48,
        help="Fixed-point fraction bits of --secure-sum: resolution 2^-BITS; each site refuses a value with "
        "|v| >= 2^(63-BITS)/P (2^31/P at 32). Lower it for columns in large raw units.",
        rich_help_panel=dataopts.NETWORK,
    ),
    split_noise: bool = typer.Option(
        False, "--split-noise",
        help="With --secure-sum and --dp (fed-moments): each site adds 1/P of the moment matrix's noise variance, "
        "the sum carries all of it (√P less noise); each site's guarantee then holds only against a party that sees "
        "the sum alone and while no site colludes (sites opt in with join --accept-split-noise; docs/privacy.md).",
        rich_help_panel=dataopts.NETWORK,
    ),
    allow_sites: Optional[str] = typer.Option(
        None, "--allow-sites",
        help="Comma-separated site certificate names allowed to join (the certificate's site:NAME URI, else its "
        "common name); others are refused. Needs mutual TLS.",
        rich_help_panel=dataopts.NETWORK,
    ),
    handshake_timeout: float = typer.Option(
        10.0, "--handshake-timeout",
        help="Seconds a new connection has to finish its TLS handshake and send its HELLO; a silent one is dropped "
        "(idle connections cannot keep the sites out).",
        rich_help_panel=dataopts.NETWORK,
    ),
    port_file: Optional[Path] = typer.Option(
        None, "--port-file", help="Write the port actually listened on to this file (useful with port 0).",
        rich_help_panel=dataopts.NETWORK,
    ),
    # learn's NOT_HERE options, hidden: given to serve, they are a usage error that says where they belong
    sep: Optional[str] = typer.Option(None, "--sep", hidden=True),
    files_from: Optional[str] = typer.Option(None, "--files-from", hidden=True),
    workers: Optional[str] = typer.Option(None, "--workers", hidden=True),
    index_col: Optional[str] = typer.Option(None, "--index-col", hidden=True),
    na: Optional[str] = typer.Option(None, "--na", hidden=True),
    header: Optional[str] = typer.Option(None, "--header", hidden=True),
    encoding: Optional[str] = typer.Option(None, "--encoding", hidden=True),
    decimal: Optional[str] = typer.Option(None, "--decimal", hidden=True),
    categorical: Optional[str] = typer.Option(None, "--categorical", hidden=True),
    max_levels: int = dataopts.max_levels_option(dataopts.NETWORK),
    **learn_options,
) -> None:
    """Coordinate a networked run: wait for the sites (bnsl join), run, write the outputs.

    Exit codes: 0 ok; 2 usage; 3 bad data (sites whose columns differ); 5 a site refused the plan;
    6 federation failure (a site disconnected, timed out or misbehaved); 130 Ctrl-C; 143 SIGTERM.
    """
    from bnsl_cli.net.common import need_grpc
    from bnsl_cli.net.tls import split_hostport

    for given, option, where in (
        (sep, "--sep", "each site's separator: bnsl join --sep"),
        (files_from, "--files-from", "each site names its own CSV: bnsl join HOST:PORT SITE.csv"),
        (workers, "--workers", "each site is one participant process"),
        *((v, o, f"each site reads its own CSV: bnsl join {o}") for v, o in (
            (index_col, "--index-col"), (na, "--na"), (header, "--header"), (encoding, "--encoding"),
            (decimal, "--decimal"))),
    ):
        if given is not None:
            raise common.fail(f"{option} belongs where the rows are, not on the coordinator ({where})", 2)
    if categorical is not None:
        raise common.fail("--categorical belongs where the rows are: each site declares its categorical columns "
                          "(bnsl join --categorical; a column of text is categorical anyway) and sends their levels "
                          "in its HELLO", 2)
    if max_levels < 2:
        raise common.fail(f"--max-levels must be at least 2, got {max_levels}", 2)
    need_grpc()
    console = common.err_console
    if participants < 1:
        raise common.fail("--participants must be at least 1", 2)
    if not timeout > 0 or not join_timeout > 0 or not handshake_timeout > 0:
        raise common.fail("--timeout, --join-timeout and --handshake-timeout must be > 0", 2)
    host, _ = split_hostport(listen, "--listen")
    from bnsl_cli.cli.netopts import credentials

    creds = credentials(ca, cert, key, insecure, host, "--listen", role="serverAuth")
    select = {k: learn_options.pop(k, None) for k in COLUMN_OPTIONS}
    dataopts.read_options(select["columns"], select["drop"])  # checked before any site joins
    allowed = None
    if allow_sites is not None:
        allowed = [a.strip() for a in allow_sites.split(",") if a.strip()]
        if not allowed:
            raise common.fail("--allow-sites: give at least one site certificate name", 2)
        if creds is None:
            raise common.fail("--allow-sites needs mutual TLS (site names come from their certificates), not --insecure", 2)
        if len(allowed) < participants:
            raise common.fail(f"--allow-sites names {len(allowed)} site(s), fewer than --participants {participants}", 2)
    cfg = run_options(learn_options, ctx)
    spec = cfg.spec
    secure_sum, layout_warning = resolve_secure_sum(cfg, spec, participants, secure_sum)
    if layout_warning is not None:
        from rich.markup import escape

        console.print(f"[bold yellow]warning:[/] {escape(layout_warning)}", soft_wrap=True)
    from bnsl_cli.net.session import SessionChoices, check_choices

    choices = SessionChoices(secure_sum=bool(secure_sum), scale_bits=secure_sum_bits, split_noise=bool(split_noise),
                             method_given=learn_options.get("method") is not None, max_levels=max_levels,
                             **(select or {}))
    check_choices(cfg, choices)  # the checks that need no site, before listening
    out: Optional[Path] = learn_options.get("out")
    quiet = bool(learn_options.get("quiet"))
    json_out = bool(learn_options.get("json_out"))
    from bnsl_cli.cli import output

    singles = output.prepare_single_outputs(
        {k: learn_options.get(v) for k, v in (("--adjacency", "adjacency_out"), ("--edges", "edges_out"))},
        [], stdout_option="--json" if json_out else None,
    )
    formats = output.check_formats(learn_options.get("formats"), out, json_out,
                                   {"--adjacency": learn_options.get("adjacency_out"), "--edges": learn_options.get("edges_out")})
    od = output.prepare_learn_dir(out, [], participants, cfg.personal, bool(learn_options.get("force")),
                                  strength=bool(cfg.bootstrap), formats=formats)

    from bnsl_cli.net.fleet import NetworkFleet
    from bnsl_cli.net.session import coordinate
    from bnsl_cli.report import NetworkRecord

    log = (lambda m: None) if quiet else (lambda m: console.print(m, highlight=False, markup=False))
    address = [listen]  # port 0: the later sessions of a --bootstrap keep the first one's port

    def open_fleet():
        fleet = NetworkFleet(address[0], participants, creds, timeout=timeout, log=log,
                             handshake_timeout=handshake_timeout, allow_sites=allowed,
                             secure_sum=secure_sum, scale_bits=secure_sum_bits)
        address[0] = f"{listen.rsplit(':', 1)[0]}:{fleet.port}"
        return fleet

    def on_listening(fleet):
        if port_file is not None:
            port_file.write_text(f"{fleet.port}\n")
        log(f"listening on {host}:{fleet.port} ({'mutual TLS' if creds else 'plaintext, loopback'}); "
            f"waiting for {participants} site(s)")

    def network_of(fleet, spec):
        return NetworkRecord(
            listen=f"{host}:{fleet.port}",
            mutual_tls=bool(creds),
            secure_sum_bits=secure_sum_bits if spec is not None else None,
            coordinator_certificate_sha256=getattr(getattr(fleet, "identity", None), "sha256", None),
            allow_sites=sorted(allowed) if allowed is not None else None,
            sites=tuple(_site_record(s) for s in fleet.sites),
        )

    def finish(result, plan):
        if formats:  # the sites' column names are known only now; nothing is written before this check
            from bnsl_cli.io.graph_export import check_names

            check_names(formats, result.names, "the sites' columns")
        if od is not None:
            output.write_learn_outputs(od, result, plan.method, formats)
        output.write_single_outputs(singles, result)

    try:
        with dataopts.convergence_warnings(bool(learn_options.get("verbose"))):
            result = coordinate(cfg, choices, open_fleet, join_timeout=join_timeout, network_of=network_of,
                                finish=finish, log=log, progress=None if quiet else _progress,
                                on_listening=on_listening)
    except BaseException:
        if od is not None:
            od.abort()
        raise
    output.print_run_summary(result, out, quiet)
    if json_out:
        common.print_json(result.report)
    elif out is None and formats:
        sys.stdout.write(output.stdout_format_text(formats, result))
    elif out is None and "-" not in singles.values():
        sys.stdout.write(output.stdout_edges_text(result, []))


def _site_record(site):
    """One site as the report's network part lists it (:class:`~bnsl_cli.report.SiteRecord`): its
    declared name, address, rows and the identity and SHA-256 fingerprint of its certificate
    (``None`` in plaintext)."""
    from bnsl_cli.report import SiteRecord

    ident = getattr(site, "identity", None)
    return SiteRecord(participant=site.index + 1, site=site.name, peer=site.peer, rows=site.hello["rows"],
                      identity=getattr(ident, "name", None), certificate_sha256=getattr(ident, "sha256", None))


def run_options(opts: dict, ctx=None):
    """A checked :class:`~bnsl_cli.plan.options.LearnConfig` from the :data:`RUN_OPTIONS` of ``bnsl
    learn`` (matched by name; ``BNSL_EPSILON``/``BNSL_DELTA`` set for private runs do not concern a
    non-private one, as in learn). The one place serve checks the options (``cfg.check()``)."""
    from dataclasses import fields

    from bnsl_cli.knowledge import KnowledgeSource
    from bnsl_cli.io.graph_text_formats import graph_arcs
    from bnsl_cli.plan.options import DPConfig, LearnConfig

    unknown = set(opts) - RUN_OPTIONS - OUTPUT_OPTIONS - COLUMN_OPTIONS
    if unknown:  # a learn option this module has not classified: never ignore it silently
        raise RuntimeError(f"bnsl serve: unclassified learn option(s) {sorted(unknown)}")
    opts = {k: v for k, v in opts.items() if k in RUN_OPTIONS}
    if ctx is not None and not opts.get("dp"):
        for name in ("epsilon", "delta"):
            if common.from_env(ctx, name):
                opts[name] = None
    from bnsl_cli.cli.learn import ENV_METHOD_OPTIONS
    from bnsl_cli.federated.methods.registry import default_method, method_spec

    if opts.get("method") is None:  # the one place a networked run's method is chosen when not given
        opts["method"] = default_method(bool(opts.get("dp")))
    takes = method_spec(opts["method"]).options
    for name, flag in ENV_METHOD_OPTIONS.items():  # from BNSL_*, not taken by the method: left out, as in learn
        if ctx is not None and flag not in takes and name in opts and common.from_env(ctx, name):
            opts.pop(name)
    dp = None
    if opts.get("dp"):
        if opts.get("epsilon") is None:
            raise common.fail("--dp needs --epsilon (e.g. --epsilon 5)", 2)
        dp = DPConfig(**{f.name: opts[f.name] for f in fields(DPConfig) if f.name in opts})
    elif opts.get("epsilon") is not None:
        raise common.fail("--epsilon given without --dp; add --dp for a private run", 2)
    kw = {f.name: opts[f.name] for f in fields(LearnConfig) if f.name in opts and f.name != "dp"}
    kw["knowledge"] = KnowledgeSource.from_options(*(opts.get(k) for k in KNOWLEDGE_OPTIONS), graph_arcs=graph_arcs)
    cfg = LearnConfig(**kw, dp=dp, workers=1)
    cfg.check()
    return cfg


def _progress(info: dict) -> None:
    r = info["round"]
    if r == 1 or r % 10 == 0:
        line = f"round {r:>3}: h(W)={info['h']:.2e}"
        if info.get("gap") is not None:
            line += f" gap={info['gap']:.2e}"
        if "edges" in info:
            line += f" edges={info['edges']}"
        common.err_console.print(line, highlight=False)


def _build():
    from bnsl_cli.cli import learn as _learn

    import typing

    hints = typing.get_type_hints(_serve)
    own = [
        p.replace(annotation=hints.get(name, p.annotation))
        for name, p in inspect.signature(_serve).parameters.items() if p.kind is not p.VAR_KEYWORD
    ]
    names = {p.name for p in own}
    learn_hints = typing.get_type_hints(_learn.command)
    extra = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=learn_hints.get(name, p.annotation))
        for name, p in inspect.signature(_learn.command).parameters.items()
        if name not in NOT_HERE | CONTEXT_PARAMETERS and name not in names
    ]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + extra

    def command(**kwargs) -> None:
        own_kw = {p.name: kwargs.pop(p.name) for p in own}
        _serve(**own_kw, **kwargs)

    command.__signature__ = inspect.Signature(params)
    command.__doc__ = _serve.__doc__
    return command


command = _build()
