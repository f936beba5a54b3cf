"""Human-readable text for ``arch-zoo components`` and ``arch-zoo describe``."""
from __future__ import annotations

import dataclasses
from typing import List, Optional

from .config import ExperimentConfig
from .registry import Registry, all_registries

DEFAULT_VOCAB = 32000


def _options(entry) -> str:
    fields = dataclasses.fields(entry.options)
    if not fields:
        return ""
    parts = []
    for f in fields:
        default = f.default if f.default is not dataclasses.MISSING else "required"
        parts.append(f"{f.name}={default}")
    return "  [" + ", ".join(parts) + "]"


def components_text() -> str:
    lines: List[str] = []
    for family, registry in all_registries().items():
        lines.append(f"{family}  ({registry.kind})")
        width = max((len(n) for n in registry.choices()), default=0)
        for entry in registry.entries():
            lines.append(f"  {entry.name:<{width}}  {entry.description}{_options(entry)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _fmt(n: float) -> str:
    from .formatting import si

    return si(n)


def describe_text(cfg: ExperimentConfig, vocab_size: Optional[int] = None, seq_len: Optional[int] = None) -> str:
    from .models import build_model
    from .models.summary import count_parameters, flops_per_token, parameter_breakdown

    m = cfg.model
    vocab_note = ""
    if vocab_size is None:
        vocab_size = m.vocab_size or DEFAULT_VOCAB
        if m.vocab_size is None:
            vocab_note = " (assumed; the task's tokenizer sets it, or pass --vocab-size)"
    seq_len = seq_len or m.max_seq_len
    import torch

    with torch.device("meta"):  # counts and FLOPs need shapes only, so a 7B preset costs no memory
        model = build_model(m, vocab_size)
    placement = "x + f(norm(x))" if m.norm_placement == "pre" else "norm(x + f(x))"
    lines = [
        f"{cfg.name}: {m.kind.replace('_', '-')} model",
        f"  d_model {m.d_model}, heads {m.n_heads} (kv heads {m.kv_heads}, head_dim {m.dim_per_head}), "
        f"d_ff {m.d_ff}, max_seq_len {m.max_seq_len}, vocab {vocab_size}{vocab_note}",
        "",
        "components",
        f"  position      {m.position.describe()}" + (", also in cross-attention" if m.cross_attention_position else ""),
        f"  norm          {m.norm.describe()}, {m.norm_placement}-norm: {placement}; "
        f"final norm {'yes' if m.use_final_norm else 'no'}",
        f"  attention     {m.attention.describe()}",
        f"  feed-forward  {m.ffn.describe()}, bias {'yes' if m.bias else 'no'}",
        f"  head          {m.head.describe()}" + (", tied to token embeddings" if m.tie_embeddings else ""),
        f"  init          {m.init.describe()}",
        f"  embeddings    scale by sqrt(d_model): {'yes' if m.scale_embeddings else 'no'}"
        + (", shared by encoder and decoder" if m.tie_encoder_decoder_embeddings else "")
        + (f", plus {m.type_vocab_size} token types" if m.type_vocab_size else "")
        + (f"; normalized by {m.norm.describe()} after positions" if m.embedding_norm else ""),
        f"  dropout       residual {m.dropout}, attention {m.rate('attention_dropout')}, "
        f"embedding {m.rate('embedding_dropout')}",
        "",
        "layers",
    ]
    if m.kind in ("encoder", "encoder_decoder"):
        lines.append(f"  encoder x {m.encoder_layers}: self-attention (bidirectional) -> feed-forward")
    if m.kind == "decoder":
        lines.append(f"  decoder x {m.decoder_layers}: self-attention (causal) -> feed-forward")
    if m.kind == "encoder_decoder":
        lines.append(f"  decoder x {m.decoder_layers}: self-attention (causal) -> cross-attention -> feed-forward")
    total = count_parameters(model)
    lines += ["", f"parameters  {total:,} total"]
    for part, n in parameter_breakdown(model).items():
        lines.append(f"  {part:<26}{n:>14,}  {100 * n / total:5.1f}%")
    flops = flops_per_token(model, seq_len)
    per = "per source+target token pair" if m.kind == "encoder_decoder" else "per token"
    lines += ["", f"forward FLOPs {per} at length {seq_len}  {_fmt(flops['total'])} "
                  f"(a training step is ~3x)"]
    for part, n in flops.items():
        if part != "total":
            lines.append(f"  {part:<26}{_fmt(n):>14}")
    return "\n".join(lines) + "\n"


def registry_of(family: str) -> Registry:
    return all_registries()[family]
