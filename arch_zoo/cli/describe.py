"""`arch-zoo components` and `arch-zoo describe`: what can be assembled, and what a config assembles."""
from __future__ import annotations

import sys
from pathlib import Path

from .common import positive_int


def _components(args) -> int:
    from ..describe import components_text
    from ..config.plugins import load_plugins, resolve

    if args.config:  # the plugins a config names, as `train` would import them
        from ..experiment import load

        load(args.config)
    load_plugins(resolve(args.plugin, Path.cwd()))

    sys.stdout.write(components_text())
    return 0


def _describe(args) -> int:
    from ..describe import describe_source

    sys.stdout.write(describe_source(args.config, args.overrides, args.vocab_size, args.seq_len))
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("components", help="list every registered component with its options")
    p.add_argument("config", nargs="?", default=None, help="also the plugins this config names")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_PY",
                   help="also list what this plugin registers (repeatable); installed entry points always are")
    p.set_defaults(func=_components)

    p = sub.add_parser("describe", help="show the architecture a config assembles")
    p.add_argument("config", help="a YAML config (experiment or model), preset:NAME or a run directory")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. model.position=rope")
    p.add_argument("--vocab-size", type=positive_int, default=None, help="vocabulary size (default: model.vocab_size, "
                   "else the run's or the task's tokenizer's)")
    p.add_argument("--seq-len", type=positive_int, default=None, help="length for FLOPs (default: the task's "
                   "training examples' lengths, else model.max_seq_len)")
    p.set_defaults(func=_describe)
