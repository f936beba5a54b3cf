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

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError, choice_error
from .feedforward import FEEDFORWARD, FFNContext, has_sublayer


@dataclass(frozen=True)
class MoEOptions:
    n_experts: int = 8
    top_k: int = 2
    expert: Any = "swiglu"  # the routed and shared experts' feed-forward: a name or {name: ..., <options>}
    d_ff: Optional[int] = None  # hidden units of each routed expert; null: model.d_ff
    aux_loss_weight: float = 0.01  # on the load-balancing loss added to the training loss (Switch: 0.01)
    aux_loss_layers: str = "mean"  # across MoE layers: mean of per-layer losses, or pooled (HF Mixtral's)
    scoring: Literal["softmax", "sigmoid"] = "softmax"  # router scores: softmax (Mixtral), sigmoid (DeepSeek-V3)
    norm_topk_prob: bool = True  # the chosen experts' weights divided by their sum
    routed_scaling_factor: float = 1.0  # multiplies the routed experts' weights (DeepSeek-V3: 2.5)
    router_bias: bool = False  # a learned bias on the router's logits (gpt-oss)
    n_group: int = 1  # group-limited routing: experts in n_group groups ...
    topk_group: int = 1  # ... of which a token's experts come from its topk_group best (DeepSeek-V3: 8, 4)
    n_shared_experts: int = 0  # experts every token runs through, beside the routed ones
    shared_d_ff: Optional[int] = None  # hidden units of the shared experts together; null: n_shared x d_ff
    shared_gate: bool = False  # a sigmoid gate per token on the shared experts' output (Qwen3-Next)
    selection_bias: bool = False  # a per-expert bias added to the scores for choosing experts only
    bias_update_speed: float = 0.0  # aux-loss-free balancing: the bias moves this much per training step

    def __post_init__(self):
        if self.n_experts < 1:
            raise ConfigError("n_experts", f"must be positive, got {self.n_experts}")
        if not 1 <= self.top_k <= self.n_experts:
            raise ConfigError("top_k", f"must be between 1 and n_experts ({self.n_experts}), got {self.top_k}")
        experts = [n for n in FEEDFORWARD.choices() if n != "moe" and has_sublayer(n)]
        name = expert_name(self.expert)
        if name not in experts:
            raise choice_error("expert", "feed-forward for an expert", name, experts)
        # its options (an error names expert.<option>), written out in full: one spelling per expert
        spec = FEEDFORWARD.parse(self.expert, "expert").to_dict()
        object.__setattr__(self, "expert", spec if len(spec) > 1 else spec["name"])
        if self.aux_loss_weight < 0:
            raise ConfigError("aux_loss_weight", f"must be >= 0, got {self.aux_loss_weight}")
        if self.aux_loss_layers not in AUX_LOSS_LAYERS:
            raise choice_error("aux_loss_layers", "way to combine layers' aux losses", self.aux_loss_layers,
                               list(AUX_LOSS_LAYERS))
        for name in ("d_ff", "shared_d_ff", "n_group", "topk_group"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(name, f"must be positive, got {value}")
        if self.n_shared_experts < 0:
            raise ConfigError("n_shared_experts", f"must be >= 0, got {self.n_shared_experts}")
        if self.n_experts % self.n_group:
            raise ConfigError("n_group", f"must divide n_experts ({self.n_experts}), got {self.n_group}")
        if self.topk_group > self.n_group:
            raise ConfigError("topk_group", f"must be at most n_group ({self.n_group}), got {self.topk_group}")
        if self.top_k > self.topk_group * (self.n_experts // self.n_group):
            raise ConfigError("top_k", f"must be at most the experts in topk_group groups "
                                       f"({self.topk_group * (self.n_experts // self.n_group)}), got {self.top_k}")
        if (self.shared_d_ff is not None or self.shared_gate) and not self.n_shared_experts:
            key = "shared_d_ff" if self.shared_d_ff is not None else "shared_gate"
            raise ConfigError(key, "needs n_shared_experts >= 1")
        if self.bias_update_speed < 0:
            raise ConfigError("bias_update_speed", f"must be >= 0, got {self.bias_update_speed}")
        if self.bias_update_speed and not self.selection_bias:
            raise ConfigError("bias_update_speed", "needs selection_bias: true (the bias it updates)")


def expert_name(expert: Any) -> Any:
    """The feed-forward an ``expert`` value names (a name, or a mapping with its options)."""
    if isinstance(expert, Mapping):
        if "name" not in expert:
            raise ConfigError("expert", "a feed-forward for an expert needs 'name'")
        return expert["name"]
    if not isinstance(expert, str):
        raise ConfigError("expert", f"expected a feed-forward name or {{name: ..., <options>}}, got {expert!r}")
    return expert


AUX_LOSS_LAYERS = {  # how the load-balancing loss combines layers, as describe says it
    "mean": "the mean of each MoE layer's own loss",
    "pooled": "one loss over all MoE layers' routing pooled (HF Mixtral's)",
}


@FEEDFORWARD.register("moe", MoEOptions, "mixture of experts: a router sends each token to top_k of n_experts "
                      "feed-forward experts (Mixtral), optionally beside shared experts, with sigmoid or "
                      "group-limited routing (DeepSeek-V3); adds a load-balancing loss in training")
class MixtureOfExperts(nn.Module):
    def __init__(self, options: MoEOptions, ctx: FFNContext):
        super().__init__()
        self.options = options
        self.n_experts, self.top_k, self.aux_loss_weight = options.n_experts, options.top_k, options.aux_loss_weight
        self.aux_loss_layers = options.aux_loss_layers
        self.router = nn.Linear(ctx.d_model, options.n_experts, bias=options.router_bias)
        expert = FEEDFORWARD.parse(options.expert, "expert")
        routed = replace(ctx, d_ff=options.d_ff or ctx.d_ff)
        self.experts = nn.ModuleList(FEEDFORWARD.build(expert, routed) for _ in range(options.n_experts))
        if options.n_shared_experts:  # one feed-forward as wide as all shared experts: the same function
            width = options.shared_d_ff or options.n_shared_experts * routed.d_ff
            self.shared = FEEDFORWARD.build(expert, replace(ctx, d_ff=width))
            self.shared_gate = nn.Linear(ctx.d_model, 1, bias=False) if options.shared_gate else None
        if options.selection_bias:  # a buffer: it is trained by the load it sees, not by gradients
            self.register_buffer("score_bias", torch.zeros(options.n_experts))
        self.router_logits: Optional[Tensor] = None  # (..., n_experts) of the last forward, for the aux loss
        self.routing: Optional[Tuple[Tensor, Tensor]] = None  # (probabilities, chosen (..., k)) of the last forward

    @staticmethod
    def notes(options: MoEOptions) -> str:
        """What describe adds to the options: how the training loss treats the routers."""
        notes = (f"training adds {options.aux_loss_weight} x the load-balancing loss: "
                 f"{AUX_LOSS_LAYERS[options.aux_loss_layers]}")
        if options.bias_update_speed:
            notes += (f"; aux-loss-free balancing: each training step moves the selection bias of an "
                      f"overloaded expert down, an underloaded one up, by {options.bias_update_speed}")
        return notes

    @staticmethod
    def gated_for(options: MoEOptions) -> bool:
        """d_ff's default follows the expert's kind."""
        return FEEDFORWARD.get(expert_name(options.expert)).factory.gated

    def active_modules(self) -> List[Tuple[nn.Module, int]]:
        """What one token runs through, with multiplicities: parameter and FLOP counts use this."""
        shared = [(m, 1) for m in (getattr(self, "shared", None), getattr(self, "shared_gate", None)) if m is not None]
        return [(self.router, 1), (self.experts[0], self.top_k), *shared]

    def route(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """(router logits (T, E), chosen experts (T, k), their weights (T, k)) for tokens x (T, d).
        Softmax scoring in float32 then top-k (HF Mixtral, Qwen3-Next); sigmoid scoring with the
        selection bias and group limit as DeepSeek-V3: a group scores the sum of its two best."""
        o = self.options
        logits = self.router(x)
        scores = logits.float().softmax(-1) if o.scoring == "softmax" else logits.float().sigmoid()
        choice = scores + self.score_bias if o.selection_bias else scores
        if o.n_group > 1:
            grouped = choice.view(-1, o.n_group, o.n_experts // o.n_group)
            best = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(-1)  # (T, n_group)
            keep = torch.zeros_like(best).scatter_(1, best.topk(o.topk_group, dim=-1).indices, 1.0)
            choice = choice.masked_fill(~keep.bool().repeat_interleave(grouped.shape[-1], -1), float("-inf"))
        chosen = choice.topk(self.top_k, dim=-1).indices
        weights = scores.gather(-1, chosen)
        if o.norm_topk_prob:
            weights = weights / (weights.sum(-1, keepdim=True) + (1e-20 if o.scoring == "sigmoid" else 0.0))
        probs = scores if o.scoring == "softmax" else scores / scores.sum(-1, keepdim=True)
        self.routing = (probs, chosen)
        return logits, chosen, (weights * o.routed_scaling_factor).to(x.dtype)

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])
        logits, chosen, weights = self.route(flat)
        self.router_logits = logits.view(*x.shape[:-1], self.n_experts)
        out = flat.new_zeros(flat.shape)
        for e, expert in enumerate(self.experts):  # each expert once, on the tokens routed to it
            token, slot = torch.where(chosen == e)
            y = expert(flat[token]) * weights[token, slot].unsqueeze(-1)
            out.index_add_(0, token, y.to(out.dtype))
        if hasattr(self, "shared"):
            shared = self.shared(flat)
            out = out + (shared if self.shared_gate is None else torch.sigmoid(self.shared_gate(flat)) * shared)
        return out.view(x.shape)

    @torch.no_grad()
    def update_selection_bias(self, mask: Optional[Tensor]) -> None:
        """DeepSeek-V3's auxiliary-loss-free balancing, after a training step's forward: each expert's
        bias moves by bias_update_speed towards the mean load, sign(mean load - its load), counting
        the real tokens routed to it in that forward."""
        if not self.options.bias_update_speed or self.routing is None:
            return
        chosen = self.routing[1]
        hits = F.one_hot(chosen, self.n_experts).float().sum(1)  # (T, E)
        if mask is not None:
            hits = hits * mask.reshape(-1, 1).to(hits.dtype)
        load = hits.sum(0)
        self.score_bias.add_(self.options.bias_update_speed * torch.sign(load.mean() - load))


def _routing_sums(probs: Tensor, chosen: Tensor, attention_mask: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """(top-k hits per expert (E,), summed router probability per expert (E,), tokens) over the real
    tokens, from router probabilities (..., E) and the experts chosen (..., k)."""
    n_experts = probs.shape[-1]
    probs = probs.reshape(-1, n_experts).float()
    hits = F.one_hot(chosen.reshape(probs.shape[0], -1), n_experts).float().sum(1)  # (T, E)
    if attention_mask is None:
        return hits.sum(0), probs.sum(0), probs.new_tensor(float(probs.shape[0]))
    w = attention_mask.reshape(-1).to(probs.dtype)
    return (hits * w[:, None]).sum(0), (probs * w[:, None]).sum(0), w.sum()


def _softmax_routing(router_logits: Tensor, top_k: int) -> Tuple[Tensor, Tensor]:
    probs = router_logits.float().softmax(-1)
    return probs, probs.topk(top_k, dim=-1).indices


def _balance(hits: Tensor, probs: Tensor, tokens: Tensor) -> Tensor:
    tokens = tokens.clamp(min=1.0)
    return hits.shape[-1] * ((hits / tokens) * (probs / tokens)).sum()


def load_balancing_loss(router_logits: Tensor, top_k: int, attention_mask: Optional[Tensor] = None) -> Tensor:
    """HF Mixtral's load-balancing loss of one layer's router logits (..., E); ``attention_mask``
    (same leading shape, 1 for real tokens) leaves padded tokens out."""
    return _balance(*_routing_sums(*_softmax_routing(router_logits, top_k), attention_mask))


def pooled_load_balancing_loss(router_logits: Sequence[Tensor], top_k: int,
                               attention_mask: Optional[Tensor] = None) -> Tensor:
    """HF's ``load_balancing_loss_func`` over several layers' router logits: hits, probabilities and
    token counts summed over the layers before the one product."""
    return _pooled([_softmax_routing(logits, top_k) for logits in router_logits], attention_mask)


def _pooled(routings: Sequence[Tuple[Tensor, Tensor]], attention_mask: Optional[Tensor]) -> Tensor:
    sums = [_routing_sums(probs, chosen, attention_mask) for probs, chosen in routings]
    return _balance(*(torch.stack(parts).sum(0) for parts in zip(*sums)))


def _routed_layers(model: nn.Module, masks: Mapping[str, Optional[Tensor]]):
    """(stack name, its mask, MoE layer) for each MoE layer that routed in the model's last forward."""
    for name, mask in masks.items():
        stack = getattr(model, name, None)
        for m in stack.modules() if stack is not None else ():
            if isinstance(m, MixtureOfExperts) and m.routing is not None:
                yield name, mask, m


def router_aux_loss(model: nn.Module, masks: Mapping[str, Optional[Tensor]]) -> Optional[Tensor]:
    """aux_loss_weight x the load-balancing loss of the model's last forward, over its MoE layers;
    None for a model without experts. ``masks``: padding mask (B, L) per stack attribute ('encoder',
    'decoder'), or None.

    f_e counts the experts each layer actually chose (with its group limit and selection bias); P_e
    is the router's softmax, or for sigmoid scores each token's scores divided by their sum
    (DeepSeek-V3's sequence-wise balance loss, taken over the batch).

    A ``mean`` layer counts as its own loss; ``pooled`` layers of one stack with the same experts,
    top_k and weight share one pooled loss, which counts once per layer it pools. The result is the
    mean over layers of those: the per-layer mean when every layer is ``mean``, HF's pooled loss
    times the weight when every layer is ``pooled``."""
    terms: List[Tuple[int, Tensor]] = []  # (layers it stands for, weighted loss)
    pools: Dict[tuple, List[Tuple[Tensor, Tensor]]] = {}
    for name, mask, m in _routed_layers(model, masks):
        if m.aux_loss_layers == "pooled":
            pools.setdefault((name, m.n_experts, m.top_k, m.aux_loss_weight), []).append(m.routing)
        else:
            terms.append((1, m.aux_loss_weight * _balance(*_routing_sums(*m.routing, mask))))
    for (name, _, _, weight), routings in pools.items():
        terms.append((len(routings), weight * _pooled(routings, masks[name])))
    if not terms:
        return None
    return sum(n * loss for n, loss in terms) / sum(n for n, _ in terms)


def update_selection_biases(model: nn.Module, masks: Mapping[str, Optional[Tensor]]) -> None:
    """Once per training step, after its forward: each MoE layer with aux-loss-free balancing
    (``bias_update_speed``) moves its selection bias by the load it saw on the real tokens."""
    for _, mask, m in _routed_layers(model, masks):
        m.update_selection_bias(mask)
