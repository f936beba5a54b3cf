"""The ``arch-zoo`` command. Thin: parse arguments, call library functions, map errors to exit codes.

A user mistake (bad config, missing file) prints one line on stderr and exits with code 2."""
from __future__ import annotations

import argparse
import sys
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
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except ConfigError as exc:
        print(f"arch-zoo: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:  # `arch-zoo components | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
