"""Attention patterns: which keys each query of a self-attention layer may see, and the key/value
cache policy that goes with it. This is the model's function (``model.attention``); how the scores
are computed is the kernel's business (``model.attention_kernel``), which never changes it.

A pattern sees the layer's mask in full coordinates (every cached plus every new key, as the stack
built it) and may narrow it; after each decoding step it says how many of the newest keys the cache
must keep. Cross-attention always sees the whole memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..errors import ConfigError
from ..registry import NoOptions, Registry
from .masks import AttentionMask

_KERNEL_MOVED = "model.attention_kernel={} (the kernel has its own key; model.attention is the pattern)"
ATTENTION = Registry("attention", "attention pattern",
                     moved={name: _KERNEL_MOVED.format(name) for name in ("sdpa", "explicit")})


class AttentionPattern:
    """Every query sees every key the stack's mask allows; the cache keeps everything."""

    def __init__(self, options=NoOptions()):
        self.options = options

    def restrict(self, mask: AttentionMask, q_len: int, k_len: int, device) -> AttentionMask:
        """The mask this layer uses, from the stack's (queries are the last ``q_len`` of ``k_len`` positions)."""
        return mask

    def cache_keep(self) -> Optional[int]:
        """How many of the newest keys a decoding cache must keep after a step (None: all)."""
        return None

    def visible_keys(self, seq_len: int, causal: bool) -> float:
        """Keys a query sees on average in a full sequence of ``seq_len`` tokens (for FLOP counts)."""
        return (seq_len + 1) / 2 if causal else float(seq_len)


@ATTENTION.register("global", NoOptions, "every query attends to every key the mask allows (Vaswani et al. 2017)")
class GlobalAttention(AttentionPattern):
    pass


@dataclass(frozen=True)
class SlidingWindowOptions:
    window: int = 4096  # Mistral 7B's

    def __post_init__(self):
        if self.window <= 0:
            raise ConfigError("window", f"must be a positive number of keys, got {self.window}")


def window_band(q_len: int, k_len: int, window: int, device=None) -> torch.Tensor:
    """(q_len, k_len) bool: query i (absolute index k_len - q_len + i) may see key j when |i - j| < window.
    Under a causal mask this is Mistral's i - window < j <= i; without one it is the symmetric band."""
    q_idx = torch.arange(q_len, device=device).unsqueeze(1) + (k_len - q_len)
    return (q_idx - torch.arange(k_len, device=device).unsqueeze(0)).abs() < window


@ATTENTION.register("sliding_window", SlidingWindowOptions,
                    "each query sees the last `window` keys, itself included (Mistral; Beltagy et al. 2020); "
                    "the decoding cache keeps only those, so its memory stays bounded")
class SlidingWindowAttention(AttentionPattern):
    # the test grids' sequences (5 to 13 tokens) are far shorter than the default window, which
    # would make this global attention there; 3 keys narrow every one of them
    example_options = {"window": 3}

    def __init__(self, options: SlidingWindowOptions = SlidingWindowOptions()):
        super().__init__(options)
        self.window = options.window

    def restrict(self, mask, q_len, k_len, device):
        if k_len <= self.window:  # every pair is within the window: keep the mask (and sdpa's fused causal path)
            return mask
        return mask.restrict(window_band(q_len, k_len, self.window, device))

    def cache_keep(self):
        return self.window - 1  # the next query sees itself plus these

    def visible_keys(self, seq_len, causal):
        i = torch.arange(seq_len, dtype=torch.float64)
        before = torch.clamp(i, max=self.window - 1)  # earlier keys within the window
        if causal:
            return float((before + 1).mean())
        after = torch.clamp(seq_len - 1 - i, max=self.window - 1)
        return float((before + after + 1).mean())
