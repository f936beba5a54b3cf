"""An LSTM layer (Hochreiter & Schmidhuber 1997) as the mixer: the recurrent baseline, whose positions
run one after another (``rnn.TorchRNN``: torch.nn.LSTM's weights and kernel)."""
from __future__ import annotations

import torch
from torch import Tensor

from .base import MIXERS
from .rnn import RNNOptions, TorchRNN

LSTMOptions = RNNOptions


@MIXERS.register("lstm", LSTMOptions, "an LSTM layer (Hochreiter & Schmidhuber 1997, torch.nn.LSTM's kernel) and an "
                 "output projection; causal only")
class LSTM(TorchRNN):
    gates, states, aten = 4, ("h", "c"), torch.lstm

    def cell(self, x: Tensor, state):
        """torch.nn.LSTM's i, f, g, o gates."""
        h, c = state
        gates = x @ self.weight_ih_l0.T + self.bias_ih_l0 + h @ self.weight_hh_l0.T + self.bias_hh_l0
        i, f, g, o = gates.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c
