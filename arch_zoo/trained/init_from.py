"""``train.init_from``: a run that starts from another run's weights (fine-tuning, continued
pre-training), as Hugging Face's ``from_pretrained`` starts one. Not a resume (Lightning's
``ckpt_path``): only the model's tensors are taken; the optimizer, the step and the schedule start
fresh, and a rerun into the same --out resumes from that run's own checkpoint, not the source's."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional

import torch
from torch import nn

from .. import rundir
from ..errors import ConfigError
from ..models.renamed_keys import renamed_model_keys
from .restore import _first_line

KEY = "train.init_from"
_GIVE = f"give a run directory (trained or imported by `arch-zoo import`) or its {rundir.CHECKPOINT}"


class InitialWeights(NamedTuple):
    weights: Dict[str, torch.Tensor]  # the model's tensors under today's names
    record: Dict[str, Any]  # summary.json's and status.json's ``init_from``: where they came from

    def load_into(self, model: nn.Module) -> None:
        model.load_state_dict(self.weights, strict=True)


def source_checkpoint(path: str) -> Path:
    """The checkpoint ``train.init_from`` names: RUN_DIR/checkpoints/last.ckpt, or a .ckpt file."""
    given = Path(path).expanduser()
    if not given.exists():
        raise ConfigError(KEY, f"{given} does not exist; {_GIVE}")
    ckpt = given / rundir.CHECKPOINT if given.is_dir() else given
    if given.is_dir() and not ckpt.is_file():
        raise ConfigError(KEY, f"{given} holds no run (no {rundir.CHECKPOINT}); {_GIVE}")
    if not given.is_dir() and given.suffix != ".ckpt":
        raise ConfigError(KEY, f"{given} is a file but not a checkpoint (.ckpt); {_GIVE}")
    return ckpt.resolve()


def initial_weights(path: str, model: nn.Module) -> InitialWeights:
    """The source's tensors, checked to fit ``model`` (the model this run's config builds) strictly:
    every tensor present, none extra, each of the same shape; else a ConfigError naming the first
    tensor that differs, before anything is written."""
    ckpt = source_checkpoint(path)
    try:
        saved = torch.load(ckpt, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - unpickling, zip and truncation errors alike
        raise ConfigError(KEY, f"cannot read {ckpt} ({type(exc).__name__}: {_first_line(exc)}); {_GIVE}") from None
    state = saved.get("state_dict") if isinstance(saved, dict) else None
    if not isinstance(state, dict):
        raise ConfigError(KEY, f"{ckpt} holds no model weights (no state_dict); {_GIVE}")
    weights = renamed_model_keys({k.removeprefix("model."): v for k, v in state.items()})
    _check_fits(ckpt, weights, model.state_dict())
    run = ckpt.parent.parent if ckpt.parent.name == rundir.CHECKPOINTS else None
    record = {"path": str(ckpt), "run": str(run) if run is not None else None, "step": saved.get("global_step")}
    return InitialWeights(weights, record)


def _check_fits(ckpt: Path, theirs: Dict[str, torch.Tensor], ours: Dict[str, torch.Tensor]) -> None:
    for key, tensor in ours.items():
        if key not in theirs:
            raise ConfigError(KEY, f"{ckpt} has no tensor {key} (shape {list(tensor.shape)} in this config's "
                              "model); the source is another architecture")
        if theirs[key].shape != tensor.shape:
            raise ConfigError(KEY, f"tensor {key} is {list(theirs[key].shape)} in {ckpt} but "
                              f"{list(tensor.shape)} in this config's model; the source is another architecture "
                              "or vocabulary size")
    extra: Optional[str] = next((k for k in theirs if k not in ours), None)
    if extra is not None:
        raise ConfigError(KEY, f"{ckpt} has tensor {extra} (shape {list(theirs[extra].shape)}), which this "
                          "config's model lacks; the source is another architecture")
