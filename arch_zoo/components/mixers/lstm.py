"""An LSTM layer (Hochreiter & Schmidhuber 1997) as the mixer: torch.nn.LSTM (cuDNN on GPU), its
hidden state projected back to d_model. The recurrent baseline: positions run one after another.

Padding: rows with padded positions run packed (``pack_padded_sequence``) over their real tokens
only, moved to the front in order, so padding never enters the state on either side."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..init import mark_residual_out
from .base import MIXERS, MixerInputs
from .recurrent import RecurrentMixer, read, write


@dataclass(frozen=True)
class LSTMOptions:
    hidden_size: Optional[int] = None  # the LSTM's state width; null: d_model

    def __post_init__(self):
        if self.hidden_size is not None and self.hidden_size < 1:
            raise ValueError(f"hidden_size must be positive, got {self.hidden_size}")


@MIXERS.register("lstm", LSTMOptions, "torch.nn.LSTM (Hochreiter & Schmidhuber 1997) and an output projection; "
                 "causal only")
class LSTM(RecurrentMixer):
    def __init__(self, options: LSTMOptions, cfg, ctx=None):
        super().__init__()
        self.hidden = options.hidden_size or cfg.d_model
        self.lstm = nn.LSTM(cfg.d_model, self.hidden, batch_first=True)
        self.out = mark_residual_out(nn.Linear(self.hidden, cfg.d_model, bias=cfg.bias))

    def state_shapes(self, batch):
        return {"h": (batch, self.hidden), "c": (batch, self.hidden)}  # rows first (nn.LSTM's: layers first)

    def forward(self, x: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        h, c = read(state, "h"), read(state, "c")
        start = None if h is None else (h.unsqueeze(0).to(x.dtype), c.unsqueeze(0).to(x.dtype))
        if inputs.tokens is None or bool(inputs.tokens.all()):
            y, (h, c) = self.lstm(x, start)
        else:
            y, (h, c) = self._packed(x, inputs.tokens, start)
        write(state, "h", h[0])
        write(state, "c", c[0])
        return self.out(y)

    def _packed(self, x: Tensor, tokens: Tensor, start):
        """The real tokens of each row, in order, moved to the front and run packed; outputs moved back
        (zeros at padding)."""
        order = torch.sort((~tokens).to(torch.int8), dim=1, stable=True).indices  # real positions first
        lengths = tokens.sum(1).clamp(min=1).cpu()
        front = x.gather(1, order.unsqueeze(-1).expand_as(x))
        packed, (h, c) = self.lstm(pack_padded_sequence(front, lengths, batch_first=True, enforce_sorted=False), start)
        y_front, _ = pad_packed_sequence(packed, batch_first=True, total_length=x.shape[1])
        y = torch.zeros_like(y_front).scatter(1, order.unsqueeze(-1).expand_as(y_front), y_front)
        return y * tokens.unsqueeze(-1).to(y.dtype), (h, c)

    def mixing_flops(self, length: int, causal: bool) -> float:
        return length * self.step_mixing_flops(length)

    def step_mixing_flops(self, context: int) -> float:
        """The four gates' input and recurrent matmuls (2 FLOPs a multiply-add)."""
        return 2 * 4 * self.hidden * (self.lstm.input_size + self.hidden)
