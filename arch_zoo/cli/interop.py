"""`arch-zoo import` (a Hugging Face checkpoint directory -> a run) and `export --to hf` (a run -> a
directory ``from_pretrained`` loads): the two halves of the round trip."""
from __future__ import annotations

from ..errors import ConfigError


def _import(args) -> int:
    from ..interop.as_run import import_hf

    out = import_hf(args.hf_dir, args.out, name=args.name, force=args.force)
    print(f"imported {args.hf_dir} as run {out}")
    return 0


def export_hf(args) -> int:
    """``arch-zoo export RUN --to hf --out DIR``: called by ``export`` when --to is hf."""
    from ..training.export import export_run

    if args.to != ["hf"]:
        raise ConfigError("--to", "hf writes a model directory: give it alone (--to hf --out DIR)")
    if len(args.paths) != 1:
        raise ConfigError("--to", f"hf exports one run at a time; got {len(args.paths)} paths")
    if not args.out:
        raise ConfigError("--out", "--to hf needs --out DIR (the directory from_pretrained loads)")
    result = export_run(args.paths[0], args.out, best=args.best, force=args.force,
                        max_shard_size=args.max_shard_size, auto_class=args.auto_class)
    print(f"exported {result.source} to {result.out}: {result.form}")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("import", help="a local Hugging Face checkpoint directory as a run directory (what eval, "
                                      "generate and export read)")
    p.add_argument("hf_dir", help="config.json, model.safetensors (or shards) and tokenizer.json")
    p.add_argument("--out", required=True, help="the run directory to write")
    p.add_argument("--name", default=None, help="the run's name (default: --out's last part)")
    p.add_argument("--force", action="store_true", help="replace --out when it exists and is not empty")
    p.set_defaults(func=_import)


def export_options(p) -> None:
    """The options `export` takes for --to hf."""
    p.add_argument("--out", default=None, help="--to hf: the directory to write (config.json, model.safetensors, "
                   "tokenizer, README.md)")
    p.add_argument("--best", action="store_true", help="--to hf: a sweep's best run (its metric), else the run given")
    p.add_argument("--force", action="store_true", help="--to hf: replace --out when it exists and is not empty")
    p.add_argument("--max-shard-size", default="5GB", help="--to hf: model.safetensors is split into shards of at "
                   "most this size, with model.safetensors.index.json (default 5GB)")
    p.add_argument("--auto-class", default=None, help="--to hf: the transformers class the directory is for "
                   "(default by the run's kind: AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM)")
