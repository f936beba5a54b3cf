"""Forward FLOPs of a model on sequences of given lengths, each layer counted at its own shape.

Matmuls count 2 FLOPs per multiply-add: 2 * in * out per linear layer a token runs through (only the
active experts of a mixture-of-experts layer). Each layer's mixer adds what it does beyond its linear
layers (``Mixer.mixing_flops``): attention 4 * heads * head_dim of that layer per key a query sees (q.k
and weights.v), over the keys its attention pattern lets a query see (causal global attention:
(L + 1) / 2 on average; bidirectional: L; a sliding window: fewer); a recurrent mixer a cost per token
that does not grow with L. Cross-attention is counted as attention over every source key.
In an encoder-decoder the decoder's cross-attention projects the memory to keys and values once per
source token and every target token sees all the source keys. Padding is not counted, nor is
recomputation: this is the useful work, which is what MFU divides by the device's peak.

Lengths are ``{(length, target_length): sequences}``. Decoder-only and encoder models use
target_length 0; for an encoder-decoder ``length`` is the source and ``target_length`` the
decoder's input. A figure *per token* divides by every token, source and target alike, which is
what the training throughput meter counts."""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

from torch import nn

from ..components.flops import linear_flops  # noqa: F401  (long imported from here)
from ..config.kinds import kind_of
from .blocks import Stack

LengthCounts = Mapping[Tuple[int, int], int]


def _per_key(attention: nn.Module) -> int:
    shape = attention.shape
    return 4 * shape.n_heads * shape.head_dim


class FlopCounter:
    """Forward FLOPs of one model at any lengths; the length-independent parts are read once."""

    def __init__(self, model: nn.Module):
        self.encoder_decoder = kind_of(model.config).cross_attention  # a source and a target
        self._stacks: List[tuple] = []
        for name in ("encoder", "decoder"):
            stack = getattr(model, name, None)
            if not isinstance(stack, Stack):
                continue
            crosses = [l.cross_attn.sublayer for l in stack.layers if l.cross_attn is not None]
            memory = sum(linear_flops(c.kv) for c in crosses)  # runs over the source, not the target
            mixers = [l.mixer.sublayer for l in stack.layers]
            self._stacks.append((name, stack.causal, float(linear_flops(stack) - memory), float(memory), mixers,
                                 float(sum(_per_key(c) for c in crosses))))
        self._head = float(linear_flops(model.head))
        self._seen: Dict[Tuple[int, int], Dict[str, float]] = {}

    def decode_step(self, context: int, source: int = 0) -> float:
        """FLOPs of one decoding step of the decoder after ``context`` positions (an encoder-decoder's
        cross-attention over ``source`` memory keys): every matmul once, each mixer's step, the head."""
        name, causal, per_token, memory, mixers, cross_per_key = next(s for s in self._stacks if s[0] == "decoder")
        return per_token + sum(m.step_mixing_flops(context) for m in mixers) + cross_per_key * source + self._head

    def tokens(self, length: int, target: int = 0) -> int:
        return length + (target if self.encoder_decoder else 0)

    def sequence(self, length: int, target: int = 0) -> Dict[str, float]:
        """{part: forward FLOPs} of one sequence (an encoder-decoder: a source of ``length`` tokens and a
        target of ``target``), with ``total``."""
        key = (int(length), int(target) if self.encoder_decoder else 0)
        if key not in self._seen:
            source, target = key
            out: Dict[str, float] = {}
            for name, causal, per_token, memory, mixers, cross_per_key in self._stacks:
                n = target if self.encoder_decoder and name == "decoder" else source
                out[f"{name} matmuls"] = n * per_token + source * memory
                for m in mixers:  # the mixing beyond the matmuls, by kind of mixer (attention, mixer)
                    part = f"{name} {m.part}"
                    out[part] = out.get(part, 0.0) + (m.mixing_flops(n, causal) if n else 0.0)
                if cross_per_key:
                    out[f"{name} attention"] = out.get(f"{name} attention", 0.0) + n * cross_per_key * source
            out["head"] = (target if self.encoder_decoder else source) * self._head
            out["total"] = sum(out.values())
            self._seen[key] = out
        return self._seen[key]

    def total(self, counts: LengthCounts) -> Dict[str, float]:
        """{part: forward FLOPs} summed over ``counts`` sequences of each length."""
        out: Dict[str, float] = {}
        for (length, target), n in counts.items():
            for part, flops in self.sequence(length, target).items():
                out[part] = out.get(part, 0.0) + n * flops
        return out

    def per_token(self, counts: LengthCounts) -> Dict[str, float]:
        """{part: forward FLOPs per token} over ``counts``: every token counted, source and target alike."""
        tokens = sum(n * self.tokens(length, target) for (length, target), n in counts.items())
        if not tokens:
            raise ValueError("FLOPs per token of no tokens")
        return {part: flops / tokens for part, flops in self.total(counts).items()}


def at_length(model: nn.Module, seq_len: int, target_len: Optional[int] = None) -> LengthCounts:
    """One sequence of ``seq_len`` tokens; an encoder-decoder's target is ``target_len`` (default: as long)."""
    if not kind_of(model.config).cross_attention:
        return {(seq_len, 0): 1}
    return {(seq_len, seq_len if target_len is None else target_len): 1}


def flops_per_token(model: nn.Module, seq_len: int, target_len: Optional[int] = None) -> Dict[str, float]:
    """Forward FLOPs per token at context length ``seq_len`` (multiply by ~3 for a training step),
    by part and ``total``. For an encoder-decoder: a source of ``seq_len`` and a target of
    ``target_len`` tokens (default: as long), per token of either."""
    return FlopCounter(model).per_token(at_length(model, seq_len, target_len))


def state_bytes_per_token(model: nn.Module, m) -> Optional[float]:
    """float32 decoding-state bytes per token at model.max_seq_len (an encoder-decoder's source as long),
    as describe prints them at that length; None for an encoder, which does not decode."""
    if not kind_of(m).decodes:
        return None
    n = m.max_seq_len
    return decoding_state_bytes(model, n, 4, n if kind_of(m).cross_attention else 0) / n


def decoding_state_bytes(model: nn.Module, context: int, element_bytes: int = 4, source: int = 0) -> int:
    """Bytes of the decoder's decoding state after ``context`` positions: each layer's mixer's state (a
    K/V cache grows with the context, a recurrent state does not) and cross-attention's memory K/V."""
    total = 0
    for layer in model.decoder.layers:
        total += layer.mixer.sublayer.state_elements(context)
        if layer.cross_attn is not None:
            shape = layer.cross_attn.sublayer.shape
            total += 2 * shape.n_kv_heads * shape.head_dim * source
    return total * element_bytes
