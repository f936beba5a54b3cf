"""``torch.nn.Transformer`` and ``torch.nn.TransformerEncoder`` -> arch_zoo models.

torch's modules hold the layers only: no embeddings, positions or head. The converted model gets
sinusoidal positions (change them with ``changes``) and freshly initialised embeddings and head;
given the same embedded inputs, its stacks compute what torch's compute. nn.Transformer always
ends each stack with a LayerNorm, which arch_zoo expresses as ``final_norm: true``.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import torch.nn.functional as F
from torch import nn

from .checkpoint import CheckpointError, ConfigLike, WeightMap, resolve_config


def _unsupported(what: str) -> CheckpointError:
    return CheckpointError("torch.nn.Transformer", f"{what} has no arch_zoo equivalent")


def _activation(layer: nn.Module) -> str:
    act = layer.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    if isinstance(act, nn.GELU) and act.approximate == "tanh":
        return "gelu_tanh"
    raise _unsupported(f"activation {act!r}")


def _layer_config(layer: nn.Module) -> dict:
    attn = layer.self_attn
    if not attn._qkv_same_embed_dim or attn.bias_k is not None or attn.add_zero_attn:
        raise _unsupported("attention with kdim/vdim, add_bias_kv or add_zero_attn")
    bias = layer.linear1.bias is not None
    if (attn.in_proj_bias is not None) != bias:
        raise _unsupported("attention biases without feed-forward biases (or the reverse)")
    return {
        "d_model": attn.embed_dim, "n_heads": attn.num_heads, "d_ff": layer.linear1.out_features,
        "norm": {"name": "layernorm", "eps": layer.norm1.eps, "bias": layer.norm1.bias is not None},
        "norm_placement": "pre" if layer.norm_first else "post",
        "ffn": _activation(layer), "bias": bias, "dropout": layer.dropout.p,
    }


def _stacks(module: nn.Module):
    if isinstance(module, nn.Transformer):
        encoder, decoder = module.encoder, module.decoder
        if not isinstance(encoder, nn.TransformerEncoder) or not isinstance(decoder, nn.TransformerDecoder):
            raise _unsupported("a custom encoder or decoder that is not nn.TransformerEncoder/Decoder")
        return encoder, decoder
    if isinstance(module, nn.TransformerEncoder):
        return module, None
    raise TypeError(f"expected torch.nn.Transformer or torch.nn.TransformerEncoder, got {type(module).__name__}")


def torch_transformer_config(module: nn.Module) -> dict:
    """The arch_zoo model mapping equivalent to an nn.Transformer or nn.TransformerEncoder."""
    encoder, decoder = _stacks(module)
    stacks = [s for s in (encoder, decoder) if s is not None]
    layer_cfgs = [_layer_config(layer) for s in stacks for layer in s.layers]
    cfg = layer_cfgs[0]
    for other in layer_cfgs[1:]:
        diff = next((k for k in cfg if other[k] != cfg[k]), None)
        if diff:
            raise _unsupported(f"layers that differ in {diff} ({cfg[diff]} vs {other[diff]})")
    finals = {s.norm is not None for s in stacks}
    if len(finals) > 1:
        raise _unsupported("a final norm on one stack but not the other")
    for s in stacks:
        if s.norm is not None and (s.norm.eps, s.norm.bias is not None) != (cfg["norm"]["eps"], cfg["norm"]["bias"]):
            raise _unsupported("a final norm whose eps or bias differs from the layers' norms")
    return {
        "kind": "encoder_decoder" if decoder is not None else "encoder",
        "n_layers": len(encoder.layers),
        **({"n_decoder_layers": len(decoder.layers)} if decoder is not None else {}),
        **cfg,
        "final_norm": finals.pop(),
        "position": "sinusoidal", "init": "xavier", "max_seq_len": 512,
    }


def _layer_weights(w: WeightMap, dst: str, src: str, cross: bool) -> None:
    norms = ("mixer", "cross_attn", "ffn") if cross else ("mixer", "ffn")
    for p in ("weight", "bias"):
        w.copy(f"{dst}mixer.sublayer.qkv.{p}", f"{src}self_attn.in_proj_{p}")
        w.copy(f"{dst}mixer.sublayer.out.{p}", f"{src}self_attn.out_proj.{p}")
        if cross:  # one in_proj [q; k; v]: q reads the decoder, k and v the memory
            w.copy(f"{dst}cross_attn.sublayer.q.{p}", f"{src}multihead_attn.in_proj_{p}", lambda t: t[: len(t) // 3])
            w.copy(f"{dst}cross_attn.sublayer.kv.{p}", f"{src}multihead_attn.in_proj_{p}", lambda t: t[len(t) // 3:])
            w.copy(f"{dst}cross_attn.sublayer.out.{p}", f"{src}multihead_attn.out_proj.{p}")
        w.copy(f"{dst}ffn.sublayer.up.{p}", f"{src}linear1.{p}")
        w.copy(f"{dst}ffn.sublayer.down.{p}", f"{src}linear2.{p}")
        for i, name in enumerate(norms, start=1):
            w.copy(f"{dst}{name}.norm.{p}", f"{src}norm{i}.{p}")


def from_torch_transformer(module: nn.Module, vocab_size: int, config: ConfigLike = None,
                           changes: Optional[Mapping[str, Any]] = None):
    """An arch_zoo model (eval mode) with the layers of ``module``; see the module docstring.

    ``config`` loads into a given architecture (e.g. ``preset:vaswani``) instead of the derived one;
    ``changes`` are merged on top (e.g. ``{"scale_embeddings": True}``)."""
    from ..models import build_model

    encoder, decoder = _stacks(module)
    cfg = resolve_config(torch_transformer_config(module), config, changes)
    model = build_model(cfg, vocab_size)
    w = WeightMap(module.state_dict())
    prefix = "encoder." if decoder is not None else ""
    for i in range(cfg.encoder_layers):
        _layer_weights(w, f"encoder.layers.{i}.", f"{prefix}layers.{i}.", cross=False)
    for p in ("weight", "bias"):
        w.copy(f"encoder.final_norm.{p}", f"{prefix}norm.{p}")
    if decoder is not None:
        for i in range(cfg.decoder_layers):
            _layer_weights(w, f"decoder.layers.{i}.", f"decoder.layers.{i}.", cross=True)
        for p in ("weight", "bias"):
            w.copy(f"decoder.final_norm.{p}", f"decoder.norm.{p}")
    _keep_own(w, model)
    return w.load(model).eval()


def _keep_own(w: WeightMap, model: nn.Module) -> None:
    """Embeddings, positions and head have no counterpart in torch's modules: keep the fresh ones."""
    stacks = ("encoder.", "decoder.")
    for name, tensor in model.state_dict().items():
        if name not in w.out and (not name.startswith(stacks) or ".position." in name or ".embedding_norm." in name):
            w.out[name] = tensor
