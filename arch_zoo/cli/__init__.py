"""The ``arch-zoo`` command. Thin: parse arguments, call library functions, map errors to exit codes.

Exit codes: 0 done; 1 a run failed or diverged (``train``) or any run of a sweep did; 2 a user
mistake (bad config, missing file, bad argument), reported in one line on stderr before anything
is written; 130 interrupted (Ctrl-C) and 143 stopped by SIGTERM (``train``, ``sweep``: the shell's 128 +
signal), with finished work kept and the same command resuming.

One module per command group holds its handlers and its ``add_parsers(sub)``; this one assembles
the parser and maps errors to exit codes (``main``, and ``run``, the console script)."""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from ..errors import ConfigError
from . import coord_check, data, describe, evaluate, generate, interop, reports, sweep, train
from .common import EXIT_INTERRUPTED, EXIT_RUN_FAILED, EXIT_USER_ERROR, Parser

__all__ = ["EXIT_INTERRUPTED", "EXIT_RUN_FAILED", "EXIT_USER_ERROR", "build_parser", "main", "run"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="arch-zoo", description="Controlled Transformer architecture comparisons.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for group in (describe, train, data, generate, evaluate, sweep, reports, interop, coord_check):  # the order `arch-zoo --help` lists them in
        group.add_parsers(sub)
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

        from ..sweeps.local import end_forkserver

        end_forkserver()  # else `arch-zoo sweep | tee log` waits seconds for it to exit
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe (`arch-zoo sweep ... | head`)
                pass
        os._exit(code)
    sys.exit(code)

