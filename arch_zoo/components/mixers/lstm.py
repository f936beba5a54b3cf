"""An LSTM layer (Hochreiter & Schmidhuber 1997) as the mixer, its hidden state projected back to
d_model: the recurrent baseline, whose positions run one after another. The weights are
torch.nn.LSTM's (same names, layout and init) and a sequence runs through the same ATen LSTM kernel
(cuDNN on GPU); one decoding position is the cell written out, which a compiled decode step traces
(dynamo refuses an nn.LSTM module).

Padding: rows with padded positions run packed over their real tokens only, moved to the front in
order, so padding never enters the state on either side."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from ..init import mark_residual_out
from .base import MIXERS, MixerInputs
from .recurrent import RecurrentMixer, read, write


@dataclass(frozen=True)
class LSTMOptions:
    hidden_size: Optional[int] = None  # the LSTM's state width; null: d_model

    def __post_init__(self):
        if self.hidden_size is not None and self.hidden_size < 1:
            raise ValueError(f"hidden_size must be positive, got {self.hidden_size}")


@MIXERS.register("lstm", LSTMOptions, "an LSTM layer (Hochreiter & Schmidhuber 1997, torch.nn.LSTM's kernel) and an "
                 "output projection; causal only")
class LSTM(RecurrentMixer):
    def __init__(self, options: LSTMOptions, cfg, ctx=None):
        super().__init__()
        self.input_size, self.hidden = cfg.d_model, options.hidden_size or cfg.d_model
        bound = 1.0 / math.sqrt(self.hidden)  # torch.nn.LSTM's init
        gates = 4 * self.hidden
        self.weight_ih_l0 = nn.Parameter(torch.empty(gates, self.input_size).uniform_(-bound, bound))
        self.weight_hh_l0 = nn.Parameter(torch.empty(gates, self.hidden).uniform_(-bound, bound))
        self.bias_ih_l0 = nn.Parameter(torch.empty(gates).uniform_(-bound, bound))
        self.bias_hh_l0 = nn.Parameter(torch.empty(gates).uniform_(-bound, bound))
        self.out = mark_residual_out(nn.Linear(self.hidden, cfg.d_model, bias=cfg.bias))

    def _weights(self):
        return [self.weight_ih_l0, self.weight_hh_l0, self.bias_ih_l0, self.bias_hh_l0]

    def state_shapes(self, batch):
        return {"h": (batch, self.hidden), "c": (batch, self.hidden)}  # rows first (nn.LSTM's: layers first)

    def forward(self, x: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        h, c = read(state, "h"), read(state, "c")
        if state is not None and x.shape[1] == 1 and h is not None:
            return self._step(x, inputs.tokens, h, c, state)
        if h is None:
            h = c = x.new_zeros(x.shape[0], self.hidden)
        start = (h.unsqueeze(0).to(x.dtype), c.unsqueeze(0).to(x.dtype))
        if inputs.tokens is None or bool(inputs.tokens.all()):
            y, h, c = torch.lstm(x, start, self._weights(), True, 1, 0.0, self.training, False, True)
        else:
            y, h, c = self._packed(x, inputs.tokens, start)
        write(state, "h", h[0])
        write(state, "c", c[0])
        return self.out(y)

    def _step(self, x: Tensor, tokens: Optional[Tensor], h: Tensor, c: Tensor, state) -> Tensor:
        """One decoding position: the cell with torch.nn.LSTM's i, f, g, o gates."""
        h, c, x = h.to(x.dtype), c.to(x.dtype), x[:, 0]
        gates = x @ self.weight_ih_l0.T + self.bias_ih_l0 + h @ self.weight_hh_l0.T + self.bias_hh_l0
        i, f, g, o = gates.chunk(4, dim=-1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        if tokens is not None:  # a padded position keeps the state
            real = tokens[:, :1].to(torch.bool)
            h_new, c_new = torch.where(real, h_new, h), torch.where(real, c_new, c)
        write(state, "h", h_new)
        write(state, "c", c_new)
        out = h_new if tokens is None else h_new * tokens[:, :1].to(x.dtype)
        return self.out(out.unsqueeze(1))

    def _packed(self, x: Tensor, tokens: Tensor, start):
        """The real tokens of each row, in order, moved to the front and run packed; outputs moved back
        (zeros at padding); the state after each row's last real token."""
        order = torch.sort((~tokens).to(torch.int8), dim=1, stable=True).indices  # real positions first
        lengths = tokens.sum(1).clamp(min=1).cpu()
        front = x.gather(1, order.unsqueeze(-1).expand_as(x))
        packed = pack_padded_sequence(front, lengths, batch_first=True, enforce_sorted=False)
        hx = tuple(t.index_select(1, packed.sorted_indices) for t in start)
        data, h, c = torch.lstm(packed.data, packed.batch_sizes, hx, self._weights(), True, 1, 0.0, self.training, False)
        out = PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
        y_front, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        y = torch.zeros_like(y_front).scatter(1, order.unsqueeze(-1).expand_as(y_front), y_front)
        h, c = (t.index_select(1, packed.unsorted_indices) for t in (h, c))
        return y * tokens.unsqueeze(-1).to(y.dtype), h, c

    def mixing_flops(self, length: int, causal: bool) -> float:
        return length * self.step_mixing_flops(length)

    def step_mixing_flops(self, context: int) -> float:
        """The four gates' input and recurrent matmuls (2 FLOPs a multiply-add)."""
        return 2 * 4 * self.hidden * (self.input_size + self.hidden)
