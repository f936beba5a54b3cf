"""``build_model``: a resolved model config in, the model of its kind out.

Whatever a user hands in (``preset:NAME``, a YAML path, a mapping, a ModelConfig, an ExperimentConfig)
is validated and resolved once, by ``resolved_model``, at the top; from there the kind's model class
builds its stacks from the resolved per-layer configs. The classes register under their kind's name
(``model_kind``), so this module names none of them and ``transformer`` can re-export ``build_model``."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, Mapping, Optional, Union

from torch import nn

from ..config import ExperimentConfig, ModelConfig
from ..config.loading import resolved_model
from ..config.schema import ResolvedModel
from ..errors import ConfigError
from .renamed_keys import for_transformers

MODEL_KINDS: Dict[str, type] = {}  # model kind -> the class that builds it (transformer.py fills it)


def model_kind(name: str) -> Callable[[type], type]:
    """Register the decorated class as the model of kind ``name`` (a row of ``config.kinds.KINDS``)."""
    def register(cls: type) -> type:
        MODEL_KINDS[name] = cls
        return cls

    return register


def build_model(cfg: Union[ResolvedModel, ModelConfig, ExperimentConfig, Mapping, str, Path],
                vocab_size: Optional[int] = None) -> nn.Module:
    """A pure function of the config: the same config (and seed) rebuilds the same model. ``cfg`` is a
    ResolvedModel, or anything the CLI takes as a model: ``preset:NAME``, a YAML path, a mapping
    (``base:`` allowed), a ModelConfig or an ExperimentConfig."""
    resolved = resolved_model(cfg)
    vocab_size = vocab_size if vocab_size is not None else resolved.config.vocab_size
    if vocab_size is None:
        raise ConfigError("vocab_size", "is unknown: pass it to build_model or set model.vocab_size")
    for_transformers()  # a remote-code export's modelling file builds through here, then transformers loads it
    return MODEL_KINDS[resolved.config.kind](resolved, vocab_size)


def embedding_rows(config: ModelConfig, tokenizer) -> int:
    """The vocabulary rows a model of ``config`` is built with beside ``tokenizer``: ``model.vocab_size``
    when set, else the tokenizer's size. A checkpoint published with rows past its tokenizer (t5-small,
    Pythia, Qwen3; ``arch-zoo import`` keeps them) trains with them as Hugging Face trains it: every row
    in the softmax, none ever a target (no token id reaches them). A vocabulary fitted here has no such
    padding: a vocab_size other than its size is a mistake (a preset's 50257 beside a char task)."""
    size = tokenizer.vocab_size
    rows = config.vocab_size or size
    if rows < size or (rows > size and not tokenizer.published):
        more = "fewer than" if rows < size else "more than (only a published tokenizer's checkpoints pad rows)"
        raise ConfigError("model.vocab_size", f"is {rows}, {more} the {size} tokens of the task's "
                          "tokenizer; leave it null to take the tokenizer's")
    return rows
