"""Mixers side by side in one layer (Falcon-H1: attention and Mamba-2 in every layer): each branch
reads the layer's normed input, scaled by its input multiplier, and the branches' outputs, each scaled
by its output multiplier, are summed into the residual. It is data of the layer spec,
``mixer: {name: parallel, branches: [attention, {name: mamba2, state_size: 16}]}``, so ``model.layers``
may hold it in some layers only. Each branch is the registered mixer it names, built from the layer's
config (an attention branch reads the model's heads and attention keys), so nothing else learns it.

Its decoding state is the tuple of its branches' states (``ParallelState``); its FLOPs and state size
are the sums of theirs, and it serves the stacks every branch serves."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from torch import Tensor, nn

from ...coerce import ComponentSpec
from ...errors import ConfigError
from ..state import DecodingState
from .attention import reads_attention_keys, rotary_dim, score_width
from .base import MIXERS, STACKS, Mixer, MixerInputs

NAME = "parallel"


@dataclass(frozen=True)
class ParallelOptions:
    branches: Tuple[Any, ...] = ("attention", "mamba2")  # the mixers side by side, each a name or {name, <options>}
    in_multipliers: Optional[Tuple[float, ...]] = None  # one per branch: its input scaled (null: 1 each)
    out_multipliers: Optional[Tuple[float, ...]] = None  # one per branch: its output scaled (null: 1 each)

    def __post_init__(self):
        if len(self.branches) < 2:
            raise ConfigError("branches", f"a parallel layer needs at least two mixers, got {len(self.branches)}; "
                                          f"mixers: {', '.join(n for n in MIXERS.choices() if n != NAME)}")
        specs = tuple(MIXERS.parse(b, f"branches.{i}") for i, b in enumerate(self.branches))
        for i, spec in enumerate(specs):
            if spec.name == NAME:
                raise ConfigError(f"branches.{i}", "a branch cannot itself be parallel: list its mixers as branches; "
                                                   f"mixers: {', '.join(n for n in MIXERS.choices() if n != NAME)}")
        object.__setattr__(self, "branches", specs)
        for name in ("in_multipliers", "out_multipliers"):
            given = getattr(self, name)
            if given is not None and len(given) != len(specs):
                raise ConfigError(name, f"{len(given)} multipliers for {len(specs)} branches "
                                        f"({', '.join(s.name for s in specs)}): give one per branch, or null")

    def multipliers(self, name: str) -> Tuple[float, ...]:
        return getattr(self, name) or (1.0,) * len(self.branches)


def _factories(options: ParallelOptions) -> List[type]:
    return [MIXERS.get(b.name).factory for b in options.branches]


def _attending(options: ParallelOptions) -> Optional[ComponentSpec]:
    """The first branch that reads the model's attention keys (its head width is the layer's)."""
    return next((b for b, f in zip(options.branches, _factories(options)) if reads_attention_keys(f)), None)


class ParallelState(DecodingState):
    """The branches' states, one each, in branch order."""

    def __init__(self, parts):
        self.parts = tuple(parts)

    def reorder(self, index: Tensor) -> None:
        for part in self.parts:
            part.reorder(index)

    def tensors(self) -> List[Tensor]:
        return [t for part in self.parts for t in part.tensors()]

    def load(self, eager: DecodingState, seen: Optional[int]) -> None:
        for part, other in zip(self.parts, eager.parts):
            part.load(other, seen)

    @property
    def nbytes(self) -> int:
        return sum(part.nbytes for part in self.parts)


@MIXERS.register(NAME, ParallelOptions, "mixers side by side in one layer (Falcon-H1: attention and Mamba-2): "
                 "each reads the normed input, their outputs are summed, each scaled by its multiplier")
class Parallel(Mixer):
    stacks = STACKS  # as far as its branches serve them (``stacks_of``)
    # it may hold an attention branch, which reads the model's attention keys (a model none of whose
    # layers attends refuses them: a parallel layer without one lets them pass unread)
    reads_attention_keys = True
    reads_model_heads = True
    example_options = {"branches": ["attention", {"name": "mamba2", "state_size": 4, "conv_size": 3, "chunk_size": 4}],
                       "in_multipliers": [0.5, 1.0], "out_multipliers": [1.0, 2.0]}

    def __init__(self, options: ParallelOptions, cfg, ctx=None):
        super().__init__()
        self.branches = nn.ModuleList(MIXERS.build(b, cfg, ctx) for b in options.branches)
        self.ins, self.outs = options.multipliers("in_multipliers"), options.multipliers("out_multipliers")

    @classmethod
    def stacks_of(cls, options: ParallelOptions) -> Tuple[str, ...]:
        served = [f.stacks_of(b.options) for b, f in zip(options.branches, _factories(options))]
        return tuple(s for s in STACKS if all(s in each for each in served))

    @classmethod
    def check(cls, options: ParallelOptions, cfg, key: str) -> None:
        for b, factory in zip(options.branches, _factories(options)):
            factory.check(b.options, cfg, key)

    @classmethod
    def resolved_options(cls, options: ParallelOptions, cfg):
        branches = tuple(ComponentSpec(b.name, f.resolved_options(b.options, cfg))
                         for b, f in zip(options.branches, _factories(options)))
        return ParallelOptions(branches, options.multipliers("in_multipliers"), options.multipliers("out_multipliers"))

    @classmethod
    def rotary_dim(cls, options: ParallelOptions, cfg) -> int:
        b = _attending(options)
        return cfg.dim_per_head if b is None else rotary_dim(MIXERS.get(b.name).factory, b.options, cfg)

    @classmethod
    def score_width(cls, options: ParallelOptions, cfg):
        b = _attending(options)
        return (cfg.dim_per_head, "head_dim") if b is None else score_width(MIXERS.get(b.name).factory, b.options, cfg)

    def forward(self, x: Tensor, inputs: MixerInputs, state: Optional[ParallelState] = None) -> Tensor:
        out = None
        for i, (branch, a, b) in enumerate(zip(self.branches, self.ins, self.outs)):
            y = branch(x if a == 1 else x * a, inputs, None if state is None else state.parts[i])
            y = y if b == 1 else y * b
            out = y if out is None else out + y
        return out

    def new_state(self) -> DecodingState:
        return ParallelState(b.new_state() for b in self.branches)

    def static_state(self, batch, columns, dtype, device, column) -> DecodingState:
        return ParallelState(b.static_state(batch, columns, dtype, device, column) for b in self.branches)

    def static_unsupported(self) -> Optional[str]:
        return next((why for why in (b.static_unsupported() for b in self.branches) if why), None)

    def mixing_flops(self, length: int, causal: bool) -> float:
        return sum(b.mixing_flops(length, causal) for b in self.branches)

    def step_mixing_flops(self, context: int) -> float:
        return sum(b.step_mixing_flops(context) for b in self.branches)

    def state_elements(self, context: int) -> int:
        return sum(b.state_elements(context) for b in self.branches)
