"""``bnsl join``: one site of a networked run. Its CSV never leaves this machine: the site dials out
to the coordinator, checks the coordinator's plan against its own limits before it sends anything
data-dependent, answers the protocol messages with its local participant (drawing any DP noise
here) and writes a transcript of everything it sent."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bnsl_cli.cli import common, dataopts


@dataopts.with_read_options(after="sep", panel=None)
def command(
    coordinator: str = typer.Argument(..., metavar="HOST:PORT", help="The coordinator's address (bnsl serve --listen)."),
    csv: Path = typer.Argument(..., metavar="SITE.csv", help="This site's rows (header row, numeric values)."),
    max_epsilon: Optional[float] = typer.Option(
        None, "--max-epsilon", help="Accept private runs whose ε (recomputed here from the plan's release list) is at most this."
    ),
    max_delta: Optional[float] = typer.Option(
        None, "--max-delta",
        help="Accept private runs whose δ is at most this (default 1e-5, a fixed public bound: the default δ of bnsl "
        "learn/serve --dp, at most 1/n² of the smallest site, is within it whenever every site has at least "
        "317 rows).",
    ),
    allow_non_private: bool = typer.Option(
        False, "--allow-non-private", help="Also accept runs without differential privacy (exact updates leave the site)."
    ),
    max_rounds: Optional[int] = typer.Option(
        None, "--max-rounds",
        help="Refuse plans with more ADMM rounds than this (fed-sparse, fed-bnsl: one exchange per round). It counts "
        "ADMM rounds only: the column-statistics, standardisation and polish exchanges are not rounds, and "
        "fed-moments (two exchanges, whatever its --rounds, which are the coordinator's NOTEARS steps) has none.",
    ),
    methods: Optional[str] = typer.Option(
        None, "--methods", help="Comma-separated methods this site accepts (default: every federated method)."
    ),
    releases: Optional[str] = typer.Option(
        None, "--releases", help="Comma-separated DP release kinds this site accepts (default: any; see the transcript's "
        "plan record for the names).",
    ),
    accept_seeded_noise: bool = typer.Option(
        False, "--accept-seeded-noise",
        help="Accept a private plan with --seed (the coordinator could then reproduce this site's noise: tests only).",
    ),
    accept_split_noise: bool = typer.Option(
        False, "--accept-split-noise", "--accept-distributed-noise",
        help="Accept a plan that splits DP noise across the sites: distributed noise (the default of a private "
        "fed-suffstats run under serve, as in bnsl learn; serve --collusion-tolerance T) or serve --split-noise. "
        "This site then adds only a share of a release's noise and its guarantee holds against a party that sees "
        "the secure sum alone, together with at most T colluding sites (0 for --split-noise).",
    ),
    refuse_standardize: bool = typer.Option(
        False, "--refuse-standardize",
        help="Refuse plans with --standardize (every site would learn on rows scaled with the pooled means and "
        "standard deviations, which the coordinator then holds). fed-sparse and fed-bnsl send their shares of "
        "those column statistics for the scale check either way: --require-secure-sum hides them.",
    ),
    allow_tables: bool = typer.Option(
        False, "--allow-tables",
        help="With categorical columns (non-private runs): also send the sums of contingency tables of a variable "
        "with its neighbours, which the second phase of the search needs (more accurate graphs). Finer than the "
        "moments: over few columns such a table says how many rows hold each combination of levels. Without it "
        "the run learns from the moments only.",
    ),
    require_secure_sum: bool = typer.Option(
        False, "--require-secure-sum",
        help="Refuse plans without secure aggregation (serve --secure-sum): the coordinator then learns only the "
        "sums of the summable replies, never this site's own.",
    ),
    max_total_epsilon: Optional[float] = typer.Option(
        None, "--max-total-epsilon",
        help="Accept a private plan only while every private run this site accepted (its --budget-ledger) and this "
        "one, composed by the plan's accountant, spend at most this ε (default: --max-epsilon, so a second "
        "full-budget run is refused).",
    ),
    budget_ledger: Optional[Path] = typer.Option(
        None, "--budget-ledger", envvar="BNSL_BUDGET_LEDGER",
        help="This site's ledger of accepted private runs (JSON lines; default SITE.budget.jsonl next to the CSV). "
        "Keep one per data set: it is what bounds the data set's spend over runs.",
    ),
    max_sessions: Optional[int] = typer.Option(
        None, "--max-sessions",
        help="Answer at most this many sessions in one join (default 21; serve --bootstrap B asks for B + 1: B replicates on "
        "rows this site resamples, then the run). A site also refuses more sessions than its rows allow: "
        "(sessions) × d(d+3)/2 must stay below rows × d (docs/federation.md, \"Edge confidence over the network\"). "
        "Checked before the first session.",
    ),
    resample_seed: Optional[int] = typer.Option(
        None, "--resample-seed",
        help="Tests only: draw this site's bootstrap resamples from this seed (then they are those of bnsl learn "
        "--bootstrap --seed N) instead of fresh entropy that never leaves the site. Anyone who knows the seed "
        "knows the resampling weights.",
    ),
    sep: Optional[str] = dataopts.sep_option(None, "SITE.csv", " As bnsl learn --sep."),
    site_id: Optional[str] = typer.Option(
        None, "--site-id",
        help="This site's name. Under mutual TLS it is the name in --cert (its site:NAME URI, else its common name): "
        "--site-id may only repeat it. Under --insecure the default is the CSV's file name. Sites are numbered "
        "in the order of their names.",
    ),
    ca: Optional[Path] = typer.Option(None, "--ca", help="CA certificate that issued the coordinator's certificate (PEM)."),
    cert: Optional[Path] = typer.Option(None, "--cert", help="This site's certificate (PEM)."),
    key: Optional[Path] = typer.Option(None, "--key", help="This site's private key (PEM)."),
    insecure: bool = typer.Option(False, "--insecure", help="Plaintext without authentication; loopback coordinators only."),
    transcript: Optional[Path] = typer.Option(
        None, "--transcript", help="Append the transcript (JSON lines) here; default SITE.transcript.jsonl next to the CSV."
    ),
    timeout: float = typer.Option(
        600.0, "--timeout",
        help="Seconds to wait for the coordinator's next message (it may compute for long between rounds). A "
        "coordinator whose process or machine stops (frozen, SIGSTOP, power loss) no longer answers keep-alive "
        "pings and is given up within 10 s.",
    ),
    connect_timeout: float = typer.Option(10.0, "--connect-timeout", help="Seconds to wait for the connection."),
    quiet: bool = typer.Option(False, "--quiet", "-q", envvar="BNSL_QUIET", help="No progress output."),
    categorical: Optional[str] = dataopts.categorical_option(None),
    max_levels: int = dataopts.max_levels_option(None),
    **read,
) -> None:
    """Join a networked run as one site (the coordinator runs bnsl serve).

    Exit codes: 0 ok; 2 usage; 3 bad data; 5 this site refused the plan (beyond its limits);
    6 federation failure (lost or unreachable coordinator, or the run stopped by another party); 130 Ctrl-C;
    143 SIGTERM.
    """
    from bnsl_cli.errors import BnslError
    from bnsl_cli.net.common import need_grpc
    from bnsl_cli.net.tls import split_hostport

    need_grpc()
    console = common.err_console
    log = (lambda m: None) if quiet else (lambda m: console.print(m, highlight=False, markup=False))
    if max_epsilon is None and not allow_non_private:
        raise common.fail(
            "say what this site accepts: --max-epsilon E (private runs up to ε = E) and/or --allow-non-private", 2
        )
    if max_epsilon is not None and not max_epsilon > 0:
        raise common.fail("--max-epsilon must be > 0", 2)
    if max_total_epsilon is not None and not (max_total_epsilon > 0 and max_total_epsilon < float("inf")):
        raise common.fail("--max-total-epsilon must be a finite number > 0", 2)
    if max_total_epsilon is not None and max_epsilon is None:
        raise common.fail("--max-total-epsilon bounds private runs: give --max-epsilon too", 2)
    if max_delta is not None and not 0 < max_delta < 1:
        raise common.fail("--max-delta must be > 0 and < 1", 2)
    for opt, value in (("--timeout", timeout), ("--connect-timeout", connect_timeout)):
        if not (value > 0 and value < float("inf")):
            raise common.fail(f"{opt} must be a finite number of seconds > 0, got {value:g}", 2)
    if max_rounds is not None and max_rounds < 1:
        raise common.fail("--max-rounds must be at least 1", 2)
    from bnsl_cli.net.site_sessions import DEFAULT_MAX_SESSIONS

    max_sessions = DEFAULT_MAX_SESSIONS if max_sessions is None else max_sessions
    if max_sessions < 1:
        raise common.fail("--max-sessions must be at least 1", 2)
    host, _ = split_hostport(coordinator, "HOST:PORT")
    from bnsl_cli.cli.netopts import credentials

    creds = credentials(ca, cert, key, insecure, host, "coordinator address", role="clientAuth")
    name = _site_name(site_id, csv, creds, cert)
    from bnsl_cli.io.csv_reader import read_table
    from bnsl_cli.io.shards import sample_warnings

    read_opts = dataopts.read_options(**read)
    if max_levels < 2:
        raise common.fail(f"--max-levels must be at least 2, got {max_levels}", 2)
    declared = dataopts.categorical_names(categorical)
    header, text = dataopts.text_columns([csv], read_opts)
    cat = [c for c in list(declared) + [c for c in text if c not in declared]
           if c not in (read_opts.drop or ()) and c != read_opts.index_col and (not read_opts.columns or c in read_opts.columns)]
    if cat and not allow_non_private:
        raise common.fail(
            f"column {cat[0]!r} is categorical: networked runs learn categorical columns without --dp only in this "
            "version (this site's levels go to the coordinator in its HELLO); add --allow-non-private, or leave the "
            f"column out with --drop {cat[0]}", 2)
    table = read_table(csv, sep=sep, options=read_opts, min_columns=max(2 - len(cat), 0), check_constant=False,
                       keep=tuple(cat))  # for non-private plans: accepted()
    sample_warnings([table], read_opts, whole=False)
    levels, variables = {}, tuple(table.names)
    if cat:  # rows with a missing level dropped (--na drop-rows) or refused; the levels checked before any leaves
        from bnsl_cli.io.kinds import site_table

        order = list(read_opts.columns) if read_opts.columns else header
        table, variables, levels = site_table(table, cat, max_levels, na_drop=read_opts.na == "drop-rows", order=order)
    from bnsl_cli.net.policy import SiteGuard, SiteLimits, plan_record

    limits = SiteLimits(
        max_epsilon=max_epsilon,
        max_delta=max_delta,  # None: policy.DEFAULT_MAX_DELTA, a fixed public bound
        allow_non_private=allow_non_private,
        max_rounds=max_rounds,
        methods=None if methods is None else [m.strip() for m in methods.split(",") if m.strip()],
        releases=None if releases is None else [r.strip() for r in releases.split(",") if r.strip()],
        accept_seeded_noise=accept_seeded_noise,
        accept_split_noise=accept_split_noise,
        refuse_standardize=refuse_standardize,
        require_secure_sum=require_secure_sum,
        allow_tables=allow_tables,
        max_levels=max_levels,
        max_sessions=max_sessions,
        max_total_epsilon=max_total_epsilon,
    )
    budget = None
    if limits.max_epsilon is not None:  # private runs: the site's spend over runs, on its own ledger
        from bnsl_cli.net.site_budget import SiteBudget

        ledger = budget_ledger if budget_ledger is not None else csv.with_name(csv.stem + ".budget.jsonl")
        budget = SiteBudget(ledger, limits.max_total_epsilon)
    from bnsl_cli.net.site_sessions import BootstrapSessions, Resampling
    from bnsl_cli.net.transcript import Transcript
    from bnsl_cli.federated.secure_sum import generate_keypair

    tpath = transcript if transcript is not None else csv.with_name(csv.stem + ".transcript.jsonl")
    tr = Transcript(tpath)
    tr.write({
        "event": "run", "site": name, "coordinator": coordinator, "csv": str(csv), "rows": table.n,
        "columns": list(variables), "limits": limits.to_dict(), **({"levels": levels} if levels else {}),
        "transport": "gRPC, mutual TLS" if creds else "gRPC, plaintext on loopback (--insecure)",
        **_own_identity(creds),
    })
    def accepted(acc) -> None:
        if not acc.plan.private:  # a private run must not depend on whether a column is constant
            from bnsl_cli.io.shards import check_constant_columns

            check_constant_columns(table)
        if acc.plan.private and not acc.plan.standardize:  # this site's exact spreads (nothing is released)
            dataopts.exact_scale_warning([_columns_of(table, acc.plan.names, acc.X)])
        tr.write({"event": "plan", "decision": "accepted", **plan_record(acc.plan), "index": acc.index,
                  "secure_sum": acc.secure_sum, **boot.record(acc.plan), **acc.total})

    # this site's sessions with the coordinator (serve --bootstrap): order and caps, and its own
    # resampling stream, which never leaves this process
    boot = BootstrapSessions(max_sessions, Resampling.of(resample_seed))

    status = "error"
    sessions = 0
    try:
        log(f"{name}: {table.n} rows, {len(variables)} columns"
            + (f" ({len(levels)} categorical)" if levels else "") + f"; joining {coordinator}")
        from bnsl_cli.net.site import run_site

        def session(retry_s: float = 0.0):
            """One run with the coordinator: a fresh guard and key; the guard admits the plan only if it
            is the session due (:class:`~bnsl_cli.net.site_sessions.BootstrapSessions`). A session that
            ends before any plan arrived (the coordinator still closing the last one) is tried again
            within ``retry_s``."""
            import time

            from bnsl_cli.net.common import FederationError

            deadline = time.monotonic() + retry_s
            while True:
                sk, pk = generate_keypair()
                hello = {"site": name, "columns": list(variables), "rows": table.n, "limits": limits.to_dict(),
                         "x25519": pk.hex(), **({"levels": levels} if levels else {})}
                guard = SiteGuard(table, limits, name, on_accept=accepted, sessions=boot, budget=budget)
                try:
                    return run_site(
                        coordinator, hello, _recording(guard.on_plan, tr), secure_key=sk, credentials=creds,
                        timeout=timeout, connect_timeout=connect_timeout, transcript=tr, log=log,
                    )
                except FederationError:
                    if guard.accepted is not None or time.monotonic() >= deadline:
                        raise
                    time.sleep(0.25)

        res = session()
        sessions = 1
        if boot.more():  # serve --bootstrap: the other replicates, then the run
            log(f"{name}: bootstrap replicate 1/{boot.total - 1} done; rejoining for the next sessions")
            while boot.more():
                res = session(retry_s=max(connect_timeout, 30.0))
                sessions += 1
        status = "ok"
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM
        from bnsl_cli.errors import interruption

        status = interruption(exc)[0]
        raise
    except BnslError as exc:
        status = f"stopped: {exc}"
        raise
    finally:
        tr.close(status)
    del res
    msg = f"{name}: run finished" + (f" ({sessions} sessions)" if sessions > 1 else "")
    msg += f"; sent {tr.bytes_sent / 1e6:.3f} MB in all"
    if tr.rho_total:
        msg += f", zCDP ρ = {tr.rho_total:.4g}"
    log(msg + f"; transcript {tpath}")


def _columns_of(table, names, X):
    from bnsl_cli.io.table import Table

    return Table(X, tuple(names), table.path)


def _site_name(site_id: Optional[str], csv: Path, creds, cert: Optional[Path]) -> str:
    """The name this site joins under: under mutual TLS its certificate's name (the coordinator
    refuses a HELLO that declares another), which ``--site-id`` may only repeat; under
    ``--insecure`` ``--site-id``, default the CSV's file name."""
    if creds is None:
        return site_id or csv.name
    from bnsl_cli.net.identity import identity_of

    own = identity_of(creds.cert).name
    if not own:
        raise common.fail(f"--cert {cert}: the certificate names no site (no site:NAME URI, no common name)", 2)
    if site_id is not None and site_id != own:
        raise common.fail(
            f"--site-id {site_id!r} is not the name in --cert {cert} ({own!r}): under mutual TLS a site's name is its "
            f"certificate's; omit --site-id or give {own!r}", 2,
        )
    return own


def _own_identity(creds) -> dict:
    """This site's certificate identity and fingerprint for the transcript's run record."""
    if creds is None:
        return {"identity": None}
    from bnsl_cli.net.identity import identity_of

    ident = identity_of(creds.cert)
    return {"identity": ident.name, "certificate_sha256": ident.sha256}


def _recording(on_plan, tr):
    """``on_plan`` that writes a refusal into the transcript before it is sent."""
    from bnsl_cli.errors import BnslError

    def wrapped(body):
        try:
            return on_plan(body)
        except BnslError as exc:
            tr.write({"event": "plan", "decision": f"refused: {exc}", **_plan_record_safe(body)})
            raise

    return wrapped


def _plan_record_safe(body) -> dict:
    from bnsl_cli.net.policy import plan_record

    try:
        from bnsl_cli.plan.run_plan import RunPlan

        return plan_record(RunPlan.from_dict(body["plan"]))
    except Exception:  # a malformed plan: record what we got
        return {"plan_raw": str(body)[:2000]}
