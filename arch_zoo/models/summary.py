"""Parameter counts by part, for ``arch-zoo describe`` and run summaries (FLOPs: ``flops``)."""
from __future__ import annotations

from typing import Dict, Iterable

from torch import nn

from .blocks import Stack
from .flops import flops_per_token  # noqa: F401  (re-exported: describe, run summaries and users import it here)
from .transformer import TransformerModel


def _count(params: Iterable[nn.Parameter], seen: set) -> int:
    total = 0
    for p in params:
        if id(p) not in seen:  # tied weights count once, where first met
            seen.add(id(p))
            total += p.numel()
    return total


def parameter_breakdown(model: TransformerModel) -> Dict[str, int]:
    """Ordered {part: parameter count}; tied parameters are counted once, in the first part."""
    seen: set = set()
    parts: Dict[str, int] = {}
    embeds = [model.embed] + ([model.decoder_embed] if hasattr(model, "decoder_embed") else [])
    parts["token embeddings"] = _count((p for e in embeds for p in e.parameters()), seen)
    if getattr(model, "token_type", None) is not None:
        parts["token-type embeddings"] = _count(model.token_type.parameters(), seen)
    for name in ("encoder", "decoder"):
        stack = getattr(model, name, None)
        if not isinstance(stack, Stack):
            continue
        parts[f"{name} positions"] = _count((p for s in (stack.position, stack.layer_positions) for p in s.parameters()),
                                            seen)
        layers = stack.layers
        for l in layers:  # by kind of mixer: attention, mixer
            part = f"{name} {l.mixer.sublayer.part}"
            parts[part] = parts.get(part, 0) + _count(l.mixer.sublayer.parameters(), seen)
        if any(l.cross_attn is not None for l in layers):
            parts[f"{name} cross-attention"] = _count(
                (p for l in layers for p in l.cross_attn.sublayer.parameters()), seen)
        parts[f"{name} feed-forward"] = _count((p for l in layers if l.ffn is not None for p in l.ffn.sublayer.parameters()),
                                               seen)
        parts[f"{name} placement"] = _count((p for l in layers for p in l.placement.parameters()), seen)
        parts[f"{name} norms"] = _count(stack.parameters(), seen)  # what is left: the norms
    parts["head"] = _count(model.head.parameters(), seen)
    parts["other"] = _count(model.parameters(), seen)
    return {k: v for k, v in parts.items() if v or k in ("head",)}


def count_parameters(model: nn.Module) -> int:
    return _count(model.parameters(), set())


def active_parameters(model: nn.Module) -> int:
    """Parameters one token runs through: the total less the experts a mixture-of-experts layer
    skips (a module with ``active_modules()`` says which of its parts a token uses, how often)."""
    skipped = 0
    for m in model.modules():
        if hasattr(m, "active_modules"):
            used = sum(n * count_parameters(part) for part, n in m.active_modules())
            skipped += count_parameters(m) - used
    return count_parameters(model) - skipped


def embedding_parameters(model: TransformerModel) -> int:
    """Token, token-type and position embeddings (Kaplan et al. 2020 leave them out of N): what
    ``parameter_breakdown`` files under embeddings and positions. A tied head adds nothing; an untied
    one stays among the non-embedding parameters, as it is a matmul every token runs through."""
    return sum(v for k, v in parameter_breakdown(model).items() if "embeddings" in k or k.endswith(" positions"))


def non_embedding_parameters(model: TransformerModel) -> int:
    return count_parameters(model) - embedding_parameters(model)
