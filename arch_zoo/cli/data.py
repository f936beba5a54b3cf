"""`arch-zoo prepare` and `arch-zoo cache`: a corpus tokenized once into the shared token store (from
an experiment config, or from files with no config at all), and the cache's stores listed or removed."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from ..errors import ConfigError
from ..formatting import plural, si
from .common import cache_dir, cache_option

CONFIG_SUFFIXES = (".yaml", ".yml")
FILE_OPTIONS = {"tokenizer": "--tokenizer", "max_chars": "--max-chars", "text_field": "--text-field",
                "split_by": "--split-by", "dtype": "--dtype"}


def _flag_key(key: str) -> str:
    """A task option's key as the flag that sets it (``task.tokenizer.vocab_size`` -> ``--tokenizer``)."""
    head = key.split(".")[1] if key.startswith("task.") and "." in key else ""
    if head in FILE_OPTIONS:
        return FILE_OPTIONS[head]
    return key[len("task."):] if key.startswith("task.files") else key


def tokenizer_value(text: str):
    """``--tokenizer``: a registered name (char, byte), ``bpe:N`` (N tokens), or a tokenizer.json path
    (or the directory holding one)."""
    from ..data.tokenizers import TOKENIZERS

    names = [n for n in TOKENIZERS.choices() if n != "pretrained"]
    name, sep, size = text.partition(":")
    if sep and name in names:
        if "vocab_size" not in TOKENIZERS.get(name).option_fields():
            raise ConfigError("--tokenizer", f"'{name}' takes no vocabulary size; give it as '{name}'")
        if not size.isdigit():
            raise ConfigError("--tokenizer", f"expected {name}:N, N the vocabulary size (e.g. {name}:8192), got {text!r}")
        return {"name": name, "vocab_size": int(size)}
    if text in names:
        return text
    path = Path(text).expanduser()
    if path.is_file() or (path / "tokenizer.json").is_file():
        return {"name": "pretrained", "path": text}
    from ..data.tasks.corpus import keeps_every_character

    fits = [e for e in map(TOKENIZERS.get, names) if keeps_every_character(e.factory)]
    shown = [f"{e.name}:N" if "vocab_size" in e.option_fields() else e.name for e in fits]
    raise ConfigError("--tokenizer", f"'{text}' is neither a tokenizer nor a tokenizer file; choices: "
                      f"{', '.join(shown)}, PATH (a tokenizer.json)")


def _max_chars(text: str):
    if text == "auto":
        return "auto"
    if text == "all":
        return None
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise ConfigError("--max-chars", f"expected a positive number of characters, all or auto, got {text!r}")


def _file_options(args):
    from ..data.tasks import TASKS

    task = {"name": "char_lm", "files": list(args.inputs), "tokenizer": tokenizer_value(args.tokenizer or "char"),
            "max_chars": _max_chars(args.max_chars or "auto")}
    task.update({k: getattr(args, k) for k in ("text_field", "split_by", "dtype") if getattr(args, k) is not None})
    return TASKS.parse(task, "task").options


def _is_config(args) -> bool:
    file_mode = any(getattr(args, k) is not None for k in FILE_OPTIONS)
    rest = [a for a in args.inputs[1:] if "=" not in a]
    return not file_mode and not rest and args.inputs[0].endswith(CONFIG_SUFFIXES)


def _config_store(args, log, progress: bool):
    from ..data.tasks import TASKS
    from ..data.tasks.common import prepare_all
    from ..experiment import load

    overrides = list(args.inputs[1:]) + list(args.overrides)
    cfg = load(args.inputs[0], overrides)
    if cfg.task is None:
        raise ConfigError("task", "the config has no task; nothing to prepare")
    cache_dir(args)
    TASKS.get(cfg.task.name).factory.check(cfg.task.options, cfg.model.kind, cfg.model.max_seq_len)
    stores = prepare_all([cfg], log, progress=progress)
    if not stores:
        print(f"task '{cfg.task.name}' generates its data: nothing to prepare")
        return None
    return stores[0]


def _files_store(args, log, progress: bool):
    from ..data.prepare import prepare

    overrides = [a for a in args.inputs if "=" in a and not Path(a).exists()] + list(args.overrides)
    if overrides:
        raise ConfigError(overrides[0].split("=", 1)[0], "key=value overrides need an experiment config "
                          f"(prepare CONFIG.yaml {overrides[0]}); with corpus files use "
                          f"{', '.join(FILE_OPTIONS.values())}")
    try:
        options = _file_options(args)
        cache_dir(args)
        return prepare(options, log=log, progress=progress)
    except ConfigError as exc:  # the flags the user typed, not the task keys they map to
        raise ConfigError(_flag_key(exc.key), exc.message) from None


def _prepare(args) -> int:
    from ..data.progress import quiet, stderr_log

    log = quiet if args.quiet else stderr_log
    began = time.perf_counter()
    store = (_config_store if _is_config(args) else _files_store)(args, log, not args.quiet)
    if store is None:
        return 0
    if args.verify:
        store.verify()
    m = store.manifest
    tokens = ", ".join(f"{s} {m['splits'][s]['tokens']:,}" for s in ("train", "val", "test"))
    cpt = m["chars"] / max(sum(m["splits"][s]["tokens"] for s in m["splits"]), 1)
    done = ("cached" if store.built_seconds is None else f"prepared in {store.built_seconds:.1f}s")
    lines = [f"{done}: {store.root}",
             f"  {m['tokenizer']['name']} tokenizer, vocab {m['tokenizer']['vocab_size']:,}, {m['dtype']}; "
             f"tokens: {tokens}; {cpt:.3f} chars/token; {plural(len(m['sources']), 'source file')}"
             f"{'; shards verified' if args.verify else ''} ({time.perf_counter() - began:.2f}s)",
             f"  unigram loss {m['unigram_loss']:.4f} nats (the train split's token entropy: a model that predicts "
             "token frequencies alone)"]
    cut = store.cut()
    if cut:
        lines.append(f"  {cut}: the rest of the corpus is not in the store")
    print("\n".join(lines))
    return 0


def _root(args) -> Path:
    from ..data.store import cache_root

    return cache_root(args.cache_dir)


def _cache_list(args) -> int:
    from ..data.cache import contents

    root = _root(args)
    keys = contents(root)
    if not keys:
        print(f"{root}: no token stores")
        return 0
    stores = [k for k in keys.values() if k.store is not None]
    print(f"{root}: {plural(len(stores), 'store')}, {si(sum(k.size for k in keys.values()))}B")
    for k in keys.values():
        print("  " + _describe_key(k))
    return 0


def _describe_key(k) -> str:
    if k.busy:
        return f"{k.key}  building now (another process holds {k.lock.name})"
    if k.store is None:
        parts = ([f"{plural(len(k.temps), 'temporary directory', 'temporary directories')} of a build that did "
                  "not finish"] if k.temps else []) + ([f"stale lock {k.lock.name}"] if k.lock else [])
        return f"{k.key}  {', '.join(parts)} (cache clean removes them)"
    m = k.manifest
    if m is None:
        return f"{k.key}  {si(k.size)}B, unreadable manifest (cache clean removes it)"
    tokens = sum(s["tokens"] for s in m["splits"].values())
    files = m.get("files") or []
    what = m["corpus"] if m["corpus"] != "files" else (files[0] + (f" and {len(files) - 1} more" if len(files) > 1
                                                                      else "") if files else "files")
    extra = "" if k.current else "; an older format (not read any more)"
    stale = f"; stale lock {k.lock.name}" if k.lock else ""
    return (f"{k.key}  {si(k.size)}B, {m['tokenizer']['name']} vocab {m['tokenizer']['vocab_size']:,}, "
            f"{si(tokens)} tokens, {m.get('created', '?')}: {what}{extra}{stale}")


def _cache_clean(args) -> int:
    from ..data.cache import clean

    root = _root(args)
    done = clean(root, args.keys or None, stale_only=args.stale)
    for line in done.removed:
        print(f"removed {line}")
    for key in done.busy:
        print(f"left {key}: another process is building it (its lock is held)", file=sys.stderr)
    print(f"{root}: freed {si(done.freed)}B" if done.removed else f"{root}: nothing to remove")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("prepare", help="tokenize a corpus once into the shared token store (from a config or "
                       "from files)", description="arch-zoo prepare CONFIG.yaml [key=value ...] prepares what the "
                       "config's task reads; arch-zoo prepare FILE... [--tokenizer T] prepares files with no config "
                       "(the store a task with those files and tokenizer uses).")
    p.add_argument("inputs", nargs="+", metavar="CONFIG_OR_FILE",
                   help="an experiment YAML and key=value overrides, or corpus files, directories, globs, hf:NAME")
    p.add_argument("--tokenizer", default=None, help="with files: char (default), byte, bpe:N, or a "
                   "tokenizer.json path")
    p.add_argument("--max-chars", default=None, help="with files: read at most N characters (default auto: "
                   "the files whole; all: no limit)")
    p.add_argument("--text-field", default=None, help="with files: the JSON Lines / Parquet field of each "
                   "document's text (default text)")
    p.add_argument("--split-by", default=None, help="with files: text (default) or documents")
    p.add_argument("--dtype", default=None, help="with files: auto (default), uint16 or uint32")
    cache_option(p)
    p.add_argument("--verify", action="store_true", help="also hash every shard against the manifest")
    p.add_argument("--quiet", action="store_true", help="no progress")
    p.set_defaults(func=_prepare, overrides=[])

    p = sub.add_parser("cache", help="list or remove the token stores in the cache")
    actions = p.add_subparsers(dest="action", required=True, parser_class=type(p))
    a = actions.add_parser("list", help="every store: size, tokenizer, tokens, corpus; builds in progress, "
                           "stale lock files")
    cache_option(a)
    a.set_defaults(func=_cache_list)
    a = actions.add_parser("clean", help="remove stores (all, or the KEYs given), leftover temporary directories "
                           "and stale lock files; never one another process is building")
    a.add_argument("keys", nargs="*", metavar="KEY", help="only these stores (as `cache list` shows them)")
    a.add_argument("--stale", action="store_true", help="only temporary directories and stale lock files")
    cache_option(a)
    a.set_defaults(func=_cache_clean)
