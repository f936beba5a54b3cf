"""`arch-zoo sweep`: run (or resume) a sweep spec into a run store."""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import ConfigError
from ..provenance import command_line
from .common import EXIT_RUN_FAILED, cache_dir, cache_option, output_dir


def _sweep(args) -> int:
    from ..sweeps import dry_run_table, load_spec, make_plan, run_sweep
    from .sweep_support import export_path, failure_line, final_table, pilot_store, power_plan, preload_reports

    spec = load_spec(args.spec, args.overrides)
    if args.workers is not None and args.workers < 1:
        raise ConfigError("--workers", f"must be at least 1, got {args.workers}")
    _check_launcher_options(args)
    output_dir(args.out, "--out")
    cache_dir(args)
    pilot = pilot_store(spec, args)  # before anything prints: a missing pilot is one line
    if args.export_wandb:
        from ..sweeps.wandb_format import export_wandb

        path = export_wandb(spec, export_path(spec, args.out))
        print(f"wandb sweep config: {path}\n  wandb sweep {path}   # then, on each machine: wandb agent <sweep id>")
        return 0
    if args.dry_run:
        from ..sweeps.store import Store

        from ..openmp import passive_unless_chosen

        passive_unless_chosen()  # the probe's threads sleep while they wait, as a worker's do
        plan = make_plan(spec)
        store = Store(Path(args.out) / spec.name)
        store.check_conflicts(plan)
        if spec.command_line:
            print(f"command-line overrides (every run): {' '.join(spec.command_line)}")
        sys.stdout.write(dry_run_table(plan, store))  # a sweep that has run: what is done, what stage 1 chose
        from ..sweeps.plan_checks import run_warnings

        for line in run_warnings(plan):
            print(f"arch-zoo: warning: {line}", file=sys.stderr)
        if plan.runs:
            if args.estimate or plan.spec.scale is not None:
                _estimate(plan, args.workers, args.estimate)
            else:
                print("(add --estimate for an estimated wall time: a timed probe of each model, seconds more)")
        if pilot is not None:
            print("\n".join(power_plan(plan, pilot, args)))
        return 0
    from ..training.interrupts import SweepInterrupted

    try:
        slurm = {"partition": args.slurm_partition, "time_limit": args.slurm_time, "gpus": args.slurm_gpus,
                 "extra": args.slurm_extra, "cluster": args.slurm_cluster}
        outcome = run_sweep(spec, args.out, args.workers, args.launcher, args.ray_address, args.retry_failed,
                            command=command_line(args.argv), on_launch=preload_reports, slurm=slurm,
                            progress=True)
    except SweepInterrupted as exc:  # 143 after SIGTERM, 130 after Ctrl-C
        print(f"arch-zoo: {exc.message(command_line(args.argv))}", file=sys.stderr)
        return exc.exit_code
    sys.stdout.write(final_table(outcome))
    line = failure_line(outcome)
    if line:
        print(f"arch-zoo: {line}", file=sys.stderr)
        return EXIT_RUN_FAILED
    return 0


def _estimate(plan, workers, calibrate: bool = False) -> None:
    """The dry run's estimated wall time (every sweep) and a ladder's table per rung, from one probe."""
    from ..sweeps.estimate import estimate, estimate_line, seconds_by_run
    from ..sweeps.worker import available_cores

    from functools import partial

    from ..sweeps.probe import probe_plan

    threads = max(1, available_cores() // (workers or 1))  # each local worker's share of the cores
    est = estimate(plan, threads, probe=partial(probe_plan, calibrate=calibrate))
    if plan.spec.scale is not None:
        from ..sweeps.ladder_table import ladder_table

        sys.stdout.write(ladder_table(plan, seconds_by_run(est, plan)))
    sys.stdout.write(estimate_line(plan, est, workers))


def _check_launcher_options(args) -> None:
    """An option of another launcher than the one chosen is a mistake, not something to ignore."""
    given = {"--ray-address": ("ray", args.ray_address is not None),
             "--slurm-partition": ("slurm", args.slurm_partition is not None),
             "--slurm-time": ("slurm", args.slurm_time is not None),
             "--slurm-gpus": ("slurm", args.slurm_gpus is not None),
             "--slurm-extra": ("slurm", bool(args.slurm_extra)),
             "--slurm-cluster": ("slurm", args.slurm_cluster != "slurm")}
    for option, (launcher, set_) in given.items():
        if set_ and args.launcher != launcher:
            raise ConfigError(option, f"is for --launcher {launcher}; this sweep runs with --launcher {args.launcher}")


def add_parsers(sub) -> None:
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
                   "parameters; once the sweep has run, each run's status and what stage 1 chose) and its estimated "
                   "wall time from a short timed probe of each model (a ladder: also a table per rung); train nothing")
    p.add_argument("--estimate", action="store_true", help="with --dry-run: an estimated wall time for any sweep, "
                   "from a timed probe of each model and the start-up and training-loop overhead of a 6-step run "
                   "through the real training path in a temporary directory (loads torch's optimizers and Lightning: "
                   "seconds more; a ladder's dry run always probes its rungs)")
    p.add_argument("--power", action="store_true", help="with --dry-run: the seeds each variant-vs-baseline pair "
                   "needs (80%% power, two-sided paired t-test, alpha 0.05) and their wall time, from a pilot: the "
                   "spec's own store if it has runs, else --pilot")
    p.add_argument("--pilot", default=None, metavar="SWEEP_DIR", help="--power: the sweep whose runs give the "
                   "spread (default: this spec's store)")
    p.add_argument("--min-effect", type=float, default=None, metavar="D", help="--power: plan to detect a "
                   "difference of D in the metric's units (default: the spec's metric.min_effect, else the pilot's "
                   "observed difference)")
    p.add_argument("--export-wandb", action="store_true", help="write a wandb sweep config for `wandb agent` "
                   "and train nothing")
    cache_option(p)
    p.set_defaults(func=_sweep)
