"""The ``arch-zoo`` command. Thin: parse arguments, call library functions, map errors to exit codes.

A user mistake (bad config, missing file) prints one line on stderr and exits with code 2."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional

from .errors import ConfigError

EXIT_USER_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: one line, exit 2
        raise ConfigError("", f"{message} (see '{self.prog} --help')")


def _components(args) -> int:
    from .describe import components_text

    sys.stdout.write(components_text())
    return 0


def _describe(args) -> int:
    from .config import load
    from .describe import describe_text

    cfg = load(args.config, args.overrides)
    sys.stdout.write(describe_text(cfg, args.vocab_size, args.seq_len))
    return 0


def _train(args) -> int:
    from .config import load
    from .training import run_one
    from .training.report import summary_text

    cfg = load(args.config, args.overrides)
    out = Path(args.out) if args.out else Path("runs") / cfg.name
    result = run_one(cfg, out, quiet=args.quiet)
    if int(os.environ.get("LOCAL_RANK", 0)) != 0:  # DDP worker processes: rank 0 reports
        return 0 if result.status != "failed" else 1
    sys.stdout.write(summary_text(result))
    if result.status == "failed":
        print(f"arch-zoo: run failed: {result.reason} (traceback in {out / 'error.txt'})", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="arch-zoo", description="Controlled Transformer architecture comparisons.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("components", help="list every registered component with its options")
    p.set_defaults(func=_components)

    p = sub.add_parser("describe", help="show the architecture a config assembles")
    p.add_argument("config", help="a YAML config (experiment or model) or preset:NAME")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. model.position=rope")
    p.add_argument("--vocab-size", type=int, default=None, help="vocabulary size (default: model.vocab_size)")
    p.add_argument("--seq-len", type=int, default=None, help="length for FLOPs (default: model.max_seq_len)")
    p.set_defaults(func=_describe)

    p = sub.add_parser("train", help="train one config; rerunning on the same --out resumes")
    p.add_argument("config", help="an experiment YAML config")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.max_steps=500")
    p.add_argument("--out", default=None, help="run directory (default: runs/<name>)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or Lightning messages")
    p.set_defaults(func=_train)
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
        return args.func(args)
    except ConfigError as exc:
        print(f"arch-zoo: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:  # `arch-zoo components | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
