"""What a component of each family is: the class to subclass (or none), how the package builds it and
what it calls on it. ``arch_zoo.testing`` exports these; ``check_interface`` holds a component to
its family's, and the docs' table of families (docs/how-to/own-component.md) is checked against them.

Every family's factory takes its options dataclass first, then the context the package passes:
``Registry.build(spec, *context)`` calls ``factory(options, *context)``."""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from .experiment import all_registries


@dataclass(frozen=True)
class Interface:
    family: str
    base: Optional[str]  # the class to subclass, as an import path; None: any class (or function) will do
    context: Tuple[str, ...]  # what the package passes after the options, in order
    builds: str  # what the call returns and what the package then calls on it
    attributes: Tuple[str, ...] = ()  # class attributes the package reads ("a|b": either), which a component sets

    @property
    def signature(self) -> str:
        return f"({', '.join(('options',) + self.context)})"

    def base_class(self) -> Optional[type]:
        if self.base is None:
            return None
        module, _, name = self.base.rpartition(".")
        return getattr(importlib.import_module(module), name)


def _interfaces(*items: Interface) -> Dict[str, Interface]:
    return {i.family: i for i in items}


INTERFACES = _interfaces(
    Interface("positions", "arch_zoo.components.positions.PositionScheme", ("ctx: PositionContext",),
              "an nn.Module with any of embed(x, pos), rotate(q, k, q_pos, k_pos) and score_bias(q_pos, k_pos, "
              "cross), each a no-op by default; ctx: n_heads, head_dim, d_model, max_seq_len, causal"),
    Interface("norms", None, ("dim: int",),
              "an nn.Module normalising the last dimension of (..., dim): forward(x) -> x's shape"),
    Interface("placements", "arch_zoo.components.placements.Placement", ("ctx: LayerContext",),
              "an nn.Module of its layer: norm_slots(index) names the norms sublayer index needs; "
              "pre(slot, x) is what a sublayer reads, post(slot, x, y) the residual stream after its output y "
              "(or forward(x, slots, branches) combines them itself)"),
    Interface("mixers", "arch_zoo.components.mixers.base.Mixer", ("cfg: ModelConfig", "ctx: LayerContext"),
              "forward(x, inputs, state) -> x's shape (inputs: MixerInputs, state: its own decoding state or "
              "None); stacks it serves, new_state() / static_state(...), mixing_flops(length, causal), "
              "step_mixing_flops(context), state_elements(context) (docs/how-to/own-mixer.md)"),
    Interface("attention", "arch_zoo.components.attention_patterns.AttentionPattern", (),
              "restrict(mask, q_len, k_len, device) narrows a self-attention layer's mask; cache_keep() "
              "and visible_keys(seq_len, causal) say what decoding keeps and FLOP counts see"),
    Interface("attention_kernel", "arch_zoo.components.attention.Backend",
              ("scale: Optional[float]", "softcap: Optional[float]"),
              "__call__(q, k, v, mask, dropout) -> (output, weights or None) on (B, H, L, D); "
              "every kernel must compute the same function"),
    Interface("feedforward", None, ("ctx: FFNContext",),
              "an nn.Module: forward(x) -> x's shape; ctx: d_model, d_ff, bias, dropout; class attribute "
              "gated: True for three d_model x d_ff matrices (the default d_ff is then 8/3 * d_model), or "
              "gated_for(options) where the options decide", ("gated|gated_for",)),
    Interface("init", "arch_zoo.components.init.InitScheme", ("n_layers: int",),
              "__call__(model) initialises the whole model, then init_layer(layer, ctx) each layer "
              "with its LayerContext"),
    Interface("parametrizations", "arch_zoo.components.parametrization.Parametrization", ("cfg: ModelConfig",),
              "multipliers by parameter role: init_multiplier, lr_multiplier, weight_decay_multiplier, "
              "attention_scale, embedding_multiplier, logit_multiplier; supports(update)"),
    Interface("heads", None, ("ctx: HeadContext",),
              "an nn.Module: forward(hidden, attention_mask) -> logits; ctx: d_model, vocab_size, bias; "
              "class attributes kinds (the model kinds it fits) and produces (what its logits are)",
              ("kinds", "produces")),
    Interface("tasks", "arch_zoo.data.tasks.base.Task", ("seed: int", "model_kind: str", "max_seq_len: int"),
              "build() -> TaskData (tokenizer, splits, objective, metrics); class attribute kinds"),
    Interface("tokenizers", "arch_zoo.data.tokenizers.Tokenizer", (),
              "fit(texts), encode(text), decode(ids), vocab_size, state() / from_state(state)"),
    Interface("optimizers", "arch_zoo.recipes.optimizers.OptimizerRecipe", ("train: TrainConfig",),
              "make(groups) -> a torch optimizer over the parameter groups the recipe hands it; "
              "update names how its step scales, for the parametrization's learning-rate rules"),
    Interface("schedules", "arch_zoo.recipes.schedules.Schedule", ("train: TrainConfig",),
              "__call__(step) -> the learning-rate multiplier after step optimizer steps"),
)


def interface(family: str) -> Interface:
    """The interface of ``family`` (a key of ``arch_zoo.experiment.all_registries()``)."""
    if family not in INTERFACES:
        raise KeyError(f"no component family '{family}'; families: {', '.join(sorted(INTERFACES))}")
    return INTERFACES[family]


def check_interface(family: str, name: str) -> None:
    """Raise AssertionError unless the registered ``name`` of ``family`` subclasses the family's base
    class, sets the class attributes the package reads and takes the arguments it is built with."""
    face, entry = interface(family), all_registries()[family].get(name)
    base = face.base_class()
    if base is not None:
        assert isinstance(entry.factory, type) and issubclass(entry.factory, base), \
            f"{family} '{name}': {entry.factory!r} must subclass {face.base}"
    missing = [a.replace("|", " or ") for a in face.attributes
               if not any(hasattr(entry.factory, name) for name in a.split("|"))]
    assert not missing, f"{family} '{name}': {entry.factory!r} must set {', '.join(missing)} ({face.builds})"
    try:
        inspect.signature(entry.factory).bind(*(None for _ in ("options",) + face.context))
    except TypeError as exc:
        raise AssertionError(f"{family} '{name}': the package builds it as {face.signature} ({exc})") from None
