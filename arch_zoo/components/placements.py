"""Norm placements: how a layer combines its sublayers (attention, cross-attention, feed-forward)
with norms and the residual stream.

A sublayer knows nothing about norms. Each sublayer sits in a ``Slot`` module with the norms the
placement asked for (``norm_slots``), and the layer runs the slots in order, asking the placement
two things per slot: ``pre(slot, x)``, what the sublayer reads, and ``post(slot, x, y)``, the
residual stream after its output y. A placement with ``parallel`` set has its sublayers read the
layer's input side by side (the layer's own branch); one that overrides ``forward(x, slots,
branches)`` (the older protocol, still honoured for plugins) combines the sublayers itself.
``final_norm`` declares whether the stack ends with a norm by default; ``after_init`` adjusts
weights once the init scheme has run.
A placement is a module of its layer, so one with learned parameters of its own (a residual
scale, say) declares them in ``__init__`` (``ctx.d_model`` gives the width); the built-ins have none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Tuple

from torch import Tensor, nn

from ..registry import NoOptions, Registry
from ..config.kinds import KINDS
from .context import LayerContext

PLACEMENTS = Registry("placements", "norm placement")


def ends_with_norm(cfg) -> bool:
    """Whether a stack of ``cfg`` (a ModelConfig) ends with a norm: ``model.final_norm`` when set,
    else what its placement declares (pre: yes, post: no)."""
    if cfg.final_norm is not None:
        return cfg.final_norm
    return PLACEMENTS.get(cfg.norm_placement.name).factory.final_norm

Branch = Callable[[Tensor], Tensor]  # a sublayer with its inputs bound: h -> dropout(f(h))


class Slot(nn.Module):
    """One sublayer plus the norms its placement uses around it (``norm``, ``post_norm``); called, it
    runs the sublayer and its residual dropout: ``dropout(sublayer(h, ...))``."""

    def __init__(self, sublayer: nn.Module, norms: dict, dropout: float):
        super().__init__()
        self.sublayer = sublayer
        for name, norm in norms.items():
            self.add_module(name, norm)
        self.dropout = nn.Dropout(dropout)

    def forward(self, h: Tensor, *args) -> Tensor:
        return self.dropout(self.sublayer(h, *args))


class Placement(nn.Module):
    """The pre placement's steps by default; a placement overrides ``pre`` and ``post``."""

    final_norm = True  # the stack ends with a norm unless model.final_norm says otherwise
    cross_attention = True  # has a form with cross-attention (encoder-decoder models)
    parallel = False  # sublayers side by side on the layer's input (GPT-J), not one after another
    formula = ""  # shown by describe; empty: the registration's description

    def __init__(self, options, ctx: LayerContext):
        super().__init__()
        self.options, self.ctx = options, ctx

    def norm_slots(self, index: int) -> Tuple[str, ...]:
        """Names of the norms sublayer ``index`` of the layer needs."""
        return ("norm",)

    def pre(self, slot: Slot, x: Tensor) -> Tensor:
        """What the sublayer in ``slot`` reads from the residual stream ``x``."""
        return slot.norm(x)

    def post(self, slot: Slot, x: Tensor, y: Tensor) -> Tensor:
        """The residual stream after the sublayer: ``x`` its input, ``y`` its output."""
        return x + y

    def combines_itself(self) -> bool:
        """Whether a subclass combines the sublayers in its own ``forward`` or ``residual`` (the older
        protocol, which plugins may still use); then the layer hands it the slots and their branches."""
        own = type(self)
        return own.forward is not Placement.forward or own.residual is not Placement.residual

    def residual(self, slot: Slot, x: Tensor, branch: Branch) -> Tensor:
        return self.post(slot, x, branch(self.pre(slot, x)))

    def forward(self, x: Tensor, slots: List[Slot], branches: List[Branch]) -> Tensor:
        for slot, branch in zip(slots, branches):
            x = self.residual(slot, x, branch)
        return x

    def after_init(self, slots: List[Slot]) -> None:
        """Called once the init scheme has run on the whole model."""


@PLACEMENTS.register("pre", NoOptions, "x + f(norm(x)); a final norm ends the stack (GPT-2, LLaMA, T5)")
class Pre(Placement):
    formula = "x + f(norm(x))"


@PLACEMENTS.register("post", NoOptions, "norm(x + f(x)); no final norm (Vaswani et al. 2017, BERT)")
class Post(Placement):
    formula = "norm(x + f(x))"
    final_norm = False

    def pre(self, slot, x):
        return x

    def post(self, slot, x, y):
        return slot.norm(x + y)


@PLACEMENTS.register("sandwich", NoOptions, "x + norm2(f(norm1(x))): a norm before and after each sublayer (Gemma 2, CogView)")
class Sandwich(Placement):
    formula = "x + post_norm(f(norm(x)))"

    def norm_slots(self, index):
        return ("norm", "post_norm")

    def post(self, slot, x, y):
        return x + slot.post_norm(y)


def deepnorm_constants(ctx: LayerContext) -> Tuple[float, float]:
    """(alpha, beta) of Wang et al. 2022 (DeepNet), from the depth of the model: encoder-only and
    decoder-only (2L)^(1/4), (8L)^(-1/4); encoder-decoder: encoder 0.81 (N^4 M)^(1/16),
    0.87 (N^4 M)^(-1/16), decoder (3M)^(1/4), (12M)^(-1/4) (N encoder, M decoder layers)."""
    n, m = ctx.n_encoder_layers, ctx.n_decoder_layers
    if len(KINDS[ctx.model_kind].stacks) == 1:  # encoder-only or decoder-only: the stack's own depth
        return (2 * ctx.depth) ** 0.25, (8 * ctx.depth) ** -0.25
    if ctx.stack == "encoder":
        return 0.81 * (n ** 4 * m) ** (1 / 16), 0.87 * (n ** 4 * m) ** (-1 / 16)
    return (3 * m) ** 0.25, (12 * m) ** -0.25


@PLACEMENTS.register("deepnorm", NoOptions, "norm(alpha x + f(x)), value/output/FFN init scaled by beta; "
                                            "both from depth (Wang et al. 2022)")
class DeepNorm(Placement):
    formula = "norm(alpha * x + f(x))"
    final_norm = False

    def __init__(self, options, ctx):
        super().__init__(options, ctx)
        self.alpha, self.beta = deepnorm_constants(ctx)

    def pre(self, slot, x):
        return x

    def post(self, slot, x, y):
        return slot.norm(self.alpha * x + y)

    def after_init(self, slots):
        """The paper scales the init of the FFN, value and output projections by beta (q and k keep
        gain 1); here that is a multiplication of whatever the init scheme drew. Attention declares
        its value and output weights (``value_and_output_weights``); any other sublayer (an FFN, MoE)
        has every linear weight scaled."""
        for slot in slots:
            declared = getattr(slot.sublayer, "value_and_output_weights", None)
            weights = declared() if declared is not None else [
                m.weight.data for m in slot.sublayer.modules() if isinstance(m, nn.Linear)]
            for weight in weights:
                weight.mul_(self.beta)


@dataclass(frozen=True)
class ParallelOptions:
    shared_norm: bool = True  # one norm feeds both sublayers (GPT-J, PaLM); false: one each (GPT-NeoX)


@PLACEMENTS.register("parallel", ParallelOptions, "x + attn(norm(x)) + ffn(norm(x)): sublayers side by side "
                                                  "(GPT-J, GPT-NeoX, PaLM)")
class Parallel(Placement):
    """No cross-attention form: validation refuses it for encoder-decoder models. With a shared norm
    only the first slot has one, and every sublayer reads its output."""

    formula = "x + attn(norm(x)) + ffn(norm(x))"
    cross_attention = False
    parallel = True

    @property
    def shared_norm(self) -> bool:
        return self.options.shared_norm

    def norm_slots(self, index):
        return ("norm",) if index == 0 or not self.shared_norm else ()


@dataclass(frozen=True)
class NormedResidualOptions:
    alpha: float = 1.0  # the normed input's weight (MiniMax-Text-01: (2 x 80 layers)^(1/4), DeepNet's alpha)
    beta: float = 1.0  # the sublayer output's


@PLACEMENTS.register("normed_residual", NormedResidualOptions, "alpha norm(x) + beta f(norm(x)): the residual "
                                                               "stream carries the normed input (MiniMax-01)")
class NormedResidual(Placement):
    formula = "alpha * norm(x) + beta * f(norm(x))"

    def post(self, slot, x, y):
        return self.options.alpha * slot.norm(x) + self.options.beta * y  # norm(x) again: pre's is not kept
