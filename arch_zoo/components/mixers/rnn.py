"""What the torch.nn recurrent layers as mixers share (``lstm``, ``gru``): torch.nn's weights (same
names, layout and init: ``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``), a
sequence run through the same ATen kernel (cuDNN on GPU), the hidden state projected back to d_model.
One decoding position is the cell written out (each subclass's ``cell``), which a compiled decode step
traces (dynamo refuses an nn.LSTM / nn.GRU module).

Padding: rows with padded positions run packed over their real tokens only, moved to the front in
order, so padding never enters the state on either side; a padded decoding position keeps the state."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from ..init import mark_residual_out
from .base import MixerInputs
from .recurrent import RecurrentMixer, read, write


@dataclass(frozen=True)
class RNNOptions:
    hidden_size: Optional[int] = None  # the recurrent state's width; null: d_model

    def __post_init__(self):
        if self.hidden_size is not None and self.hidden_size < 1:
            raise ValueError(f"hidden_size must be positive, got {self.hidden_size}")


class TorchRNN(RecurrentMixer):
    """A one-layer torch.nn recurrent layer: ``gates`` gate blocks of ``hidden`` rows, a state of the
    tensors named in ``states`` (each (batch, hidden)), run by ``aten`` (``torch.lstm`` / ``torch.gru``)."""
    gates: int
    states: Tuple[str, ...]
    aten: Callable

    def __init__(self, options: RNNOptions, cfg, ctx=None):
        super().__init__()
        self.input_size, self.hidden = cfg.d_model, options.hidden_size or cfg.d_model
        bound = 1.0 / math.sqrt(self.hidden)  # torch.nn's init
        rows = self.gates * self.hidden
        self.weight_ih_l0 = nn.Parameter(torch.empty(rows, self.input_size).uniform_(-bound, bound))
        self.weight_hh_l0 = nn.Parameter(torch.empty(rows, self.hidden).uniform_(-bound, bound))
        self.bias_ih_l0 = nn.Parameter(torch.empty(rows).uniform_(-bound, bound))
        self.bias_hh_l0 = nn.Parameter(torch.empty(rows).uniform_(-bound, bound))
        self.out = mark_residual_out(nn.Linear(self.hidden, cfg.d_model, bias=cfg.bias))

    def cell(self, x: Tensor, state: Tuple[Tensor, ...]) -> Tuple[Tensor, ...]:
        """One position: (batch, input) and the state tensors -> the new state tensors, h first."""
        raise NotImplementedError

    def _weights(self):
        return [self.weight_ih_l0, self.weight_hh_l0, self.bias_ih_l0, self.bias_hh_l0]

    def state_shapes(self, batch) -> Dict[str, Tuple[int, ...]]:
        return {name: (batch, self.hidden) for name in self.states}  # rows first (torch.nn's: layers first)

    def _run(self, x: Tensor, hx: Tuple[Tensor, ...], batch_sizes: Optional[Tensor] = None):
        """The kernel over a padded (batch-first) or packed sequence: (outputs, state tensors with a
        leading layer axis)."""
        start = hx if len(hx) > 1 else hx[0]
        if batch_sizes is None:
            out = type(self).aten(x, start, self._weights(), True, 1, 0.0, self.training, False, True)
        else:
            out = type(self).aten(x, batch_sizes, start, self._weights(), True, 1, 0.0, self.training, False)
        return out[0], out[1:]

    def forward(self, x: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        held = tuple(read(state, name) for name in self.states)
        if state is not None and x.shape[1] == 1 and held[0] is not None:
            return self._step(x, inputs.tokens, held, state)
        if held[0] is None:
            held = tuple(x.new_zeros(x.shape[0], self.hidden) for _ in self.states)
        start = tuple(t.unsqueeze(0).to(x.dtype) for t in held)
        if inputs.tokens is None or bool(inputs.tokens.all()):
            y, final = self._run(x, start)
        else:
            y, final = self._packed(x, inputs.tokens, start)
        for name, t in zip(self.states, final):
            write(state, name, t[0])
        return self.out(y)

    def _step(self, x: Tensor, tokens: Optional[Tensor], held: Tuple[Tensor, ...], state) -> Tensor:
        held = tuple(t.to(x.dtype) for t in held)
        new = self.cell(x[:, 0], held)
        if tokens is not None:  # a padded position keeps the state
            real = tokens[:, :1].to(torch.bool)
            new = tuple(torch.where(real, n, o) for n, o in zip(new, held))
        for name, t in zip(self.states, new):
            write(state, name, t)
        out = new[0] if tokens is None else new[0] * tokens[:, :1].to(x.dtype)
        return self.out(out.unsqueeze(1))

    def _packed(self, x: Tensor, tokens: Tensor, start: Tuple[Tensor, ...]):
        """The real tokens of each row, in order, moved to the front and run packed; outputs moved back
        (zeros at padding); the state after each row's last real token."""
        order = torch.sort((~tokens).to(torch.int8), dim=1, stable=True).indices  # real positions first
        lengths = tokens.sum(1).clamp(min=1).cpu()
        front = x.gather(1, order.unsqueeze(-1).expand_as(x))
        packed = pack_padded_sequence(front, lengths, batch_first=True, enforce_sorted=False)
        hx = tuple(t.index_select(1, packed.sorted_indices) for t in start)
        data, final = self._run(packed.data, hx, packed.batch_sizes)
        out = PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
        y_front, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        y = torch.zeros_like(y_front).scatter(1, order.unsqueeze(-1).expand_as(y_front), y_front)
        final = tuple(t.index_select(1, packed.unsorted_indices) for t in final)
        return y * tokens.unsqueeze(-1).to(y.dtype), final

    def mixing_flops(self, length: int, causal: bool) -> float:
        return length * self.step_mixing_flops(length)

    def step_mixing_flops(self, context: int) -> float:
        """The gates' input and recurrent matmuls (2 FLOPs a multiply-add)."""
        return 2 * self.gates * self.hidden * (self.input_size + self.hidden)
