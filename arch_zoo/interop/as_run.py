"""An imported model as a run directory, so that what reads runs (``restore``, ``generate``,
``arch-zoo eval``, reports) reads it too: config.yaml (the model's config, no task), the tokenizer,
checkpoints/last.ckpt (the weights as a trained run stores them) and a completed status.json."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import torch

from .. import rundir
from ..config import ExperimentConfig
from ..config.loading import save
from ..errors import ConfigError


def save_as_run(model: torch.nn.Module, tokenizer, out, name: Optional[str] = None, source: str = "") -> Path:
    """Write ``model`` (an arch_zoo model, e.g. from ``from_hf``) and ``tokenizer`` (an arch_zoo
    tokenizer, e.g. ``pretrained`` on the checkpoint's tokenizer.json) as run directory ``out``.
    The model may have more embedding rows than the tokenizer has tokens, as published checkpoints
    pad them (t5-small: 32,128 rows for 32,100 tokens): config.yaml then records the rows as
    ``model.vocab_size``, restore builds them all, and decoding never emits an id past the
    tokenizer's. ``source`` (e.g. the checkpoint's path) is recorded in status.json."""
    out = Path(out)
    if (out / rundir.CHECKPOINT).exists():
        raise ConfigError("out", f"{out} already holds a run ({rundir.CHECKPOINT})")
    if tokenizer.vocab_size > model.vocab_size:
        raise ConfigError("tokenizer", f"has {tokenizer.vocab_size} tokens but the model's embedding has "
                          f"{model.vocab_size} rows: ids {model.vocab_size}..{tokenizer.vocab_size - 1} have none")
    config = model.config
    if model.vocab_size != tokenizer.vocab_size:  # rows past the tokenizer (t5, Pythia, Qwen): the config keeps them
        config = dataclasses.replace(config, vocab_size=model.vocab_size)
    (out / rundir.CHECKPOINTS).mkdir(parents=True, exist_ok=True)
    save(ExperimentConfig(name=name or out.name, model=config), out / rundir.CONFIG)
    tokenizer.save(out)
    state = {"state_dict": {f"model.{k}": v.detach().cpu() for k, v in model.state_dict().items()},
             "global_step": 0}
    tmp = out / f"{rundir.CHECKPOINT}.tmp"
    torch.save(state, tmp)
    tmp.replace(out / rundir.CHECKPOINT)
    rundir.set_status(out, "completed", reason=f"imported{' from ' + source if source else ''}", step=0)
    return out


def import_hf(path, out, name: Optional[str] = None, force: bool = False) -> Path:
    """A local Hugging Face checkpoint directory (config.json, safetensors, tokenizer.json) as run
    directory ``out``, written whole or not at all."""
    from .atomic_dir import atomic_dir, check_out
    from .checkpoint import read_checkpoint_config
    from .hf import load_hf_checkpoint
    from .hf_tokenizer import hf_tokenizer

    out = check_out(out, force)
    model = load_hf_checkpoint(path)
    tokenizer = hf_tokenizer(path, read_checkpoint_config(path))
    with atomic_dir(out, force) as tmp:
        save_as_run(model, tokenizer, tmp, name=name or out.name, source=str(path))
    return out
