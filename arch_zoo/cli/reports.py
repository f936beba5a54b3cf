"""`arch-zoo report`, `compare`, `export` and `dashboard`: what finished runs show."""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import ConfigError
from ..metrics import check_claim
from ..provenance import command_line
from .common import output_dir
from .interop import export_hf, export_options


def _stats_options(p) -> None:
    p.add_argument("--ci", default="t", choices=["t", "bootstrap"],
                   help="95%% intervals from the t-distribution (default) or a BCa bootstrap (metrics far from normal)")
    p.add_argument("--min-effect", type=float, default=None, metavar="D",
                   help="the smallest difference D of the metric that counts (its units; default: the spec's "
                        "metric.min_effect, else a quarter of the seeds' spread): a Δ whose interval lies inside ±D "
                        "is 'equivalent', and seeds needed plans for D instead of the observed Δ")
    p.add_argument("--claim", type=float, default=None, metavar="D",
                   help="test the one-sided claim 'each variant beats its baseline by at least D' (the metric's "
                        "units, in its goal's direction: a loss D lower; default: the spec's metric.claim)")
    p.add_argument("--claim-alpha", type=float, default=None, metavar="A",
                   help="--claim's one-sided error rate (default 0.05)")


def _claim(args):
    """--claim and --claim-alpha as summarize takes them; None leaves the spec's metric.claim."""
    if args.claim is None:
        if args.claim_alpha is not None:
            raise ConfigError("--claim-alpha", "is for --claim D (the margin the claim tests)")
        return None
    return check_claim({"better_by": args.claim, **({"alpha": args.claim_alpha} if args.claim_alpha is not None
                                                    else {})})


def _report(args) -> int:
    from ..formatting import plural
    from ..reports import terminal_table, write_report

    if args.out:
        output_dir(args.out, "--out")
    options = dict(formats=args.format, metric=args.metric, baseline=args.baseline, command=command_line(args.argv),
                   ci=args.ci, min_effect=args.min_effect, extrapolate_to=args.extrapolate_to, claim=_claim(args),
                   within=args.within)
    if args.watch:
        from ..reports.watch import watch

        if args.interval <= 0:
            raise ConfigError("--interval", f"must be positive seconds, got {args.interval}")
        result = watch(args.sweep_dir, args.out, args.interval, **options)
    else:
        result = write_report(args.sweep_dir, args.out, **options)
    if not args.quiet:
        sys.stdout.write(terminal_table([g["variants"] for g in result["groups"]]))
        for group in result["groups"]:
            if group.get("scaling") is not None:
                from ..reports.scaling.render import terminal_lines

                print("\n".join(terminal_lines(group["scaling"])))
        for group in result["groups"]:
            if group.get("within") is not None:
                from ..reports.within_render import terminal_lines as within_lines

                print("\n".join(within_lines(group["within"])))
        if result.get("suite") is not None:
            from ..reports.suite_render import terminal_lines as suite_lines

            print("\n".join(suite_lines(result["suite"])))
    print(f"report: {result['out_dir']}/ ({plural(len(result['files']), 'file')})")
    return 0


def _compare(args) -> int:
    from ..reports import load_groups, summarize, terminal_table, write_report

    if args.out:  # one table per task: runs of different tasks are not ranked together
        output_dir(args.out, "--out")
        tables = [g["variants"] for g in write_report(args.paths, args.out, metric=args.metric, baseline=args.baseline,
                                                      ci=args.ci, min_effect=args.min_effect,
                                                      claim=_claim(args))["groups"]]
    else:
        tables = [summarize(runs, metric=args.metric, baseline=args.baseline, ci=args.ci, min_effect=args.min_effect,
                            claim=_claim(args)) for runs in load_groups(args.paths)]
    sys.stdout.write(terminal_table(tables))
    if args.out:
        print(f"report: {args.out}/")
    return 0


def _export(args) -> int:
    from ..dashboards.export import export_all

    if "hf" in args.to:
        return export_hf(args)
    for flag, given in (("--out", args.out), ("--best", args.best), ("--force", args.force),
                        ("--auto-class", args.auto_class)):
        if given:
            raise ConfigError(flag, "is for --to hf")

    if args.tracking_uri and "mlflow" not in args.to:
        raise ConfigError("--tracking-uri", f"is for --to mlflow; --to {' --to '.join(args.to)} writes next to the runs")
    results = export_all(args.paths, args.to, tracking_uri=args.tracking_uri)
    for i, result in enumerate(results):
        lines = result.lines()
        for line in lines if i == len(results) - 1 else lines[:1]:  # what is missing, once
            print(line)
    return 0


def _dashboard(args) -> int:
    from ..dashboards.serve import dashboard

    return dashboard(Path(args.sweep_dir), args.tool, args.port, say=lambda line: print(line, flush=True))


def add_parsers(sub) -> None:
    p = sub.add_parser("report", help="tables with statistics, plots and exports for a sweep")
    p.add_argument("sweep_dir", help="a sweep directory (or one run directory)")
    p.add_argument("--out", default=None, help="report directory (default: reports/<sweep name>)")
    p.add_argument("--format", default=None, help="comma-separated: md,csv,tex,parquet,html,plots "
                   "(default: md,csv,tex,parquet,html; html and plots write plots/, which report.md shows)")
    p.add_argument("--metric", default=None, help="metric to rank and test on (default: the sweep's, else val/loss)")
    p.add_argument("--baseline", nargs="+", action="extend", default=None, metavar="KEY=VALUE",
                   help="the variant Δ is measured against (default: the sweep's baseline)")
    p.add_argument("--watch", action="store_true", help="rewrite the report as runs progress (the HTML page "
                   "reloads itself) until every run has finished; prints each variant's runs done/running/waiting")
    p.add_argument("--interval", type=float, default=10.0, help="--watch: seconds between checks (default 10)")
    p.add_argument("--quiet", action="store_true", help="print only where the report went, not the table (e.g. "
                   "right after `arch-zoo sweep`, which printed it)")
    p.add_argument("--extrapolate-to", type=float, default=None, metavar="FLOPS",
                   help="a ladder (scale): also give each compute multiplier at this training compute, beyond the "
                   "largest rung, labelled as an extrapolation")
    p.add_argument("--within", default=None, metavar="KEY",
                   help="a swept key (task.documents): also compare each variant with the baseline at the same "
                        "level of KEY, and how its Δ changes between levels (the interaction); in report.md and "
                        "within.csv")
    _stats_options(p)
    p.set_defaults(func=_report)

    p = sub.add_parser("compare", help="compare runs from several sweeps or run directories on one metric")
    p.add_argument("paths", nargs="+", metavar="RUN_OR_SWEEP", help="sweep or run directories")
    p.add_argument("--metric", default=None, help="metric to compare on (default: val/loss)")
    p.add_argument("--baseline", nargs="+", action="extend", default=None, metavar="KEY=VALUE",
                   help="the variant Δ is measured against (keys are the settings that differ)")
    p.add_argument("--out", default=None, help="also write a report (md, csv, tex, parquet, html) here")
    _stats_options(p)
    p.set_defaults(func=_compare)

    p = sub.add_parser("export", help="write finished runs (metrics.csv, summary.json) into TensorBoard, MLflow "
                                      "or wandb (rerunning adds only what is new), or a run as a Hugging Face "
                                      "model directory (--to hf --out DIR)")
    p.add_argument("paths", nargs="+", metavar="RUN_OR_SWEEP_DIR", help="sweep or run directories")
    p.add_argument("--to", required=True, action="append", help="tensorboard, mlflow or wandb; repeat it for several "
                   "(--to mlflow --to tensorboard); or hf, alone")
    p.add_argument("--tracking-uri", default=None, help="mlflow: a server URL or a store URI (default: "
                   "sqlite:///<sweep dir>/mlflow.db)")
    export_options(p)
    p.set_defaults(func=_export)

    p = sub.add_parser("dashboard", help="export a sweep and serve it in TensorBoard or MLflow on 127.0.0.1")
    p.add_argument("sweep_dir", help="a sweep directory (or one run directory)")
    p.add_argument("--tool", default="tensorboard", help="tensorboard (default) or mlflow")
    p.add_argument("--port", type=int, default=None, help="port (default: 6006 / 5000 when free, else any free one)")
    p.set_defaults(func=_dashboard)
