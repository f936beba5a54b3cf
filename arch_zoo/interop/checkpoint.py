"""Checked weight loading, shared by every converter.

A converter renames a reference state dict through a ``WeightMap`` (which remembers what it took,
so nothing in the checkpoint is silently dropped); ``load_checked`` copies the result into a model
after checking that every tensor is there, has the model's shape, and that tied parameters receive
one value. Errors are one line and name the tensor.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..coerce import to_dict
from ..config.loading import _merge, model_config
from ..errors import ConfigError


class CheckpointError(ConfigError):
    """A checkpoint cannot be read or does not fit the model. ``key`` is the path or tensor name."""


class CheckpointMismatchError(CheckpointError):
    """A tensor's shape differs between the checkpoint and the model."""

    def __init__(self, tensor: str, checkpoint_shape: Tuple[int, ...], model_shape: Tuple[int, ...],
                 source: Optional[str] = None):
        self.tensor, self.checkpoint_shape, self.model_shape = tensor, checkpoint_shape, model_shape
        where = f" (from checkpoint tensor '{source}')" if source and source != tensor else ""
        super().__init__(tensor, f"shape {tuple(checkpoint_shape)} in the checkpoint{where} but "
                                 f"{tuple(model_shape)} in the model; the checkpoint's architecture does not "
                                 f"match the config")


class WeightMap:
    """Renames a reference state dict into arch_zoo names, remembering where each tensor came from.

    ``copy``/``fuse`` map what the checkpoint has and skip what it lacks: ``load`` then reports the
    first arch_zoo tensor left without a value, and any checkpoint tensor nobody took."""

    def __init__(self, tensors: Mapping[str, Tensor], ignore: Iterable[str] = ()):
        self.tensors = dict(tensors)
        self.ignore = [re.compile(p) for p in ignore]  # full-match patterns with no arch_zoo counterpart
        self.taken: set = set()
        self.out: Dict[str, Tensor] = {}
        self.sources: Dict[str, str] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def take(self, name: str) -> Tensor:
        self.taken.add(name)
        return self.tensors[name]

    def copy(self, dst: str, src: str, fn: Optional[Callable[[Tensor], Tensor]] = None) -> None:
        if src in self.tensors:
            value = self.take(src)
            self.out[dst], self.sources[dst] = (fn(value) if fn else value), src

    def alias(self, dst: str, src: str) -> None:
        """``src`` names the same tensor as the one mapped to ``dst`` (Hugging Face saves some tied
        tensors under several names); it must hold the same values."""
        if src in self.tensors:
            value = self.take(src)
            if dst not in self.out:
                self.out[dst], self.sources[dst] = value, src
            elif not torch.equal(self.out[dst], value):
                raise CheckpointError(src, f"differs from '{self.sources[dst]}', which it should equal")

    def fuse(self, dst: str, srcs: Sequence[str]) -> None:
        """Concatenate along dim 0 (separate q, k, v -> fused qkv), when the checkpoint has them all."""
        if all(s in self.tensors for s in srcs):
            self.out[dst] = torch.cat([self.take(s) for s in srcs])
            self.sources[dst] = " + ".join(srcs)

    def unused(self) -> Dict[str, Tuple[int, ...]]:
        """Checkpoint tensors nobody took (and no ignore pattern covers), with their shapes."""
        return {k: tuple(v.shape) for k, v in self.tensors.items()
                if k not in self.taken and not any(p.fullmatch(k) for p in self.ignore)}

    def load(self, model: nn.Module) -> nn.Module:
        return load_checked(model, self.out, self.sources, self.unused())


def load_checked(model: nn.Module, state: Mapping[str, Tensor], sources: Optional[Mapping[str, str]] = None,
                 unused: Optional[Mapping[str, Tuple[int, ...]]] = None) -> nn.Module:
    """Copy ``state`` into ``model``; raise CheckpointError at the first tensor that does not fit.

    A tied parameter (one tensor under several names) may be given under any of its names; given
    under several, the values must agree. ``unused`` are checkpoint tensors that found no place.
    Everything is checked before anything is copied."""
    sources = dict(sources or {})
    targets = model.state_dict(keep_vars=True)
    for name in state:
        if name not in targets:
            raise CheckpointError(name, f"the model has no tensor of this name (from checkpoint tensor "
                                        f"'{sources.get(name, name)}')")
    groups: Dict[int, List[str]] = {}
    for name, tensor in targets.items():
        groups.setdefault(id(tensor), []).append(name)
    plan = []
    for names in groups.values():
        target = targets[names[0]]
        given = [n for n in names if n in state]
        for n in given:
            if tuple(state[n].shape) != tuple(target.shape):
                raise CheckpointMismatchError(n, tuple(state[n].shape), tuple(target.shape), sources.get(n))
        if not given:
            raise CheckpointError(names[0], f"missing from the checkpoint (the model expects shape "
                                            f"{tuple(target.shape)}); the checkpoint's architecture does not "
                                            f"match the config")
        first = state[given[0]]
        for n in given[1:]:
            if not torch.equal(first.to(state[n].dtype), state[n]):
                raise CheckpointError(n, f"tied to '{given[0]}' in the model but different in the checkpoint "
                                         f"(untie them in the config: tie_embeddings: false for the output "
                                         f"projection, tie_encoder_decoder_embeddings: false for the decoder's)")
        plan.append((target, first))
    if unused:
        name, shape = next(iter(unused.items()))
        raise CheckpointError(name, f"the model has no place for this checkpoint tensor (shape {shape}); "
                                    f"the checkpoint's architecture does not match the config")
    with torch.no_grad():
        for target, value in plan:
            target.copy_(value.to(target.dtype))
    return model


ConfigLike = Union[str, Mapping[str, Any], ModelConfig, None]


def resolve_config(derived: Mapping[str, Any], config: ConfigLike = None,
                   changes: Optional[Mapping[str, Any]] = None) -> ModelConfig:
    """The architecture to load into: ``config`` (``preset:NAME``, a YAML path, a mapping or a
    ModelConfig) or else the one ``derived`` from the reference, with ``changes`` merged on top."""
    base = dict(derived) if config is None else to_dict(model_config(config))
    return model_config(_merge(ModelConfig, base, dict(changes)) if changes else base)


# --------------------------------------------------------------------------- checkpoint directories

WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"


def read_checkpoint_config(path) -> dict:
    """config.json of a local Hugging Face checkpoint directory, checking that it is one."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise CheckpointError(str(path), "not a directory; expected a Hugging Face checkpoint directory "
                                         "(config.json + model.safetensors)")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError(str(path), "not a Hugging Face checkpoint directory: it has no config.json")
    try:
        config = json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(str(config_file), f"not valid JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise CheckpointError(str(config_file), "must hold a JSON object")
    return config


def read_checkpoint_weights(path) -> Dict[str, Tensor]:
    """Every tensor of a checkpoint directory's model.safetensors (or its shards); no network."""
    path = Path(path).expanduser()
    if (path / WEIGHTS).is_file():
        files = [path / WEIGHTS]
    elif (path / WEIGHTS_INDEX).is_file():  # sharded
        try:
            index = json.loads((path / WEIGHTS_INDEX).read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise CheckpointError(str(path / WEIGHTS_INDEX), "not a safetensors index (no weight_map)") from None
        files = [path / f for f in dict.fromkeys(index.values())]
    else:
        raise CheckpointError(str(path), f"has config.json but no {WEIGHTS} (or {WEIGHTS_INDEX}); only "
                                         f"safetensors checkpoints are read")
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    tensors: Dict[str, Tensor] = {}
    for file in files:
        try:
            tensors.update(load_file(str(file)))
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(str(file), f"cannot read safetensors file ({str(exc).splitlines()[0]})") from None
    return tensors


def read_checkpoint_dir(path) -> Tuple[dict, Dict[str, Tensor]]:
    """(config.json as a dict, all tensors) of a local Hugging Face checkpoint directory."""
    return read_checkpoint_config(path), read_checkpoint_weights(path)
