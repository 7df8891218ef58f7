"""``bnsl learn``: learn a DAG from participant shards."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from bnsl_cli.cli import common, dataopts
from bnsl_cli.privacy.defaults import POLISH_SHARE

#: The defaults named here are the registry's (``default_method``; a test keeps them in step; the
#: registry is not imported for the help text, it would cost every start-up its numerical imports).
METHOD_HELP = (
    "fed-sparse (Fed-Sparse-BNSL) | fed-bnsl (Ng & Zhang 2022 baseline) | "
    "fed-moments (pooled second moments in two sum-shaped exchanges, NOTEARS on them) | "
    "fed-suffstats (private sufficient statistics: whitened second moments in stages, a noise-aware score search) | "
    "notears (all rows pooled: the accuracy ceiling) | local-notears (each participant alone) "
    "\\[default: fed-sparse; fed-suffstats with --dp]"
)
#: learn parameters with a ``BNSL_*`` variable that only some methods take: a value from the
#: environment is left out when the run's method does not take it (one typed on the command line is
#: refused), as BNSL_EPSILON is for a non-private run
#: the help panel of the edge-confidence options (after Knowledge, before Output)
CONFIDENCE = "Confidence"
ENV_METHOD_OPTIONS = {"lam": "--lambda", "rounds": "--rounds", "steps": "--steps", "acyclicity": "--acyclicity"}


def command(
    ctx: typer.Context,
    shards: List[str] = typer.Argument(
        None, metavar="SHARDS...", help="Participant CSV files (one per participant; .csv, .tsv, .csv.gz), "
        "directories of them, quoted globs, or - for one shard on standard input.",
    ),
    files_from: Optional[Path] = dataopts.files_from_option(),
    sep: Optional[str] = dataopts.sep_option(),
    columns: Optional[str] = dataopts.columns_option(),
    drop: Optional[str] = dataopts.drop_option(),
    categorical: Optional[str] = dataopts.categorical_option(),
    max_levels: int = dataopts.max_levels_option(),
    index_col: Optional[str] = dataopts.index_col_option(),
    na: str = dataopts.na_option(),
    header: str = dataopts.header_option(),
    encoding: str = dataopts.encoding_option(),
    decimal: str = dataopts.decimal_option(),
    method: Optional[str] = typer.Option(
        None, "--method", "-m", envvar="BNSL_METHOD", metavar="METHOD", show_default=False,
        help=METHOD_HELP,
        rich_help_panel=dataopts.METHOD,
    ),
    lam: Optional[float] = typer.Option(
        None,
        "--lambda",
        envvar="BNSL_LAMBDA",
        help="ℓ₁ weight. fed-sparse: per participant, on B_p (the local losses are normalised by the public "
        "total n, so it acts as P·λ in centralized NOTEARS units); default 0.04/P (0.005 with P = 8), "
        "0.01 with --dp; "
        "fed-bnsl: on W, default 0.03; fed-moments / notears / local-notears: 0.1.",
        rich_help_panel=dataopts.METHOD,
    ),
    threshold: Optional[float] = typer.Option(
        None, "--threshold", envvar="BNSL_THRESHOLD",
        help="Drop edges with |w| ≤ this \\[default: 0.3 for the consensus; without --dp, fed-sparse's polish "
        "then lets its score decide the final edges; given, it is applied after the polish too]",
        rich_help_panel=dataopts.METHOD,
    ),
    rounds: Optional[int] = typer.Option(None, "--rounds", envvar="BNSL_ROUNDS", help="Max ADMM rounds (default 80; 50 with --dp).", rich_help_panel=dataopts.METHOD),
    steps: Optional[int] = typer.Option(None, "--steps", envvar="BNSL_STEPS", help="PGCD steps per round (default 3d; with --dp max(20, d/2)).", rich_help_panel=dataopts.METHOD),
    rho1: float = typer.Option(1e-3, "--rho1", help="Initial acyclicity penalty ρ₁.", rich_help_panel=dataopts.METHOD),
    rho2: float = typer.Option(1e-3, "--rho2", help="Initial consensus penalty ρ₂.", rich_help_panel=dataopts.METHOD),
    rho1_growth: float = typer.Option(1.75, "--rho1-growth", help="ρ₁ growth factor per round.", rich_help_panel=dataopts.METHOD),
    rho2_growth: float = typer.Option(1.25, "--rho2-growth", help="ρ₂ growth factor per round.", rich_help_panel=dataopts.METHOD),
    snap: float = typer.Option(
        0.05, "--snap",
        help="Fed-sparse: consensus entries |W_ij| below this are set to 0 before each broadcast "
        "(a sparser consensus; 0 turns it off). Keep it well below --threshold.",
        rich_help_panel=dataopts.METHOD,
    ),
    acyclicity: str = typer.Option(
        "auto", "--acyclicity", envvar="BNSL_ACYCLICITY",
        help="Fed-sparse: the coordinator's acyclicity function h(W): expm (NOTEARS, tr exp(W∘W) − d) or "
        "logdet (DAGMA, −log det(I − W∘W); cheaper per evaluation, fed-sparse only). auto: logdet for "
        "non-private fed-sparse, expm under --dp and for the other methods (the report shows the choice).",
        rich_help_panel=dataopts.METHOD,
    ),
    polish: bool = typer.Option(
        True, "--polish/--no-polish",
        help="Fed-sparse: after the rounds, one exchange of second moments (every pair; under --dp only the "
        "pairs the consensus selects), then a score-based search (edge deletions, reversals, additions) from "
        "the consensus DAG. Under --dp that release takes --polish-share of the budget. --no-polish: the "
        "plain consensus.",
        rich_help_panel=dataopts.METHOD,
    ),
    standardize: bool = typer.Option(
        False, "--standardize",
        help="Learn on columns scaled to mean 0, sd 1 with the pooled statistics (one exchange of column counts, "
        "sums and sums of squares before the rounds; under --dp taken from the already released means and second "
        "moments, no extra budget). Edges do not depend on the columns' units; the threshold applies to the "
        "standardised weights; weights are reported in original units, W[i,j] = W_std[i,j]·sd_j/sd_i.",
        rich_help_panel=dataopts.METHOD,
    ),
    seed: Optional[int] = typer.Option(None, "--seed", envvar="BNSL_SEED", help="Seed for every random choice (DP noise too).", rich_help_panel=dataopts.METHOD),
    dp: bool = typer.Option(
        False, "--dp", help="Differentially private run (default method fed-suffstats; -m fed-sparse: DP-Fed-Sparse-BNSL, "
        "-m fed-bnsl: DP-Fed-BNSL, -m fed-moments).", rich_help_panel=dataopts.PRIVACY,
    ),
    epsilon: Optional[float] = typer.Option(None, "--epsilon", envvar="BNSL_EPSILON", help="Privacy budget ε (with --dp).", rich_help_panel=dataopts.PRIVACY),
    delta: Optional[float] = typer.Option(None, "--delta", envvar="BNSL_DELTA", help="δ (default min(1/n_min², 0.01/n_max): no participant's n_p·δ above 0.01).", rich_help_panel=dataopts.PRIVACY),
    clip: float = typer.Option(1.5, "--clip", help="Clip multiplier c (DP): the median clip level is c × the typical per-sample gradient at B = 0.", rich_help_panel=dataopts.PRIVACY),
    selection_share: float = typer.Option(0.5, "--selection-share", help="Share a of each DP step's budget spent on selection.", rich_help_panel=dataopts.PRIVACY),
    polish_share: float = typer.Option(
        POLISH_SHARE, "--polish-share", help="Share of the whole DP budget spent on the polish's second moments (fed-sparse; "
        "ignored with --no-polish, which gives it to the DP-PGCD steps).",
        rich_help_panel=dataopts.PRIVACY,
    ),
    conversion: str = typer.Option(
        "tight", "--conversion", metavar="[tight|simple]", help="zCDP → (ε, δ) conversion.", rich_help_panel=dataopts.PRIVACY,
    ),
    accountant: str = typer.Option(
        "pld", "--accountant", envvar="BNSL_ACCOUNTANT", metavar="[pld|zcdp]",
        help="How the privacy ledger is read for the calibration and the report: privacy-loss distributions "
        "(pld, tighter) or zCDP.",
        rich_help_panel=dataopts.PRIVACY,
    ),
    public_means: bool = typer.Option(
        False, "--public-means", help="DP: the column means are public (or the data are centred); no mean release.", rich_help_panel=dataopts.PRIVACY,
    ),
    value_bound: Optional[float] = typer.Option(
        None, "--value-bound",
        help="DP: a public bound B on |x| (and on |x − centre|) used to clip the mean and second-moment "
        "releases; without it the bounds come from noisy range histograms.",
        rich_help_panel=dataopts.PRIVACY,
    ),
    noise: str = typer.Option(
        "auto", "--noise", metavar="[auto|distributed|per-site]",
        help="DP, fed-suffstats: who adds the noise of the summed releases. distributed: each site adds a share "
        "(variance 1/(P − t) of the calibrated one) and only the secure sum carries the whole noise (in process, "
        "and serve --secure-sum); per-site: every site adds all of it (P times the pooled variance). auto: "
        "distributed for fed-suffstats (per-site under serve --no-secure-sum).",
        rich_help_panel=dataopts.PRIVACY,
    ),
    collusion_tolerance: int = typer.Option(
        0, "--collusion-tolerance", metavar="T",
        help="DP, distributed noise: raise every share to variance σ²/(P − T), so the guarantee holds against the "
        "coordinator together with T colluding sites.",
        rich_help_panel=dataopts.PRIVACY,
    ),
    clip_levels: str = typer.Option(
        "auto", "--clip-levels", metavar="[auto|adaptive|static]", help="DP-PGCD clip levels: adaptive (follow ρ₂ each round), static, or auto "
        "(adaptive below 50 variables, static from 50 on: measured faster there).",
        rich_help_panel=dataopts.PRIVACY,
    ),
    require: Optional[List[str]] = typer.Option(
        None, "--require", metavar="A->B", help="Prior knowledge: the edge A -> B must be in the graph (repeatable).",
        rich_help_panel=dataopts.KNOWLEDGE,
    ),
    forbid: Optional[List[str]] = typer.Option(
        None, "--forbid", metavar="A->B", help="Prior knowledge: the edge A -> B must not be in the graph (repeatable).",
        rich_help_panel=dataopts.KNOWLEDGE,
    ),
    knowledge_file: Optional[List[Path]] = typer.Option(
        None, "--knowledge", metavar="FILE", help="Prior knowledge file: lines 'require A -> B', 'forbid A -> B', "
        "'tier N: names' (no edge from a later tier into an earlier one); '#' starts a comment.",
        rich_help_panel=dataopts.KNOWLEDGE,
    ),
    require_file: Optional[List[Path]] = typer.Option(
        None, "--require-file", metavar="CSV", help="Required edges as a bnlearn-style whitelist: CSV with header from,to.",
        rich_help_panel=dataopts.KNOWLEDGE,
    ),
    forbid_file: Optional[List[Path]] = typer.Option(
        None, "--forbid-file", metavar="CSV", help="Forbidden edges as a bnlearn-style blacklist: CSV with header from,to.",
        rich_help_panel=dataopts.KNOWLEDGE,
    ),
    bootstrap: int = typer.Option(
        0, "--bootstrap", metavar="B", envvar="BNSL_BOOTSTRAP",
        help="Edge confidence: B replicates. Without --dp each participant resamples its own rows and the run is "
        "repeated B times (in parallel over the worker processes); with --dp the released statistics are resampled with "
        "their sampling and privacy noise (post-processing: the same ε). Adds strength (share of replicates "
        "with the edge, either way) and direction to edges.csv and writes strength.csv.",
        rich_help_panel=CONFIDENCE,
    ),
    min_strength: Optional[str] = typer.Option(
        None, "--min-strength", metavar="S|auto",
        help="With --bootstrap: return the averaged network, the edges of strength ≥ S oriented by the "
        "replicates' majority and kept acyclic; auto: S estimated from the strengths (Scutari & Nagarajan "
        "2013, docs/cli.md). Without it the run's own graph is kept and annotated.",
        rich_help_panel=CONFIDENCE,
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Output directory (adjacency.csv, edges.csv, cpdag.csv, graph.dot, report.json), "
        "written as one unit (docs/cli.md: output folders). Without it the edge list (source,target,weight) is "
        "printed on stdout.",
        rich_help_panel=dataopts.OUTPUT,
    ),
    adjacency_out: Optional[str] = typer.Option(
        None, "--adjacency", metavar="PATH", help="Also write the weighted adjacency CSV to PATH (- = stdout).",
        rich_help_panel=dataopts.OUTPUT,
    ),
    edges_out: Optional[str] = typer.Option(
        None, "--edges", metavar="PATH", help="Also write the edge list CSV to PATH (- = stdout).",
        rich_help_panel=dataopts.OUTPUT,
    ),
    formats: Optional[List[str]] = typer.Option(
        None, "--format", metavar="FORMAT",
        help="Also write the graph for other tools: modelstring (graph.modelstring, a bnlearn model string for "
        "R's model2network) or dagitty (graph.dagitty, for dagitty and pgmpy's DAG.from_dagitty; the weights as "
        "beta). Repeatable or comma-separated. Without --out: one format, printed on stdout instead of the edge list.",
        rich_help_panel=dataopts.OUTPUT,
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the run report (JSON) on stdout.", rich_help_panel=dataopts.OUTPUT),
    personal: bool = typer.Option(False, "--personal", help="Also write each participant's personalised B_p.", rich_help_panel=dataopts.OUTPUT),
    quiet: bool = typer.Option(False, "--quiet", "-q", envvar="BNSL_QUIET", help="No progress output.", rich_help_panel=dataopts.OUTPUT),
    verbose: bool = dataopts.verbose_option(),
    workers: int = typer.Option(
        1, "--workers", envvar="BNSL_WORKERS",
        help="Worker processes that host the participants (at most one per participant; 1 = all in this "
        "process). Only encoded messages cross between processes; results are identical. Helps on idle "
        "cores; on a busy shared machine it was slower (docs/cli.md).",
        rich_help_panel=dataopts.METHOD,
    ),
    trace: bool = typer.Option(
        False, "--trace", help="Keep every per-round record in report.json (each round's support, every privacy "
        "event); without it they are summarised.",
        rich_help_panel=dataopts.OUTPUT,
    ),
    force: bool = typer.Option(False, "--force", help="Write into --out even if it holds files bnsl did not write.", rich_help_panel=dataopts.OUTPUT),
) -> None:
    """Learn a DAG from CSV shards held by several participants, without pooling their rows.

    Orientation of every output: W\\[i, j] is the weight of the edge i -> j (rows are parents).
    """
    if dp and epsilon is not None:  # the public bound first: a huge ε is answered before the learners load
        from bnsl_cli.privacy.limits import validate_epsilon

        validate_epsilon(epsilon)
    from bnsl_cli.errors import OptionError
    from bnsl_cli.federated.methods.registry import default_method, method_spec
    from bnsl_cli.io.shards import read_shards
    from bnsl_cli.knowledge import KnowledgeSource
    from bnsl_cli.io.graph_text_formats import graph_arcs
    from bnsl_cli.plan.options import DPConfig, LearnConfig

    if out is not None and str(out) == "-":  # not a folder named "-": stdout has its own options
        raise common.fail(
            "--out takes a folder, not - (standard output): leave --out out to print the edge list on stdout, "
            "or use --edges -, --adjacency - or --json", 2,
        )
    if not dp and common.from_env(ctx, "epsilon"):
        epsilon = None  # BNSL_EPSILON set for private runs does not concern a non-private one
    if not dp and common.from_env(ctx, "delta"):
        delta = None
    if dp and epsilon is None:
        raise common.fail("--dp needs --epsilon (e.g. --epsilon 5)", 2)
    if not dp and epsilon is not None:
        raise common.fail("--epsilon given without --dp; add --dp for a private run", 2)
    if max_levels < 2:
        raise common.fail(f"--max-levels must be at least 2, got {max_levels}", 2)
    declared = dataopts.categorical_names(categorical)
    paths = common.expand_shard_paths(shards or [], files_from)
    read_opts = dataopts.read_options(columns, drop, index_col, na, header, encoding, decimal, sep=sep)
    header, text = dataopts.text_columns(paths, read_opts)
    if dp and (declared or text):
        raise common.fail(
            f"column {(list(declared) + text)[0]!r} is categorical: under --dp a categorical column's levels must be public "
            "input (a schema), which this version does not take yet; run without --dp, or leave it out with --drop", 2)
    mixed = bool(declared or text)
    given_method = method is not None
    if method is None:  # the one place a learn run's method is chosen when not given
        method = default_method(dp, categorical=mixed)
    spec = method_spec(method)  # the one look-up of the method's spec in a learn command
    takes = spec.options
    env = {name for name, flag in ENV_METHOD_OPTIONS.items() if flag not in takes and common.from_env(ctx, name)}
    lam, rounds, steps = (None if n in env else v for n, v in (("lam", lam), ("rounds", rounds), ("steps", steps)))
    if "acyclicity" in env:
        acyclicity = "auto"
    dp_cfg = None
    if dp:
        dp_cfg = DPConfig(
            epsilon=epsilon,
            delta=delta,
            clip=clip,
            selection_share=selection_share,
            polish_share=polish_share,
            conversion=conversion,
            accountant=accountant,
            public_means=public_means,
            value_bound=value_bound,
            clip_levels=clip_levels,
            noise=noise,
            collusion_tolerance=collusion_tolerance,
        )
    cfg = LearnConfig(
        method=method, lam=lam, threshold=threshold, rounds=rounds, steps=steps, rho1=rho1, rho2=rho2,
        rho1_growth=rho1_growth, rho2_growth=rho2_growth, seed=seed, personal=personal, dp=dp_cfg,
        workers=workers, snap=snap, polish=polish, acyclicity=acyclicity, standardize=standardize,
        knowledge=KnowledgeSource.from_options(require, forbid, knowledge_file, require_file, forbid_file,
                                               graph_arcs=graph_arcs),
        bootstrap=bootstrap, min_strength=min_strength,
    )
    cfg.trace = trace  # keep every per-round record in report.json
    try:
        cfg.check()  # every option check lives in the run plan; these need no data
    except OptionError as exc:
        if not mixed or given_method:
            raise
        # the method was chosen for the categorical columns: say so beside what does not fit it
        names = ", ".join(repr(c) for c in (list(declared) + text)[:3])
        raise OptionError(f"{exc} (--method {method} is the default for data with categorical columns: {names})") from None
    local = spec.per_participant_graphs
    if not paths:
        raise common.fail("no shards given: pass CSV files, a directory, or --files-from LIST", 2)
    from bnsl_cli.cli import output
    from bnsl_cli.io.graph_export import check_names

    formats = output.check_formats(formats, out, json_out, {"--adjacency": adjacency_out, "--edges": edges_out}, local)

    od = output.prepare_learn_dir(out, paths, len(paths), personal or local, force, strength=bool(bootstrap),
                                  formats=formats)
    singles = output.prepare_single_outputs(
        {"--adjacency": adjacency_out, "--edges": edges_out}, paths, local=local,
        stdout_option="--json" if json_out else None,
    )
    progress = common.read_progress(quiet)
    def reader(keep):
        return read_shards(paths, progress=progress, options=read_opts, check_constant=not dp,  # none under --dp
                           keep=keep)

    if mixed:
        tables, _ = dataopts.categorical_tables(header, text, reader, declared, max_levels, read_opts)
    else:
        tables = reader(())
    if progress is not None:
        progress.close()
    if formats and tables:  # a name a format cannot hold is refused before anything is learned
        first = tables[0]
        check_names(formats, first.columns.names if first.columns is not None else first.names, str(first.path))
    if dp and not standardize:  # the run's own spreads are noisy: check the exact ones here (no release)
        dataopts.exact_scale_warning(tables)
    chosen = None
    used = read_opts.used(tables)  # with each shard's separator when one is not its extension's default
    if used != type(used)():  # the columns and rows used and how, when chosen (report.json: input)
        from bnsl_cli.report import InputRecord

        chosen = InputRecord(used, tuple(int(t.dropped_rows) for t in tables))
    with dataopts.convergence_warnings(verbose):
        result = _run_with_progress(tables, cfg, quiet, chosen)
    if od is not None:
        output.write_learn_outputs(od, result, method, formats)
    output.write_single_outputs(singles, result)
    output.print_run_summary(result, out, quiet)
    if json_out:
        common.print_json(result.report)
    elif out is None and formats:
        sys.stdout.write(output.stdout_format_text(formats, result))
    elif out is None and "-" not in (adjacency_out, edges_out):
        sys.stdout.write(output.stdout_edges_text(result, tables))


def _run_with_progress(tables, cfg, quiet, input_record=None):
    from bnsl_cli.learn import learn
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import Shapes

    plan = RunPlan.resolve(cfg, Shapes.of_tables(tables))
    console = common.err_console
    max_rounds = plan.rounds
    if quiet:
        return learn(tables, plan, input_record=input_record)
    boot = _bootstrap_progress(console, plan.bootstrap) if plan.bootstrap and not plan.private else None
    if console.is_terminal:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("round {task.completed:>3.0f}/{task.total:.0f}"),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task(cfg.method, total=max_rounds, info="")

            def progress(info):
                gap = info.get("gap")
                text = f"h(W)={info['h']:.1e}" + (f" gap={gap:.1e}" if gap is not None else "")
                if "edges" in info:
                    text += f" edges={info['edges']}"
                bar.update(task, completed=info["round"], info=text)

            return learn(tables, plan, progress, input_record=input_record, bootstrap_progress=boot)

    def plain(info):
        r = info["round"]
        if r == 1 or r % 10 == 0:
            gap = info.get("gap")
            line = f"round {r:>3}: h(W)={info['h']:.2e}"
            if gap is not None:
                line += f" gap={gap:.2e}"
            if "edges" in info:
                line += f" edges={info['edges']}"
            console.print(line, highlight=False)

    return learn(tables, plan, plain, input_record=input_record, bootstrap_progress=boot)


def _bootstrap_progress(console, total: int):
    """Progress of the --bootstrap replicates: a line at each quarter done (they run before the run itself)."""
    marks = {max(1, round(total * q / 4)) for q in (1, 2, 3, 4)}

    def progress(done: int, of: int) -> None:
        if done in marks:
            console.print(f"bootstrap: {done}/{of} replicates", highlight=False)

    return progress
