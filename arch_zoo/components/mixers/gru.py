"""A GRU layer (Cho et al. 2014) as the mixer: the LSTM's lighter sibling (three gate blocks, one state
tensor; ``rnn.TorchRNN``: torch.nn.GRU's weights and kernel)."""
from __future__ import annotations

import torch
from torch import Tensor

from .base import MIXERS
from .rnn import RNNOptions, TorchRNN


@MIXERS.register("gru", RNNOptions, "a GRU layer (Cho et al. 2014, torch.nn.GRU's kernel) and an output "
                 "projection; causal only")
class GRU(TorchRNN):
    gates, states, aten = 3, ("h",), torch.gru

    def cell(self, x: Tensor, state):
        """torch.nn.GRU's r, z, n gates: the reset gate scales the recurrent part of n only."""
        (h,) = state
        xr, xz, xn = (x @ self.weight_ih_l0.T + self.bias_ih_l0).chunk(3, dim=-1)
        hr, hz, hn = (h @ self.weight_hh_l0.T + self.bias_hh_l0).chunk(3, dim=-1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        return ((1 - z) * n + z * h,)
