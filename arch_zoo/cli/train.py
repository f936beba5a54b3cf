"""`arch-zoo train` and `gradnorms`: one config trained, or its gradients studied at initialisation."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..errors import ConfigError
from ..openmp import passive_unless_chosen
from ..provenance import command_line
from .common import EXIT_RUN_FAILED, cache_dir, cache_option, output_dir


def _gradnorms(args) -> int:
    passive_unless_chosen()  # before the imports below load torch (openmp.py)
    from ..formatting import number
    from ..reports.gradnorms import write
    from ..training.gradnorms import Study, last_layer_table, run_study

    if any(d < 1 for d in args.depths):
        raise ConfigError("--depths", f"depths must be positive layer counts, got {args.depths}")
    key, sep, values = args.vary.partition("=")
    choices = [v for v in values.split(",") if v]
    if not sep or not key or not choices:
        raise ConfigError("--vary", f"expected KEY=VALUE1,VALUE2 (e.g. model.norm_placement=pre,post), got {args.vary!r}")
    if key in ("model.n_layers", "seed"):
        raise ConfigError("--vary", f"{key} is set by --depths/--seeds; vary another key")
    output_dir(args.out, "--out")
    study = Study(args.config, list(args.overrides), args.depths, key, choices, args.seeds)
    began = time.time()
    frame = run_study(study, log=lambda line: print(line, file=sys.stderr))
    files = write(frame, Path(args.out), command=command_line(args.argv), wall_s=time.time() - began)
    for _, r in last_layer_table(frame).iterrows():
        print(f"{r['variant']:<28} depth {int(r['depth']):>3}  last-layer FFN grad norm {number(r['mean'])} "
              f"± {number(0.0 if r['std'] != r['std'] else r['std'])} (n={int(r['count'])})")
    print(f"wrote {', '.join(str(f) for f in files)}")
    return 0


def _train(args) -> int:
    passive_unless_chosen()  # before anything imports torch (openmp.py); DDP's processes inherit it
    from ..experiment import load

    cfg = load(args.config, args.overrides)
    out = output_dir(args.out if args.out else Path("runs") / cfg.name, "--out")
    from ..tracking.deps import check_logging

    check_logging(cfg.logging)
    cache_dir(args)
    from ..training import run_one  # Lightning: seconds, after the checks that need none
    from ..training.report import summary_text
    from ..training.run import RunInterrupted

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


def _count(option: str):
    """int, or the hint an override after a list option needs: argparse gives it to the option."""
    import argparse

    def parse(text: str) -> int:
        if "=" in text:
            raise argparse.ArgumentTypeError(f"{text!r} is an override: put key=value overrides before {option}")
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None

    return parse


def add_parsers(sub) -> None:
    p = sub.add_parser("gradnorms", help="per-layer gradient norms at initialisation, over depths and variants")
    p.add_argument("config", help="an experiment YAML config (its task gives the batch)")
    p.add_argument("overrides", nargs="*", help="key=value overrides applied to every model")
    p.add_argument("--depths", type=_count("--depths"), nargs="+", default=[2, 4, 6, 8, 10, 12],
                   help="model.n_layers values")
    p.add_argument("--vary", default="model.norm_placement=pre,post", help="KEY=V1,V2: the variants compared "
                   "(default: model.norm_placement=pre,post)")
    p.add_argument("--seeds", type=_count("--seeds"), nargs="+", default=[0, 1, 2],
                   help="initialisation seeds (default 0 1 2)")
    p.add_argument("--out", default="reports/gradnorms", help="directory for gradnorms.csv and the plots")
    p.set_defaults(func=_gradnorms)

    p = sub.add_parser("train", help="train one config; rerunning on the same --out resumes")
    p.add_argument("config", help="an experiment YAML config")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.max_steps=500")
    p.add_argument("--out", default=None, help="run directory (default: runs/<name>)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or Lightning messages")
    cache_option(p)
    p.set_defaults(func=_train)
