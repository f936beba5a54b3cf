"""Rebuild a trained model from what a run left behind: a run directory or a checkpoint file."""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import List, NamedTuple

import torch

from .. import rundir
from ..config import ExperimentConfig
from ..config.layers import as_trained
from ..experiment import load
from ..config.plugins import available, changed_since
from ..data.tasks import TASKS
from ..data.tokenizers import TOKENIZER_FILE, Tokenizer, load_tokenizer
from ..errors import ConfigError
from ..models import TransformerModel, build_model


class Restored(NamedTuple):
    config: ExperimentConfig
    model: TransformerModel  # in eval mode, on the CPU
    tokenizer: Tokenizer


def restore(path) -> Restored:
    """(config, model in eval mode, tokenizer) from RUN_DIR or RUN_DIR/checkpoints/last.ckpt;
    public as ``arch_zoo.restore``. Needs no Lightning."""
    path = Path(path)
    ckpt = path / rundir.CHECKPOINT if path.is_dir() else path
    run_dir = path if path.is_dir() else ckpt.parent.parent
    if not ckpt.is_file():
        raise ConfigError("run", f"{path} is not a run directory or checkpoint (no {rundir.CHECKPOINT})")
    if not path.is_dir() and path.suffix != ".ckpt":
        raise ConfigError("run", f"{path} is a file but not a checkpoint (.ckpt); give a run directory or its "
                          f"{rundir.CHECKPOINT}")
    for needed in (run_dir / TOKENIZER_FILE, run_dir / rundir.CONFIG):
        if not needed.is_file():
            raise ConfigError("run", f"{needed} not found; is {path} an arch_zoo run directory or its "
                              f"{rundir.CHECKPOINT}?")
    recorded = (rundir.read_json(run_dir / rundir.STATUS) or {}).get("plugins")
    with as_trained(str(run_dir)):  # the config that trained: its layers as they were built
        cfg = load(run_dir / rundir.CONFIG, _kept_plugins(run_dir, recorded))
    for line in changed_since(recorded):
        warnings.warn(line, stacklevel=2)
    try:
        tokenizer = load_tokenizer(run_dir)
    except (ValueError, KeyError, TypeError, OSError) as exc:  # JSONDecodeError is a ValueError
        raise ConfigError("run", f"cannot read {run_dir / TOKENIZER_FILE}: {_first_line(exc)}") from None
    rows = cfg.model.vocab_size or tokenizer.vocab_size  # an import keeps its checkpoint's padded rows
    if rows < tokenizer.vocab_size:
        raise ConfigError("run", f"{run_dir / rundir.CONFIG} gives model.vocab_size {rows}, fewer than the "
                          f"{tokenizer.vocab_size} tokens of its tokenizer")
    model = build_model(cfg, rows)
    try:
        state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
        model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    except Exception as exc:  # noqa: BLE001 - unpickling and shape errors: all mean "not this run's checkpoint"
        raise ConfigError("run", f"cannot load {ckpt} into the model of {run_dir / rundir.CONFIG} "
                          f"({type(exc).__name__}: {_first_line(exc)})") from None
    return Restored(cfg, model.eval(), tokenizer)


def _kept_plugins(run_dir: Path, recorded) -> List[str]:
    """A ``plugins=[...]`` override that puts the run's copy (``rundir.plugin_copy``, found by the
    sha256 the run recorded) in place of each plugin that is no longer where the run imported it,
    with a warning each; no override when every plugin is still there (or the run kept no copy)."""
    import yaml

    try:
        named = (yaml.safe_load((run_dir / rundir.CONFIG).read_text()) or {}).get("plugins") or []
    except (yaml.YAMLError, ValueError, AttributeError):  # load() reports what is wrong with the file
        return []
    records = {r.get("plugin"): r for r in recorded if isinstance(r, dict)} if isinstance(recorded, list) else {}
    plugins, moved = [], False
    for plugin in named if isinstance(named, list) else []:
        copy = rundir.plugin_copy(run_dir, records[plugin]) if plugin in records else None
        if copy is not None and copy.is_file() and isinstance(plugin, str) and not available(plugin):
            warnings.warn(f"plugin {plugin} is not where the run imported it: using the copy the run kept, {copy}",
                          stacklevel=3)
            plugin, moved = str(copy), True
        plugins.append(plugin)
    return [f"plugins={json.dumps(plugins)}"] if moved else []


def _first_line(exc: BaseException, limit: int = 100) -> str:
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return line if len(line) <= limit else line[:limit - 3] + "..."


def prompt_ids(cfg: ExperimentConfig, tokenizer: Tokenizer, text: str) -> list:
    """Token ids of a prompt laid out as the run's task laid out its inputs (the task declares it:
    ``Task.encode_prompt``); plain text for a run without a task. A run imported from Hugging Face
    (its tokenizer keeps the checkpoint's declared tokens) encodes it as ``tokenizer(prompt)`` and
    Hugging Face's pipelines do: with what the tokenizer's post-processor adds (T5's </s> after a
    source, Llama's <s> before a prompt), which the checkpoint was trained to see."""
    if cfg.task is None:
        if getattr(tokenizer, "declared", None) is not None:
            return tokenizer.encode(text, add_special_tokens=True)
        return tokenizer.encode(text)
    return TASKS.get(cfg.task.name, "task").factory.encode_prompt(tokenizer, text, cfg.model.kind)
