"""`arch-zoo coord-check`: µP's coordinate check (activation sizes per layer across widths, standard vs mup)."""
from __future__ import annotations

import sys
from pathlib import Path

from .common import cache_dir, cache_option, output_dir, positive_int


def _coord_check(args) -> int:
    from ..reports.coord_check import PARAMETRIZATIONS, coord_check, growth, markdown, write

    out = output_dir(args.out, "--out")
    cache_dir(args)
    frame = coord_check(args.config, args.overrides, args.widths, args.steps,
                        args.parametrizations or PARAMETRIZATIONS)
    paths = write(frame, out)
    sys.stdout.write(f"coordinate sizes (mean |x| per entry) after {args.steps} steps; growth = widest / narrowest "
                     "width (1 = flat, as under µP)\n\n" + markdown(growth(frame)) + "\n")
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("coord-check", help="µP's coordinate check: each layer's activation size across widths after "
                       "a few steps, standard vs mup")
    p.add_argument("config", help="an experiment config (its task gives the batches)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.lr=3e-2")
    p.add_argument("--widths", type=positive_int, nargs="+", required=True, metavar="W",
                   help="model widths (d_model), smallest first; the smallest is µP's base width")
    p.add_argument("--steps", type=positive_int, default=4, help="training steps at each width (default 4)")
    p.add_argument("--parametrizations", nargs="+", choices=("standard", "mup"), default=None,
                   help="which to check (default both)")
    p.add_argument("--out", type=Path, default=Path("coord_check"), help="where the CSV, the Markdown table and "
                   "the plot go (default ./coord_check)")
    cache_option(p)
    p.set_defaults(func=_coord_check)
