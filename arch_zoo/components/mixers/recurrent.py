"""What every fixed-state mixer shares: its decoding state is a ``RecurrentState`` of named tensors
whose shapes it declares (``state_shapes``), the same whatever the context length."""
from __future__ import annotations

import importlib.util
import math
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ..state import DecodingState, RecurrentState
from .base import Mixer, MixerInputs


class RecurrentMixer(Mixer):
    stacks = ("decoder",)

    def state_shapes(self, batch: int) -> Dict[str, Tuple[int, ...]]:
        raise NotImplementedError

    def new_state(self) -> DecodingState:
        return RecurrentState()

    def static_state(self, batch, columns, dtype, device, column) -> DecodingState:
        return RecurrentState(self.state_shapes(batch), dtype, device)

    def state_elements(self, context: int) -> int:
        return sum(math.prod(shape) for shape in self.state_shapes(1).values())


def read(state: Optional[DecodingState], name: str) -> Optional[Tensor]:
    return None if state is None else state.read(name)


def write(state: Optional[DecodingState], name: str, value: Tensor) -> None:
    if state is not None:
        state.write(name, value)


def initialised(n: int, values: Callable[[], Tensor]) -> nn.Parameter:
    """A parameter of ``n`` values computed on the CPU by ``values()`` (a log-uniform step size, say)
    and moved to where the model is built; a meta build (``describe`` counting a 7B preset) keeps no
    values, so computes none."""
    p = nn.Parameter(torch.empty(n))
    if not p.is_meta:
        with torch.no_grad():
            p.copy_(values())
    return p


def wide(t: Tensor) -> Tensor:
    """``t`` in float32 at least (recurrences accumulate over many positions), float64 kept."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def keep_mask(inputs: MixerInputs, x: Tensor) -> Optional[Tensor]:
    """(B, L, 1) 1 at real tokens, 0 at padding, in x's dtype; None without padding."""
    return None if inputs.tokens is None else inputs.tokens.unsqueeze(-1).to(x.dtype)


def check_kernel(kernel: str, module: str, package: str) -> None:
    """A mixer option ``kernel`` other than "torch" names an optional package's GPU kernels; without the
    package it is one error saying what to install, naming the option (the registry prefixes the
    mixer's key). (The kernels are not wired in yet: the torch path is the function every mixer is
    tested by.)"""
    if kernel == "torch":
        return
    if importlib.util.find_spec(module) is None:
        raise ConfigError("kernel", f"'{kernel}' needs the {package} package (pip install {package}, GPU only); "
                                    f"kernel: torch runs everywhere")
    raise ConfigError("kernel", f"'{kernel}' is not wired into arch_zoo yet; kernel: torch computes the same function")


def renamed(state: Dict[str, Tensor], prefixes: Dict[str, str]) -> Dict[str, Tensor]:
    """The state dict ``state`` (a Hugging Face layer's, say) with each key's module prefix (the part
    before the last dot, "" for none) mapped by ``prefixes`` (a prefix not in it kept)."""
    out = {}
    for key, value in state.items():
        module, _, leaf = key.rpartition(".")
        module = prefixes.get(module, module)
        out[f"{module}.{leaf}" if module else leaf] = value
    return out
