"""The position signal a scheme adds to the token embeddings, against the token embeddings, at init.

A sinusoidal table (RMS 0.71) added to N(0, 0.02) token embeddings is 35x larger than them: the first
layer then reads mostly positions, and a model can stall at the unigram loss (predicting token
frequencies, unable to tell tokens apart). Schemes declare their signal (``PositionScheme.embed_rms``)
and init schemes the std they give an embedding table (``InitScheme.embedding_std``); what either
leaves undeclared (a plugin) is measured on a small CPU build. ``describe`` prints the ratio and
training warns past ``WARN_RATIO``."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from ..components.init import INITS
from ..components.positions import POSITIONS, PositionContext, stack_causality
from ..config import ModelConfig
from ..config.validation import stacks

WARN_RATIO = 10.0  # a position signal this many times the token embeddings' RMS gets a warning
MEASURE_ELEMENTS = 1 << 22  # an undeclared init is measured on an embedding table up to this size
MEASURE_POSITIONS = 1024  # an undeclared position scheme is measured over the first this many positions


@dataclass(frozen=True)
class EmbeddingScale:
    position: str  # the scheme's name
    position_rms: Optional[float]  # 0.0: it adds nothing to the embeddings; None: unknown
    token_rms: Optional[float]  # the token embeddings' RMS as the first layer sees them (x sqrt(d_model) if scaled)

    @property
    def ratio(self) -> Optional[float]:
        if not self.position_rms or not self.token_rms:
            return None
        return self.position_rms / self.token_rms

    def describe(self) -> str:
        if self.position_rms == 0.0:
            return f"{self.position} adds nothing to the token embeddings"
        if self.ratio is None:
            return f"{self.position}: its scale against the token embeddings is not declared and could not be measured"
        over = (f"; over {WARN_RATIO:.0f}x, the tokens may be drowned out (see model.init, model.scale_embeddings)"
                if self.ratio > WARN_RATIO else "")
        return (f"{self.position} adds RMS {self.position_rms:.3g} to token embeddings of RMS {self.token_rms:.3g}: "
                f"{self.ratio:.1f}x{over}")

    def warning(self) -> Optional[str]:
        if self.ratio is None or self.ratio <= WARN_RATIO:
            return None
        return (f"model.position: {self.position} adds a signal {self.ratio:.0f}x the token embeddings' (RMS "
                f"{self.position_rms:.3g} vs {self.token_rms:.3g} at init); such a model may never tell tokens apart "
                "and stall at the unigram loss: scale the embeddings (model.init: xavier, model.scale_embeddings: "
                "true) or use a scheme that acts in attention (rope, alibi)")


def _measured_std(init: Callable, rows: int, cols: int) -> Optional[float]:
    if rows * cols > MEASURE_ELEMENTS:
        return None
    table = nn.Embedding(rows, cols)
    try:
        init(table)
    except Exception:  # noqa: BLE001 - a plugin's init may expect a whole model
        return None
    return float(table.weight.detach().pow(2).mean().sqrt())


def _measured_signal(m: ModelConfig, ctx, init: Callable) -> Optional[float]:
    try:
        scheme = POSITIONS.build(m.position, ctx)
        init(scheme)
        n = min(ctx.max_seq_len, MEASURE_POSITIONS)
        with torch.no_grad():
            signal = scheme.embed(torch.zeros(1, n, ctx.d_model), torch.arange(n).unsqueeze(0))
    except Exception:  # noqa: BLE001 - a plugin's scheme or init may need more than a lone build
        return None
    return float(signal.pow(2).mean().sqrt())


def embedding_scale(m: ModelConfig, vocab_size: int) -> EmbeddingScale:
    """The position signal and token embedding scales of model config ``m`` at initialisation."""
    ctx = PositionContext.of(m, stack_causality(m)[-1])  # the stack that generates (its embeddings are shared)
    with torch.device("cpu"):  # (describe builds its model on the meta device)
        layers = sum(depth for _, depth in stacks(m))
        init = INITS.build(m.init, layers)

        def init_std(rows: int, cols: int) -> Optional[float]:
            declared = getattr(init, "embedding_std", None)
            std = declared(rows, cols) if declared is not None else None
            return std if std is not None else _measured_std(init, rows, cols)

        position = POSITIONS.get(m.position.name).factory.embed_rms(m.position.options, ctx, init_std)
        if position is None:
            position = _measured_signal(m, ctx, init)
        token = init_std(vocab_size, m.d_model) if position else None
    if token is not None and m.scale_embeddings:
        token *= math.sqrt(m.d_model)
    return EmbeddingScale(m.position.name, position, token)
