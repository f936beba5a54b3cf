"""Attention diagnostics: per layer, the attention entropy, the largest attention logit and the
attention mass on the first token.

Wortsman et al. (2023) trace one high-learning-rate instability to attention logits that grow until
each query puts all its weight on one key (entropy collapse); QK-norm prevents it. Both signals are
invisible in the loss until it is too late, so ``train.attention_diagnostics`` records them on the
evaluation batches (and ``train.attention_diagnostics_every`` on training steps).

While recording, every attention module hands its q, k and mask to the recorder, which computes the
scores again explicitly (``attention_logits``: the scale, soft-cap and score biases the model applies),
so the sdpa kernel's output is untouched and a model that does not record does no extra work. Per
layer it reports, over the real queries of the batch (padded queries and queries with nothing to
attend excluded), all heads alike:

* ``attn_entropy``: the mean over queries and heads of -sum_k p log p (nats), over the keys the
  query may attend (a masked key has p = 0 and adds nothing);
* ``attn_max_logit``: the largest pre-softmax score any query gives a key it may attend;
* ``attn_first_token``: the mean over queries and heads of the weight on the row's first real token,
  the attention sink of Xiao et al. (2024) (0 where a pattern hides it: a sliding window past it);
  also as the mean over the attention modules recorded (``attn_first_token`` with no layer name).

A layer with learned sinks (gpt-oss) puts them in the softmax as the model does: the sink's share
counts in the entropy as one more outcome, and is no token's mass.

The explicit scores cost (batch, heads, q_len, k_len) floats per layer while recording."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention, attention_logits
from .masks import AttentionMask

STACKS = ("encoder", "decoder")


def attention_layers(model: nn.Module) -> List[Tuple[str, str, MultiHeadAttention]]:
    """(name, stack, module) of every attention module: ``layer_{i}`` (and ``layer_{i}.cross``) in a
    one-stack model, ``encoder.layer_{i}`` / ``decoder.layer_{i}[.cross]`` in an encoder-decoder."""
    stacks = [name for name in STACKS if isinstance(getattr(model, name, None), nn.Module)]
    out = []
    for stack in stacks:
        prefix = f"{stack}." if len(stacks) > 1 else ""
        for i, layer in enumerate(stack_layers(getattr(model, stack))):
            for m in layer.modules():
                # every module that hands its q, k and mask to a recorder: attention's, MLA's
                if isinstance(m, MultiHeadAttention) or getattr(type(m), "records_attention", False):
                    out.append((f"{prefix}layer_{i}" + (".cross" if m.cross else ""), stack, m))
    return out


def stack_layers(stack: nn.Module) -> List[nn.Module]:
    return list(getattr(stack, "layers", []))


class AttentionRecorder:
    """Sums per layer over the batches recorded since ``reset``; ``results()`` gives the metrics."""

    def __init__(self, model: nn.Module):
        self.layers = attention_layers(model)
        self._names = {id(m): (name, stack) for name, stack, m in self.layers}
        self.query_masks: Mapping[str, Optional[Tensor]] = {}
        self.reset()

    def reset(self) -> None:
        self.entropy: Dict[str, float] = {}
        self.queries: Dict[str, float] = {}
        self.max_logit: Dict[str, float] = {}
        self.first: Dict[str, float] = {}

    @contextmanager
    def recording(self, query_masks: Mapping[str, Optional[Tensor]]) -> Iterator["AttentionRecorder"]:
        """Record the forwards run inside; ``query_masks``: each stack's (B, L) real-token mask (or None)."""
        self.query_masks = query_masks
        for _, _, m in self.layers:
            m.recorder = self
        try:
            yield self
        finally:
            for _, _, m in self.layers:
                m.recorder = None
            self.query_masks = {}

    @torch.no_grad()
    def __call__(self, module: MultiHeadAttention, q: Tensor, k: Tensor, mask: AttentionMask) -> None:
        name, stack = self._names[id(module)]
        scores = attention_logits(q.detach(), k.detach(), mask, module.backend.scale, module.backend.softcap)
        real = self._real_queries(stack, mask, q.shape[-2], q.shape[0], q.device)
        p = probabilities(scores, module.sinks)
        (total, count), top = entropy_and_max(scores, real, p)
        first = p.gather(-1, self._first_keys(stack, k.shape[-2], q.shape[0], q.device).view(-1, 1, 1, 1)
                         .expand(*p.shape[:-1], 1)).squeeze(-1)  # (B, H, Lq)
        self.first[name] = self.first.get(name, 0.0) + float(first[real[:, None, :].expand_as(first)].sum())
        self.entropy[name] = self.entropy.get(name, 0.0) + total
        self.queries[name] = self.queries.get(name, 0.0) + count
        if top is not None:
            self.max_logit[name] = max(self.max_logit.get(name, float("-inf")), top)

    def _real_queries(self, stack: str, mask: AttentionMask, q_len: int, batch: int, device) -> Tensor:
        """(B, q_len) bool: queries that are real tokens (the last q_len of the stack's mask: a cached
        step's new ones) and have something to attend (``keep``)."""
        given = self.query_masks.get(stack)
        real = (given[:, -q_len:].to(device).bool() if given is not None
                else torch.ones(batch, q_len, dtype=torch.bool, device=device))
        if mask.keep is not None:
            real = real & mask.keep[:, 0, :, 0].bool()
        return real

    def _first_keys(self, stack: str, k_len: int, batch: int, device) -> Tensor:
        """(B,) the key column of each row's first real token: the stack's mask's first 1 where it spans
        the keys (a forward over whole sequences), else column 0."""
        given = self.query_masks.get(stack)
        if given is None or given.shape[-1] != k_len:
            return torch.zeros(batch, dtype=torch.long, device=device)
        return given.to(device).float().argmax(-1)

    def results(self) -> Dict[str, float]:
        """``attn_entropy/NAME``, ``attn_max_logit/NAME`` and ``attn_first_token/NAME`` per layer recorded,
        and ``attn_first_token``: the mean of the layers' values, one number for a run's sink."""
        out: Dict[str, float] = {}
        first = []
        for name, _, _ in self.layers:
            if self.queries.get(name):
                out[f"attn_entropy/{name}"] = self.entropy[name] / self.queries[name]
                first.append(self.first[name] / self.queries[name])
                out[f"attn_first_token/{name}"] = first[-1]
            if name in self.max_logit:
                out[f"attn_max_logit/{name}"] = self.max_logit[name]
        if first:
            out["attn_first_token"] = sum(first) / len(first)
        return out


def probabilities(scores: Tensor, sinks: Optional[Tensor]) -> Tensor:
    """The keys' softmax weights (B, H, Lq, Lk), and with ``sinks`` (H,) the sink's as a last column."""
    if sinks is None:
        return scores.softmax(-1)
    sink = sinks.detach().float().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    return torch.cat((scores, sink), dim=-1).softmax(-1)


def entropy_and_max(scores: Tensor, real: Tensor, p: Optional[Tensor] = None
                    ) -> Tuple[Tuple[float, float], Optional[float]]:
    """((sum of entropies, number of (query, head) rows), largest allowed score) over the ``real``
    (B, Lq) queries of (B, H, Lq, Lk) scores with -inf where a key is masked; ``p`` their weights
    (default: the softmax of the scores)."""
    p = scores.softmax(-1) if p is None else p
    rows = torch.special.entr(p).sum(-1)  # (B, H, Lq); entr(0) = 0: masked keys add nothing
    use = real[:, None, :].expand_as(rows)
    if not use.any():
        return (0.0, 0.0), None
    top = scores.amax(-1)[use].max()
    return (float(rows[use].sum()), float(use.sum())), float(top)
