"""The ``arch-zoo`` command. Thin: parse arguments, call library functions, map errors to exit codes.

Exit codes: 0 done; 1 a run failed or diverged (``train``) or any run of a sweep did; 2 a user
mistake (bad config, missing file, bad argument), reported in one line on stderr before anything
is written; 130 interrupted (Ctrl-C), with finished work kept and the same command resuming."""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path
from typing import List, Optional

from .errors import ConfigError
from .provenance import command_line

EXIT_RUN_FAILED = 1
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: one line, exit 2
        raise ConfigError("", f"{message} (see '{self.prog} --help')")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _output_dir(value, flag: str) -> Path:
    """``--out`` must be (or become) a directory: checked before any work, so a typo that names a
    file fails at once instead of after training, and nothing is half-written."""
    path = Path(value)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise ConfigError(flag, f"{p} exists and is not a directory")
            break
    return path


def _components(args) -> int:
    from .describe import components_text
    from .plugins import load_plugins, resolve

    if args.config:  # the plugins a config names, as `train` would import them
        from .loading import load

        load(args.config)
    load_plugins(resolve(args.plugin, Path.cwd()))

    sys.stdout.write(components_text())
    return 0


def _describe(args) -> int:
    from .describe import describe_source

    sys.stdout.write(describe_source(args.config, args.overrides, args.vocab_size, args.seq_len))
    return 0


def _train(args) -> int:
    from .loading import load

    cfg = load(args.config, args.overrides)
    out = _output_dir(args.out if args.out else Path("runs") / cfg.name, "--out")
    from .dashboards.deps import check_logging

    check_logging(cfg.logging)
    _cache_dir(args)
    from .training import run_one  # Lightning: seconds, after the checks that need none
    from .training.report import summary_text
    from .training.run import RunInterrupted

    try:
        result = run_one(cfg, out, quiet=args.quiet)
    except RunInterrupted as exc:  # 143 after SIGTERM, 130 after Ctrl-C
        print(f"arch-zoo: {exc.message(command_line(args.argv))}", file=sys.stderr)
        return exc.exit_code
    code = EXIT_RUN_FAILED if result.status in ("failed", "diverged") else 0
    if int(os.environ.get("LOCAL_RANK", 0)) != 0:  # DDP worker processes: rank 0 reports
        return code
    sys.stdout.write(summary_text(result))
    if result.status == "failed":
        print(f"arch-zoo: run failed: {result.reason} (traceback in {out / 'error.txt'})", file=sys.stderr)
    elif result.status == "diverged":
        print(f"arch-zoo: run diverged: {result.reason} (metrics up to then are in {out})", file=sys.stderr)
    return code


def _cache_dir(args) -> None:
    """``--cache-dir`` reaches every process that prepares or opens a token store (sweep workers too)."""
    if getattr(args, "cache_dir", None):
        os.environ["ARCH_ZOO_CACHE"] = str(Path(args.cache_dir).expanduser().resolve())


def _prepare(args) -> int:
    from .loading import load
    from .data.prepare import interactive
    from .data.tasks.common import prepare_all

    cfg = load(args.config, args.overrides)
    if cfg.task is None:
        raise ConfigError("task", "the config has no task; nothing to prepare")
    _cache_dir(args)
    from .data.tasks import TASKS

    TASKS.get(cfg.task.name).factory.check(cfg.task.options, cfg.model.kind, cfg.model.max_seq_len)
    log = (lambda line: None) if args.quiet else (lambda line: print(f"arch-zoo: {line}", file=sys.stderr))
    began = time.perf_counter()
    stores = prepare_all([cfg], log, progress=interactive() and not args.quiet)
    if not stores:
        print(f"task '{cfg.task.name}' generates its data: nothing to prepare")
        return 0
    store = stores[0]
    if args.verify:
        store.verify()
    m = store.manifest
    tokens = ", ".join(f"{s} {m['splits'][s]['tokens']:,}" for s in ("train", "val", "test"))
    cpt = m["chars"] / max(sum(m["splits"][s]["tokens"] for s in m["splits"]), 1)
    print(f"{store.root}\n  {m['tokenizer']['name']} tokenizer, vocab {m['tokenizer']['vocab_size']:,}, {m['dtype']}; "
          f"tokens: {tokens}; {cpt:.3f} chars/token; {len(m['sources'])} source file(s)"
          f"{'; shards verified' if args.verify else ''} ({time.perf_counter() - began:.2f}s)")
    return 0


def _status(run_dir: Path) -> str:
    from .training import rundir

    return (rundir.read_json(run_dir / rundir.STATUS) or {}).get("status", "")


def _gradnorms(args) -> int:
    from .formatting import number
    from .training.gradnorms import Study, last_layer_table, run_study, write

    if any(d < 1 for d in args.depths):
        raise ConfigError("--depths", f"depths must be positive layer counts, got {args.depths}")
    key, sep, values = args.vary.partition("=")
    choices = [v for v in values.split(",") if v]
    if not sep or not key or not choices:
        raise ConfigError("--vary", f"expected KEY=VALUE1,VALUE2 (e.g. model.norm_placement=pre,post), got {args.vary!r}")
    if key in ("model.n_layers", "seed"):
        raise ConfigError("--vary", f"{key} is set by --depths/--seeds; vary another key")
    _output_dir(args.out, "--out")
    study = Study(args.config, list(args.overrides), args.depths, key, choices, args.seeds)
    began = time.time()
    frame = run_study(study, log=lambda line: print(line, file=sys.stderr))
    files = write(frame, Path(args.out), command=command_line(args.argv), wall_s=time.time() - began)
    for _, r in last_layer_table(frame).iterrows():
        print(f"{r['variant']:<28} depth {int(r['depth']):>3}  last-layer FFN grad norm {number(r['mean'])} "
              f"± {number(0.0 if r['std'] != r['std'] else r['std'])} (n={int(r['count'])})")
    print(f"wrote {', '.join(str(f) for f in files)}")
    return 0


# (flag, argparse dest, the strategies that use it): any other strategy warns that it is ignored
_STRATEGY_OPTIONS = (("--temperature", "temperature", ("sample",)), ("--top-k", "top_k", ("sample",)),
                     ("--top-p", "top_p", ("sample",)), ("--seed", "seed", ("sample",)),
                     ("--beams", "beams", ("beam",)))


def _warn(message: str) -> None:
    print(f"arch-zoo: warning: {message}", file=sys.stderr)


def _generate(args) -> int:
    from .errors import choice_error
    from .generation import STRATEGIES, generate
    from .generation.prompts import unknown_pieces
    from .training.restore import prompt_ids, restore

    if not args.prompt:
        raise ConfigError("--prompt", "is empty; give the text to continue or translate")
    if args.strategy not in STRATEGIES:  # before any warning about the options it would use
        raise choice_error("--strategy", "strategy", args.strategy, STRATEGIES)
    with warnings.catch_warnings(record=True) as caught:  # a changed plugin: one line, not a warnings trace
        cfg, model, tokenizer = restore(args.run)
    for w in caught:
        _warn(str(w.message))
    ids = prompt_ids(cfg, tokenizer, args.prompt)
    if not ids:
        raise ConfigError("--prompt", f"'{args.prompt}' has no tokens under the run's tokenizer")
    unknown = unknown_pieces(tokenizer, args.prompt)
    if unknown:
        _warn(f"--prompt: {', '.join(map(repr, unknown))} not in the run's vocabulary; encoded as the unknown token")
    ignored = [flag for flag, value, used_by in _STRATEGY_OPTIONS
               if getattr(args, value) is not None and args.strategy not in used_by]
    if ignored:
        _warn(f"{', '.join(ignored)} {'has' if len(ignored) == 1 else 'have'} no effect with --strategy "
              f"{args.strategy}")
    extra = {"sample": dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p),
             "beam": dict(beams=args.beams)}.get(args.strategy, {})
    out = generate(model, [ids], strategy=args.strategy, max_new_tokens=args.max_new_tokens,
                   eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id, seed=args.seed,
                   decoder_start_token_id=tokenizer.bos_id if cfg.model.kind == "encoder_decoder" else None,
                   **{k: v for k, v in extra.items() if v is not None})
    print(tokenizer.decode(out.to_lists()[0][0]))
    return 0


def _stats_options(p) -> None:
    p.add_argument("--ci", default="t", choices=["t", "bootstrap"],
                   help="95%% intervals from the t-distribution (default) or a BCa bootstrap (metrics far from normal)")
    p.add_argument("--min-effect", type=float, default=None, metavar="D",
                   help="seeds needed: plan for a difference D of the metric (its units) instead of the observed Δ")


def _report(args) -> int:
    from .formatting import plural
    from .reports import terminal_table, write_report

    if args.out:
        _output_dir(args.out, "--out")
    options = dict(formats=args.format, metric=args.metric, baseline=args.baseline, command=command_line(args.argv),
                   ci=args.ci, min_effect=args.min_effect)
    if args.watch:
        from .reports.watch import watch

        if args.interval <= 0:
            raise ConfigError("--interval", f"must be positive seconds, got {args.interval}")
        result = watch(args.sweep_dir, args.out, args.interval, **options)
    else:
        result = write_report(args.sweep_dir, args.out, **options)
    sys.stdout.write(terminal_table([g["variants"] for g in result["groups"]]))
    print(f"report: {result['out_dir']}/ ({plural(len(result['files']), 'file')})")
    return 0


def _compare(args) -> int:
    from .reports import load_groups, summarize, terminal_table, write_report

    if args.out:  # one table per task: runs of different tasks are not ranked together
        _output_dir(args.out, "--out")
        tables = [g["variants"] for g in write_report(args.paths, args.out, metric=args.metric, baseline=args.baseline,
                                                      ci=args.ci, min_effect=args.min_effect)["groups"]]
    else:
        tables = [summarize(runs, metric=args.metric, baseline=args.baseline, ci=args.ci, min_effect=args.min_effect)
                  for runs in load_groups(args.paths)]
    sys.stdout.write(terminal_table(tables))
    if args.out:
        print(f"report: {args.out}/")
    return 0


def _export(args) -> int:
    from .dashboards.export import export

    if args.tracking_uri and args.to != "mlflow":
        raise ConfigError("--tracking-uri", f"is for --to mlflow; --to {args.to} writes next to the runs")
    result = export(args.paths, args.to, tracking_uri=args.tracking_uri)
    for line in result.lines():
        print(line)
    return 0


def _dashboard(args) -> int:
    from .dashboards.serve import dashboard

    return dashboard(Path(args.sweep_dir), args.tool, args.port, say=lambda line: print(line, flush=True))


def _sweep(args) -> int:
    from .sweeps import dry_run_table, load_spec, make_plan, run_sweep
    from .sweeps.cli_support import export_path, failure_line, final_table, preload_reports

    spec = load_spec(args.spec, args.overrides)
    if args.workers is not None and args.workers < 1:
        raise ConfigError("--workers", f"must be at least 1, got {args.workers}")
    _output_dir(args.out, "--out")
    _cache_dir(args)
    if args.export_wandb:
        from .sweeps.wandb_format import export_wandb

        path = export_wandb(spec, export_path(spec, args.out))
        print(f"wandb sweep config: {path}\n  wandb sweep {path}   # then, on each machine: wandb agent <sweep id>")
        return 0
    if args.dry_run:
        from .sweeps.store import Store

        plan = make_plan(spec)
        Store(Path(args.out) / spec.name).check_conflicts(plan)
        if spec.command_line:
            print(f"command-line overrides (every run): {' '.join(spec.command_line)}")
        sys.stdout.write(dry_run_table(plan))
        return 0
    try:
        slurm = {"partition": args.slurm_partition, "time_limit": args.slurm_time, "gpus": args.slurm_gpus,
                 "extra": args.slurm_extra, "cluster": args.slurm_cluster}
        outcome = run_sweep(spec, args.out, args.workers, args.launcher, args.ray_address, args.retry_failed,
                            command=command_line(args.argv), on_launch=preload_reports, slurm=slurm)
    except KeyboardInterrupt:
        print("arch-zoo: sweep interrupted; finished runs are kept, and rerunning the same command resumes",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    sys.stdout.write(final_table(outcome))
    line = failure_line(outcome)
    if line:
        print(f"arch-zoo: {line}", file=sys.stderr)
        return EXIT_RUN_FAILED
    return 0


def _cache_option(p) -> None:
    p.add_argument("--cache-dir", default=None, help="token store cache (default: $ARCH_ZOO_CACHE, else "
                   "~/.cache/arch_zoo)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="arch-zoo", description="Controlled Transformer architecture comparisons.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("components", help="list every registered component with its options")
    p.add_argument("config", nargs="?", default=None, help="also the plugins this config names")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_PY",
                   help="also list what this plugin registers (repeatable); installed entry points always are")
    p.set_defaults(func=_components)

    p = sub.add_parser("describe", help="show the architecture a config assembles")
    p.add_argument("config", help="a YAML config (experiment or model), preset:NAME or a run directory")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. model.position=rope")
    p.add_argument("--vocab-size", type=_positive_int, default=None, help="vocabulary size (default: model.vocab_size, "
                   "else the run's or the task's tokenizer's)")
    p.add_argument("--seq-len", type=_positive_int, default=None, help="length for FLOPs (default: model.max_seq_len)")
    p.set_defaults(func=_describe)

    p = sub.add_parser("gradnorms", help="per-layer gradient norms at initialisation, over depths and variants")
    p.add_argument("config", help="an experiment YAML config (its task gives the batch)")
    p.add_argument("overrides", nargs="*", help="key=value overrides applied to every model")
    p.add_argument("--depths", type=int, nargs="+", default=[2, 4, 6, 8, 10, 12], help="model.n_layers values")
    p.add_argument("--vary", default="model.norm_placement=pre,post", help="KEY=V1,V2: the variants compared "
                   "(default: model.norm_placement=pre,post)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="initialisation seeds (default 0 1 2)")
    p.add_argument("--out", default="reports/gradnorms", help="directory for gradnorms.csv and the plots")
    p.set_defaults(func=_gradnorms)

    p = sub.add_parser("train", help="train one config; rerunning on the same --out resumes")
    p.add_argument("config", help="an experiment YAML config")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.max_steps=500")
    p.add_argument("--out", default=None, help="run directory (default: runs/<name>)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or Lightning messages")
    _cache_option(p)
    p.set_defaults(func=_train)

    p = sub.add_parser("prepare", help="tokenize a config's corpus once into the shared token store")
    p.add_argument("config", help="an experiment YAML config (its task names the corpus and tokenizer)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. task.tokenizer.vocab_size=8192")
    _cache_option(p)
    p.add_argument("--verify", action="store_true", help="also hash every shard against the manifest")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_prepare)

    p = sub.add_parser("generate", help="continue a prompt (or translate a source) with a trained run")
    p.add_argument("run", metavar="RUN_DIR_OR_CKPT", help="a run directory or its checkpoints/last.ckpt")
    p.add_argument("--prompt", required=True, help="the text; encoded with the run's own tokenizer")
    p.add_argument("--strategy", default="greedy", help="greedy, sample or beam")
    p.add_argument("--temperature", type=float, default=None, help="sample: softmax temperature")
    p.add_argument("--top-k", type=int, default=None, help="sample: keep the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="sample: keep the smallest set reaching p")
    p.add_argument("--beams", type=int, default=None, help="beam: beam size (default 4)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=None, help="seed for sampling")
    p.set_defaults(func=_generate)

    p = sub.add_parser("sweep", help="run (or resume) a sweep spec: variants x seeds, into a run store")
    p.add_argument("spec", help="a sweep spec YAML (see sweeps/)")
    p.add_argument("overrides", nargs="*", help="key=value overrides for every run, applied after the spec's "
                   "own (e.g. train.max_steps=100); they are part of the spec, so its runs' configs carry them")
    p.add_argument("--workers", type=int, default=None, help="local: worker processes (default 1); "
                   "ray: most runs at once (default: as many as the cluster fits)")
    p.add_argument("--launcher", choices=["local", "ray", "slurm"], default="local",
                   help="where runs train (default: local); slurm: one job per run through submitit")
    p.add_argument("--ray-address", default=None, help="ray: a cluster address (default: start a local one)")
    p.add_argument("--slurm-partition", default=None, help="slurm: the partition to submit to")
    p.add_argument("--slurm-time", default=None, help="slurm: each job's time limit (MM, HH:MM:SS, D-HH:MM:SS)")
    p.add_argument("--slurm-gpus", type=int, default=None, help="slurm: GPUs per job")
    p.add_argument("--slurm-extra", action="append", default=[], metavar="KEY=VALUE",
                   help="slurm: any other #SBATCH option, passed through (repeatable; e.g. qos=high)")
    p.add_argument("--slurm-cluster", choices=["slurm", "local"], default="slurm",
                   help="slurm: 'local' runs each job as a local subprocess through submitit (to try a sweep)")
    p.add_argument("--out", default="runs/sweeps", help="run store root; runs go to OUT/<sweep name>/ "
                   "(default: runs/sweeps)")
    p.add_argument("--retry-failed", action="store_true", help="train failed and diverged runs again")
    p.add_argument("--dry-run", action="store_true", help="print the runs (variant, seed, changed keys, "
                   "parameters) and train nothing")
    p.add_argument("--export-wandb", action="store_true", help="write a wandb sweep config for `wandb agent` "
                   "and train nothing")
    _cache_option(p)
    p.set_defaults(func=_sweep)

    p = sub.add_parser("report", help="tables with statistics, plots and exports for a sweep")
    p.add_argument("sweep_dir", help="a sweep directory (or one run directory)")
    p.add_argument("--out", default=None, help="report directory (default: reports/<sweep name>)")
    p.add_argument("--format", default=None, help="comma-separated: md,csv,tex,parquet,html,plots "
                                                  "(default: md,csv,tex,parquet,html)")
    p.add_argument("--metric", default=None, help="metric to rank and test on (default: the sweep's, else val/loss)")
    p.add_argument("--baseline", nargs="+", action="extend", default=None, metavar="KEY=VALUE",
                   help="the variant Δ is measured against (default: the sweep's baseline)")
    p.add_argument("--watch", action="store_true", help="rewrite the report as runs progress (the HTML page "
                   "reloads itself) until every run has finished; prints each variant's runs done/running/waiting")
    p.add_argument("--interval", type=float, default=10.0, help="--watch: seconds between checks (default 10)")
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
                                      "or wandb; rerunning adds only what is new")
    p.add_argument("paths", nargs="+", metavar="RUN_OR_SWEEP_DIR", help="sweep or run directories")
    p.add_argument("--to", required=True, help="tensorboard, mlflow or wandb")
    p.add_argument("--tracking-uri", default=None, help="mlflow: a server URL or a store URI (default: "
                   "sqlite:///<sweep dir>/mlflow.db)")
    p.set_defaults(func=_export)

    p = sub.add_parser("dashboard", help="export a sweep and serve it in TensorBoard or MLflow on 127.0.0.1")
    p.add_argument("sweep_dir", help="a sweep directory (or one run directory)")
    p.add_argument("--tool", default="tensorboard", help="tensorboard (default) or mlflow")
    p.add_argument("--port", type=int, default=None, help="port (default: 6006 / 5000 when free, else any free one)")
    p.set_defaults(func=_dashboard)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        # key=value overrides may come after options (`train CFG --out D a=1`)
        stray = [x for x in extra if x.startswith("-") or "=" not in x or not hasattr(args, "overrides")]
        if stray:
            parser.error(f"unrecognized arguments: {' '.join(stray)}")
        if extra:
            args.overrides = list(args.overrides) + extra
        args.argv = list(sys.argv[1:] if argv is None else argv)  # provenance: the command as typed
        return args.func(args)
    except ConfigError as exc:
        print(f"arch-zoo: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:  # `arch-zoo components | head`
        return 0
    except KeyboardInterrupt:  # train and sweep say how to resume; anything else has nothing to keep
        print("arch-zoo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def run() -> None:
    """The console script. After a sweep, whose runs all trained in other processes and whose
    files are all written, the coordinator exits without tearing down its interpreter: unloading
    torch and friends took seconds, a real share of a sweep of short runs; its forkserver is killed
    for the same reason. Other commands (which may train here, with wandb to finish) exit normally."""
    argv = sys.argv[1:]
    code = main(argv)
    if argv[:1] == ["sweep"]:
        import logging

        from .sweeps.local import end_forkserver

        end_forkserver()  # else `arch-zoo sweep | tee log` waits seconds for it to exit
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe (`arch-zoo sweep ... | head`)
                pass
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
