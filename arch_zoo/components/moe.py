"""Mixture-of-experts feed-forward (Shazeer et al. 2017; Switch, Fedus et al. 2022; Mixtral, Jiang et al. 2024).

A linear router scores the experts for each token; the token goes to its ``top_k`` experts and their
outputs are summed, weighted by the router's softmax renormalised over the chosen experts. The
router follows Hugging Face's Mixtral exactly (softmax over all experts in float32, top-k, divide by
the chosen weights' sum), which equals a softmax over the chosen logits alone.

The load-balancing loss is HF Mixtral's ``load_balancing_loss_func`` for one layer:
``n_experts * sum_e f_e * P_e``, f_e the share of tokens whose top-k includes expert e (summed over the
k slots) and P_e the mean router probability of e; padded tokens are left out. It is ``top_k`` when
routing is perfectly balanced (Switch's 1 for top-1) and grows as routing collapses onto few experts.

Across layers there are two readings, and they differ by a few percent (``aux_loss_layers``):
``mean``, the mean of the per-layer losses (each layer balanced on its own); ``pooled``, what HF's
``load_balancing_loss_func`` computes from all layers' router logits at once: f_e and P_e pooled over
every layer's tokens first, then one n_experts * sum_e f_e * P_e. Imported Mixtral models use ``pooled``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError, choice_error
from .feedforward import FEEDFORWARD, FFNContext, has_sublayer


@dataclass(frozen=True)
class MoEOptions:
    n_experts: int = 8
    top_k: int = 2
    expert: str = "swiglu"  # a feed-forward name; each expert has model.d_ff hidden units
    aux_loss_weight: float = 0.01  # on the load-balancing loss added to the training loss (Switch: 0.01)
    aux_loss_layers: str = "mean"  # across MoE layers: mean of per-layer losses, or pooled (HF Mixtral's)

    def __post_init__(self):
        if self.n_experts < 1:
            raise ConfigError("n_experts", f"must be positive, got {self.n_experts}")
        if not 1 <= self.top_k <= self.n_experts:
            raise ConfigError("top_k", f"must be between 1 and n_experts ({self.n_experts}), got {self.top_k}")
        experts = [n for n in FEEDFORWARD.choices() if n != "moe" and has_sublayer(n)]
        if self.expert not in experts:
            raise choice_error("expert", "feed-forward for an expert", self.expert, experts)
        if self.aux_loss_weight < 0:
            raise ConfigError("aux_loss_weight", f"must be >= 0, got {self.aux_loss_weight}")
        if self.aux_loss_layers not in AUX_LOSS_LAYERS:
            raise choice_error("aux_loss_layers", "way to combine layers' aux losses", self.aux_loss_layers,
                               list(AUX_LOSS_LAYERS))


AUX_LOSS_LAYERS = {  # how the load-balancing loss combines layers, as describe says it
    "mean": "the mean of each MoE layer's own loss",
    "pooled": "one loss over all MoE layers' routing pooled (HF Mixtral's)",
}


@FEEDFORWARD.register("moe", MoEOptions, "mixture of experts: a router sends each token to top_k of n_experts "
                      "feed-forward experts (Mixtral); adds a load-balancing loss in training")
class MixtureOfExperts(nn.Module):
    def __init__(self, options: MoEOptions, ctx: FFNContext):
        super().__init__()
        self.n_experts, self.top_k, self.aux_loss_weight = options.n_experts, options.top_k, options.aux_loss_weight
        self.aux_loss_layers = options.aux_loss_layers
        self.router = nn.Linear(ctx.d_model, options.n_experts, bias=False)
        expert = FEEDFORWARD.parse(options.expert, "expert")
        self.experts = nn.ModuleList(FEEDFORWARD.build(expert, ctx) for _ in range(options.n_experts))
        self.router_logits: Optional[Tensor] = None  # (..., n_experts) of the last forward, for the aux loss

    @staticmethod
    def notes(options: MoEOptions) -> str:
        """What describe adds to the options: how the training loss treats the routers."""
        return (f"training adds {options.aux_loss_weight} x the load-balancing loss: "
                f"{AUX_LOSS_LAYERS[options.aux_loss_layers]}")

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


def _routing_sums(router_logits: Tensor, top_k: int, attention_mask: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """(top-k hits per expert (E,), summed router probability per expert (E,), tokens) over the real tokens."""
    n_experts = router_logits.shape[-1]
    probs = router_logits.reshape(-1, n_experts).float().softmax(-1)
    hits = F.one_hot(probs.topk(top_k, dim=-1).indices, n_experts).float().sum(1)  # (T, E)
    if attention_mask is None:
        return hits.sum(0), probs.sum(0), probs.new_tensor(float(probs.shape[0]))
    w = attention_mask.reshape(-1).to(probs.dtype)
    return (hits * w[:, None]).sum(0), (probs * w[:, None]).sum(0), w.sum()


def _balance(hits: Tensor, probs: Tensor, tokens: Tensor) -> Tensor:
    tokens = tokens.clamp(min=1.0)
    return hits.shape[-1] * ((hits / tokens) * (probs / tokens)).sum()


def load_balancing_loss(router_logits: Tensor, top_k: int, attention_mask: Optional[Tensor] = None) -> Tensor:
    """HF Mixtral's load-balancing loss of one layer's router logits (..., E); ``attention_mask``
    (same leading shape, 1 for real tokens) leaves padded tokens out."""
    return _balance(*_routing_sums(router_logits, top_k, attention_mask))


def pooled_load_balancing_loss(router_logits: Sequence[Tensor], top_k: int,
                               attention_mask: Optional[Tensor] = None) -> Tensor:
    """HF's ``load_balancing_loss_func`` over several layers' router logits: hits, probabilities and
    token counts summed over the layers before the one product."""
    sums = [_routing_sums(logits, top_k, attention_mask) for logits in router_logits]
    return _balance(*(torch.stack(parts).sum(0) for parts in zip(*sums)))


def router_aux_loss(model: nn.Module, masks: Mapping[str, Optional[Tensor]]) -> Optional[Tensor]:
    """aux_loss_weight x the load-balancing loss of the model's last forward, over its MoE layers;
    None for a model without experts. ``masks``: padding mask (B, L) per stack attribute ('encoder',
    'decoder'), or None.

    A ``mean`` layer counts as its own loss; ``pooled`` layers of one stack with the same experts,
    top_k and weight share one pooled loss, which counts once per layer it pools. The result is the
    mean over layers of those: the per-layer mean when every layer is ``mean``, HF's pooled loss
    times the weight when every layer is ``pooled``."""
    terms: List[Tuple[int, Tensor]] = []  # (layers it stands for, weighted loss)
    pools: Dict[tuple, List[Tensor]] = {}
    for name, mask in masks.items():
        stack = getattr(model, name, None)
        if stack is None:
            continue
        for m in stack.modules():
            if not isinstance(m, MixtureOfExperts) or m.router_logits is None:
                continue
            if m.aux_loss_layers == "pooled":
                pools.setdefault((name, m.n_experts, m.top_k, m.aux_loss_weight), []).append(m.router_logits)
            else:
                terms.append((1, m.aux_loss_weight * load_balancing_loss(m.router_logits, m.top_k, mask)))
    for (name, _, top_k, weight), logits in pools.items():
        terms.append((len(logits), weight * pooled_load_balancing_loss(logits, top_k, masks[name])))
    if not terms:
        return None
    return sum(n * loss for n, loss in terms) / sum(n for n, _ in terms)
