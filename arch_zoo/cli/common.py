"""What every command shares: exit codes, one-line argument errors, the options several commands take."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import ConfigError

EXIT_RUN_FAILED = 1
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: one line, exit 2
        raise ConfigError("", f"{message} (see '{self.prog} --help')")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def output_dir(value, flag: str) -> Path:
    """``--out`` must be (or become) a directory: checked before any work, so a typo that names a
    file fails at once instead of after training, and nothing is half-written."""
    path = Path(value)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise ConfigError(flag, f"{p} exists and is not a directory")
            break
    return path


def cache_dir(args) -> None:
    """``--cache-dir`` reaches every process that prepares or opens a token store (sweep workers too)."""
    if getattr(args, "cache_dir", None):
        os.environ["ARCH_ZOO_CACHE"] = str(Path(args.cache_dir).expanduser().resolve())


def cache_option(p) -> None:
    p.add_argument("--cache-dir", default=None, help="token store cache (default: $ARCH_ZOO_CACHE, else "
                   "~/.cache/arch_zoo)")


def warn(message: str) -> None:
    print(f"arch-zoo: warning: {message}", file=sys.stderr)
