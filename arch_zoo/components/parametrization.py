"""Parametrizations: how a model's init, its width-dependent multipliers and its per-group learning
rates depend on width (``model.parametrization``). It changes the model's function, so it is part
of the model config, and the optimizer factory asks it for each group's learning-rate multiplier.

``standard`` changes nothing. ``mup`` is the maximal-update parametrization of Yang et al. 2022
(Tensor Programs V, Table 3 in its output-multiplier form, as their ``mup`` package implements it),
with width d_model and width multiplier m = d_model / base_width:

* hidden matrices (every ``nn.Linear`` weight but the head's readout): init variance / m, and under
  an Adam-family update learning rate / m (weight decay * m, so that lr * wd stays as at base width),
  under Muon's original scale learning rate as at base width, under its match_rms_adamw scale / sqrt(m);
* embeddings, the readout, biases and norm gains: init, learning rate and decay as at base width;
* the readout's product * 1 / m (W x / m + b, as mup's MuReadout: the bias keeps its scale); a
  ``model.scale_embeddings`` multiplier held at sqrt(base_width);
* attention scores q.k / head_dim instead of / sqrt(head_dim), unless ``model.attention_scale`` is set.

At d_model = base_width it is ``standard`` apart from that attention scale.

A parameter's role comes from the module holding it (``parameter_roles``): a parametrization, an
optimizer that treats matrices apart (Muon) and the tests all read the same split.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Literal, Optional, Tuple

import torch
from torch import nn

from ..errors import ConfigError
from ..registry import Registry

PARAMETRIZATIONS = Registry("parametrizations", "parametrization")

HIDDEN = "hidden"  # a matrix both of whose sides grow with width: every nn.Linear weight but the readout's
INPUT = "input"  # a looked-up table (token, position, token-type embeddings), the tied readout included
OUTPUT = "output"  # the head's readout (``readout``): onto classes or the vocabulary, which do not grow
VECTOR = "vector"  # biases, norm gains, anything else

# How an optimizer's step scales with the gradient, which decides how its learning rate must scale
# with width: "adam" normalises each entry (Adam, AdamW, Muon's AdamW part), "sgd" follows the raw
# gradient, "orthogonal" is an orthogonalised matrix update whose spectral norm the matrix's shape
# already sets (Muon's original scale), "orthogonal_rms" one scaled to a fixed entry RMS (Muon's
# match_rms_adamw: spectral norm 0.2 sqrt(max(rows, cols)), so growing as sqrt(width), not as Adam's).
UPDATES = ("adam", "sgd", "orthogonal", "orthogonal_rms")


def readout(model: nn.Module) -> Optional[nn.Linear]:
    """The head's last projection, onto classes or the vocabulary: its ``proj`` (every built-in head's
    name for it), else the last Linear it registers; None for a head without one."""
    head = getattr(model, "head", None)
    if head is None:
        return None
    proj = getattr(head, "proj", None)
    if isinstance(proj, nn.Linear):
        return proj
    return next((m for m in reversed(list(head.modules())) if isinstance(m, nn.Linear)), None)


def parameter_roles(model: nn.Module) -> Iterator[Tuple[str, nn.Parameter, str]]:
    """(name, parameter, role) for each trainable parameter once (a tied weight under its first name)."""
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    out = readout(model)
    matrices = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        role = (INPUT if id(p) in tables else OUTPUT if out is not None and p is out.weight
                else HIDDEN if id(p) in matrices else VECTOR)
        yield name, p, role


class Parametrization:
    """The interface the model and the optimizer factory ask; this base class is ``standard``."""

    def __init__(self, options, cfg):
        self.options = options
        self.d_model = getattr(cfg, "d_model", None)  # None: a model from outside arch_zoo (standard only)

    @staticmethod
    def check(options, cfg, key: str) -> None:
        """Raise ConfigError (naming ``key``) for a model config the parametrization cannot serve."""

    def supports(self, update: str) -> bool:
        """Whether it has a learning-rate rule for optimizers whose update is ``update`` (UPDATES)."""
        return True

    def attention_scale(self, head_dim: int) -> Optional[float]:
        """The q.k scale when model.attention_scale is null; None: the kernel's 1/sqrt(head_dim)."""
        return None

    def embedding_multiplier(self) -> float:
        """What model.scale_embeddings multiplies token embeddings by."""
        return math.sqrt(self.d_model)

    def logit_multiplier(self) -> float:
        return 1.0

    def init_multiplier(self, role: str, shape: Tuple[int, ...], std_follows_fan: bool) -> float:
        """Factor on a freshly initialised parameter. ``std_follows_fan``: the init scheme's std
        already shrinks with fan-in + fan-out (Xavier) rather than being fixed (N(0, 0.02))."""
        return 1.0

    def lr_multiplier(self, role: str, update: str) -> float:
        return 1.0

    def weight_decay_multiplier(self, role: str, update: str) -> float:
        return 1.0

    def rescale_init(self, model: nn.Module, init_scheme) -> None:
        """Apply ``init_multiplier`` to every parameter once the init scheme has drawn it."""
        fan = bool(getattr(init_scheme, "std_follows_fan", False))
        for _, p, role in parameter_roles(model):
            factor = self.init_multiplier(role, tuple(p.shape), fan)
            if factor != 1.0:
                p.data.mul_(factor)

    def describe(self) -> str:
        return "init, multipliers and learning rates as the components give them"


@dataclass(frozen=True)
class StandardOptions:
    # sqrt(d_model) rounded to this dtype before it scales the embeddings (model.scale_embeddings);
    # null: exact. RecurrentGemma keeps its normalizer in bfloat16 (50.5, not 50.596, at d_model 2560)
    embedding_multiplier_dtype: Optional[Literal["bfloat16"]] = None
    # what model.scale_embeddings multiplies by; null: sqrt(d_model) (Falcon-H1 publishes its own)
    embedding_multiplier: Optional[float] = None
    logit_multiplier: float = 1.0  # the logits' factor (Falcon-H1's lm_head_multiplier)


@PARAMETRIZATIONS.register("standard", StandardOptions, "init, multipliers and learning rates as the components and "
                           "train.lr give them, at any width")
class Standard(Parametrization):
    def embedding_multiplier(self) -> float:
        given = self.options.embedding_multiplier
        exact = math.sqrt(self.d_model) if given is None else given
        dtype = self.options.embedding_multiplier_dtype
        if dtype is None:
            return exact
        return float(torch.tensor(exact, dtype=getattr(torch, dtype), device="cpu"))  # rounded as HF rounds it

    def logit_multiplier(self) -> float:
        return self.options.logit_multiplier


@dataclass(frozen=True)
class MuPOptions:
    base_width: Optional[int] = None  # the d_model at which mup equals standard (where the lr was tuned)


@PARAMETRIZATIONS.register("mup", MuPOptions, "maximal update (Yang et al. 2022): per-group init and Adam/Muon "
                           "learning rates by width, readout W x * base_width/d_model, q.k / head_dim")
class MuP(Parametrization):
    example_options = {"base_width": 8}  # for the test grid (arch_zoo.testing): below its d_model of 16

    def __init__(self, options: MuPOptions, cfg):
        super().__init__(options, cfg)
        self.base = options.base_width
        self.m = cfg.d_model / self.base

    @staticmethod
    def check(options: MuPOptions, cfg, key: str) -> None:
        if options.base_width is None:
            raise ConfigError(f"{key}.base_width", "mup needs base_width: the d_model at which the learning "
                              "rate was tuned (mup equals standard there), e.g. {name: mup, base_width: 64}")
        if options.base_width < 1:
            raise ConfigError(f"{key}.base_width", f"must be positive, got {options.base_width}")
        if options.base_width > cfg.d_model:
            raise ConfigError(f"{key}.base_width", f"is {options.base_width}, above d_model ({cfg.d_model}): mup "
                              "scales a model tuned at base_width up to wider ones, so base_width <= d_model")
        if getattr(cfg.head.options, "scale_input", False):
            raise ConfigError(f"{key.rpartition('.')[0] or 'model'}.head.scale_input", "mup sets the output's width multiplier itself "
                              "(base_width / d_model); set scale_input false")

    def supports(self, update: str) -> bool:
        return update in ("adam", "orthogonal", "orthogonal_rms")

    def attention_scale(self, head_dim: int) -> Optional[float]:
        return 1.0 / head_dim  # q.k of correlated (trained) q and k grows as head_dim, not sqrt(head_dim)

    def embedding_multiplier(self) -> float:
        return math.sqrt(self.base)

    def logit_multiplier(self) -> float:
        return 1.0 / self.m

    def init_multiplier(self, role: str, shape: Tuple[int, ...], std_follows_fan: bool) -> float:
        if role == HIDDEN:  # variance / m: a fixed std scaled down; Xavier's 2/(fan_in+fan_out) already is
            return 1.0 if std_follows_fan else self.m ** -0.5
        if role in (INPUT, OUTPUT) and std_follows_fan and len(shape) == 2 and shape[-1] == self.d_model:
            # back to the base width's std; the width is the last side (a vocabulary may be as long)
            return math.sqrt(sum(shape) / (shape[0] + self.base))
        return 1.0

    # A hidden matrix's step must move its output coordinates by O(1) at any width: Adam's (entries
    # O(lr), aligned with the input) moves them by lr * fan_in, an RMS-matched orthogonal step by
    # lr * sqrt(fan_in), the original orthogonal step by lr. Decay keeps lr * decay as at base width.
    _HIDDEN_LR_POWER = {"adam": -1.0, "orthogonal_rms": -0.5}

    def lr_multiplier(self, role: str, update: str) -> float:
        return self.m ** self._HIDDEN_LR_POWER.get(update, 0.0) if role == HIDDEN else 1.0

    def weight_decay_multiplier(self, role: str, update: str) -> float:
        return self.m ** -self._HIDDEN_LR_POWER.get(update, 0.0) if role == HIDDEN else 1.0

    def describe(self) -> str:
        return (f"mup at width multiplier {self.m:g} (d_model {self.d_model} / base_width {self.base}): hidden "
                f"init var and Adam lr / {self.m:g}, readout W x * {1 / self.m:g} (not its bias), q.k / head_dim "
                "(standard: / sqrt(head_dim), so it differs from standard even at base width)")
