"""From logits to the next token: temperature, then top-k, then top-p (nucleus), then a draw."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep exactly the ``k`` largest logits per row (ties broken by ``topk``); the rest become -inf."""
    if k >= logits.shape[-1]:
        return logits
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, logits.topk(k, dim=-1).indices, True)
    return logits.masked_fill(~keep, float("-inf"))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Keep the smallest set of most likely tokens whose probability reaches ``p``; the rest become -inf.

    A token stays when the mass of the tokens ranked above it is still below ``p``, so the most
    likely token always stays and the set stops at the first token that reaches ``p``."""
    if p >= 1.0:
        return logits
    ranked, order = logits.sort(dim=-1, descending=True)
    probs = ranked.float().softmax(dim=-1)
    above = torch.cat((torch.zeros_like(probs[..., :1]), probs.cumsum(dim=-1)[..., :-1]), dim=-1)
    drop = torch.empty_like(above, dtype=torch.bool).scatter_(-1, order, above >= p)
    return logits.masked_fill(drop, float("-inf"))


def within(scores: Tensor, size: Optional[int]) -> Tensor:
    """``scores`` (logits or log-probabilities over the model's rows) with every id at or past ``size``
    set to -inf: rows a published checkpoint pads its embedding with (t5-small's 32,128 for 32,100
    tokens) are scored by the model, but no tokenizer decodes them, so no strategy may choose them."""
    if size is None or size >= scores.shape[-1]:
        return scores
    past = torch.arange(scores.shape[-1], device=scores.device) >= size
    return scores.masked_fill(past, float("-inf"))


def sample_logits(logits: Tensor, temperature: float = 1.0, top_k: Optional[int] = None,
                  top_p: Optional[float] = None) -> Tensor:
    """The logits a draw is made from: scaled by 1/temperature, then filtered by top-k and top-p."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits


class Sampler:
    """Draws one token per row; seeded through ``generator`` so a seed repeats a run exactly."""

    def __init__(self, temperature: float = 1.0, top_k: Optional[int] = None, top_p: Optional[float] = None,
                 generator: Optional[torch.Generator] = None):
        self.temperature, self.top_k, self.top_p, self.generator = temperature, top_k, top_p, generator

    def __call__(self, logits: Tensor) -> Tensor:
        probs = sample_logits(logits, self.temperature, self.top_k, self.top_p).softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)


def greedy(logits: Tensor) -> Tensor:
    return logits.argmax(dim=-1)
