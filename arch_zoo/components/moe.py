"""Mixture-of-experts feed-forward (Shazeer et al. 2017; Switch, Fedus et al. 2022; Mixtral, Jiang et al. 2024).

A linear router scores the experts for each token; the token goes to its ``top_k`` experts and their
outputs are summed, weighted by the router's softmax renormalised over the chosen experts. The
router follows Hugging Face's Mixtral exactly (softmax over all experts in float32, top-k, divide by
the chosen weights' sum), which equals a softmax over the chosen logits alone.

The load-balancing loss is HF Mixtral's ``load_balancing_loss_func`` for one layer:
``n_experts * sum_e f_e * P_e``, f_e the share of tokens whose top-k includes expert e (summed over the
k slots) and P_e the mean router probability of e; padded tokens are left out. It is ``top_k`` when
routing is perfectly balanced (Switch's 1 for top-1) and grows as routing collapses onto few experts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError, choice_error
from .feedforward import FEEDFORWARD, FFNContext


@dataclass(frozen=True)
class MoEOptions:
    n_experts: int = 8
    top_k: int = 2
    expert: str = "swiglu"  # a feed-forward name; each expert has model.d_ff hidden units
    aux_loss_weight: float = 0.01  # on the load-balancing loss added to the training loss (Switch: 0.01)

    def __post_init__(self):
        if self.n_experts < 1:
            raise ConfigError("n_experts", f"must be positive, got {self.n_experts}")
        if not 1 <= self.top_k <= self.n_experts:
            raise ConfigError("top_k", f"must be between 1 and n_experts ({self.n_experts}), got {self.top_k}")
        experts = [n for n in FEEDFORWARD.choices() if n != "moe"]
        if self.expert not in experts:
            raise choice_error("expert", "feed-forward for an expert", self.expert, experts)
        if self.aux_loss_weight < 0:
            raise ConfigError("aux_loss_weight", f"must be >= 0, got {self.aux_loss_weight}")


@FEEDFORWARD.register("moe", MoEOptions, "mixture of experts: a router sends each token to top_k of n_experts "
                      "feed-forward experts (Mixtral); adds a load-balancing loss in training")
class MixtureOfExperts(nn.Module):
    def __init__(self, options: MoEOptions, ctx: FFNContext):
        super().__init__()
        self.n_experts, self.top_k, self.aux_loss_weight = options.n_experts, options.top_k, options.aux_loss_weight
        self.router = nn.Linear(ctx.d_model, options.n_experts, bias=False)
        expert = FEEDFORWARD.parse(options.expert, "expert")
        self.experts = nn.ModuleList(FEEDFORWARD.build(expert, ctx) for _ in range(options.n_experts))
        self.router_logits: Optional[Tensor] = None  # (..., n_experts) of the last forward, for the aux loss

    @staticmethod
    def gated_for(options: MoEOptions) -> bool:
        """d_ff's default follows the expert's kind."""
        return FEEDFORWARD.get(options.expert).factory.gated

    def active_modules(self) -> List[Tuple[nn.Module, int]]:
        """What one token runs through, with multiplicities: parameter and FLOP counts use this."""
        return [(self.router, 1), (self.experts[0], self.top_k)]

    def route(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """(router logits (T, E), chosen experts (T, k), their weights (T, k)) for tokens x (T, d)."""
        logits = self.router(x)
        weights, chosen = logits.softmax(-1, dtype=torch.float32).topk(self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        return logits, chosen, weights.to(x.dtype)

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])
        logits, chosen, weights = self.route(flat)
        self.router_logits = logits.view(*x.shape[:-1], self.n_experts)
        out = flat.new_zeros(flat.shape)
        for e, expert in enumerate(self.experts):  # each expert once, on the tokens routed to it
            token, slot = torch.where(chosen == e)
            y = expert(flat[token]) * weights[token, slot].unsqueeze(-1)
            out.index_add_(0, token, y.to(out.dtype))
        return out.view(x.shape)


def load_balancing_loss(router_logits: Tensor, top_k: int, attention_mask: Optional[Tensor] = None) -> Tensor:
    """HF Mixtral's load-balancing loss of one layer's router logits (..., E); ``attention_mask``
    (same leading shape, 1 for real tokens) leaves padded tokens out."""
    n_experts = router_logits.shape[-1]
    probs = router_logits.reshape(-1, n_experts).float().softmax(-1)
    hits = F.one_hot(probs.topk(top_k, dim=-1).indices, n_experts).float()  # (T, k, E)
    if attention_mask is None:
        tokens_per_expert, prob_per_expert = hits.mean(0), probs.mean(0)
    else:
        w = attention_mask.reshape(-1).to(probs.dtype)
        total = w.sum().clamp(min=1.0)
        tokens_per_expert = (hits * w[:, None, None]).sum(0) / total
        prob_per_expert = (probs * w[:, None]).sum(0) / total
    return n_experts * (tokens_per_expert * prob_per_expert).sum()


def router_aux_loss(model: nn.Module, masks: Mapping[str, Optional[Tensor]]) -> Optional[Tensor]:
    """Mean over the model's MoE layers of aux_loss_weight x their load-balancing loss in the last
    forward; None for a model without experts. ``masks``: padding mask (B, L) per stack attribute
    ('encoder', 'decoder'), or None."""
    losses = []
    for name, mask in masks.items():
        stack = getattr(model, name, None)
        if stack is None:
            continue
        for m in stack.modules():
            if isinstance(m, MixtureOfExperts) and m.router_logits is not None:
                losses.append(m.aux_loss_weight * load_balancing_loss(m.router_logits, m.top_k, mask))
    return torch.stack(losses).mean() if losses else None
