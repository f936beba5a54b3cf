"""Helpers every built-in task shares: the tokenizer option, size checks and distinct sampling."""
from __future__ import annotations

import json
import random
from typing import Any, Callable, Hashable, Iterable, List, Optional, Sequence, Type

from ...coerce import to_dict
from ...errors import ConfigError
from ...registry import ComponentSpec
from ..prepare import Log
from ..store import TokenStore
from ..tokenizers import TOKENIZERS, Tokenizer, parse_tokenizer
from .base import TASKS

SPLITS = ("train", "val", "test")


# What a task needs of a tokenizer, asked of its class (its declared capabilities), never of its name.
Fits = Callable[[Type[Tokenizer]], bool]


def tokenizer_class(spec: ComponentSpec) -> Type[Tokenizer]:
    return TOKENIZERS.get(spec.name).factory


def _misfit(spec: ComponentSpec, fits: Optional[Fits], why: str) -> Optional[str]:
    if fits is None or fits(tokenizer_class(spec)):
        return None
    choices = [e.name for e in TOKENIZERS.entries() if fits(e.factory)]
    return f"'{spec.name}' does not fit this task{why}; choices: {', '.join(choices)}"


def validate_tokenizer(value: Any, fits: Optional[Fits] = None, why: str = "") -> None:
    """For an options ``__post_init__``: a ConfigError keyed relative to the options ('tokenizer');
    the registry prefixes it with the component's key ('task.tokenizer')."""
    spec = parse_tokenizer(value, "tokenizer")  # an error keeps its option's key: tokenizer.vocab_size
    problem = _misfit(spec, fits, why)
    if problem:
        raise ConfigError("tokenizer", problem)


def check_tokenizer(value: Any, key: str, fits: Optional[Fits] = None, why: str = "") -> ComponentSpec:
    """For ``Task.check``: the same test, raised as a ConfigError at ``{key}.tokenizer``."""
    spec = parse_tokenizer(value, f"{key}.tokenizer")
    problem = _misfit(spec, fits, why)
    if problem:
        raise ConfigError(f"{key}.tokenizer", problem)
    return spec


def fit_tokenizer(value: Any, train_texts: Iterable[str]) -> Tokenizer:
    """Build the named tokenizer and fit it on the training text only."""
    return TOKENIZERS.build(parse_tokenizer(value)).fit(train_texts)


def positive(name: str, value: int, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_lengths_and_sizes(options) -> None:
    """The options every generated task shares: a min_len..max_len range and three split sizes."""
    positive("min_len", options.min_len)
    positive("max_len", options.max_len)
    if options.max_len < options.min_len:
        raise ValueError(f"max_len ({options.max_len}) must be >= min_len ({options.min_len})")
    for name in ("n_train", "n_val", "n_test"):
        positive(name, getattr(options, name))


def check_fits(need: int, max_seq_len: int, key: str, what: str) -> None:
    """ConfigError when a sequence of ``need`` tokens cannot fit the model."""
    if need > max_seq_len:
        raise ConfigError(key, f"{what} need {need} tokens, more than the model's max_seq_len {max_seq_len}")


def sample_distinct(rng: random.Random, draw: Callable[[], Hashable], n: int, what: str,
                    exclude: Iterable[Hashable] = ()) -> List[Hashable]:
    """``n`` distinct values from ``draw()`` (rejection sampling), none of them in ``exclude``."""
    seen = set(exclude)
    out: List[Hashable] = []
    budget = 50 * n + 10_000
    while len(out) < n:
        if budget == 0:
            raise ConfigError("task", f"could not draw {n} distinct {what} (found {len(out)}); the options "
                              "leave too few possibilities: allow longer sequences or ask for fewer examples")
        budget -= 1
        value = draw()
        if value not in seen:
            seen.add(value)
            out.append(value)
    return out


def split_counts(options) -> dict:
    return {"train": options.n_train, "val": options.n_val, "test": options.n_test}


def deal(pool: Sequence, counts: dict) -> dict:
    """Cut a shuffled pool into consecutive, disjoint splits of the given sizes."""
    out, start = {}, 0
    for split, n in counts.items():
        out[split] = list(pool[start:start + n])
        start += n
    return out


def prepare_all(configs, log: Log = lambda line: None, progress: bool = True) -> List[TokenStore]:
    """Each distinct token store the configs' tasks read, prepared once (a sweep, before it dispatches);
    ``progress``: a bar on a terminal, else a line every few seconds, through ``log``."""
    seen, out = set(), []
    for cfg in configs:
        if cfg.task is None:
            continue
        ident = json.dumps(to_dict(cfg.task), sort_keys=True, default=str)
        if ident in seen:
            continue
        seen.add(ident)
        store = TASKS.get(cfg.task.name).factory.prepare(cfg.task.options, log=log, progress=progress)
        if store is not None and store.root not in [s.root for s in out]:
            out.append(store)
    return out
