"""Per-layer configs: ``model.layers`` sets any layer-level model key on a range of layers or as a
repeating pattern, resolved here into one ModelConfig per layer.

    layers:
      - {range: "0:6", norm_placement: sandwich}         # layers 0..5 (a Python slice; "-2:" = the last two)
      - {pattern: [{attention_scale: 0.5}, {}]}           # alternate over all layers: 0, 2, 4 ... get 0.5
      - {range: "4:", stack: decoder, ffn: swiglu}        # encoder_decoder models: one stack only

Entries apply in order, later ones over earlier ones; a component key replaces the component
(or, as a mapping without ``name``, changes its options). The saved config keeps this compact
form; the model builds each layer from its resolved config.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Tuple

from . import model_families  # noqa: F401  (fills the registries that component keys are parsed by)
from ..errors import ConfigError, did_you_mean
from ..coerce import to_dict
from .parse import from_dict
from .schema import ModelConfig

ENTRY_KEYS = ("range", "pattern", "stack")
# Keys that shape the whole model (embeddings, stacks, head, init) rather than one layer.
MODEL_WIDE = frozenset({
    "kind", "vocab_size", "d_model", "n_layers", "n_encoder_layers", "n_decoder_layers", "max_seq_len",
    "cross_attention_position", "final_norm", "head", "init", "parametrization", "embedding_dropout", "scale_embeddings",
    "type_vocab_size", "embedding_norm", "tie_embeddings", "tie_encoder_decoder_embeddings", "pad_token_id", "layers"})


def layer_keys() -> List[str]:
    return sorted(f.name for f in dataclasses.fields(ModelConfig) if f.name not in MODEL_WIDE)


def _span(value: Any, depth: int, key: str) -> range:
    """``"a:b"`` (a Python slice over the stack's layers, either end open, negatives from the end) or one index."""
    hint = f"expected 'start:stop' (e.g. '0:6', '-2:') or a layer index, for layers 0..{depth - 1}"
    if isinstance(value, int) and not isinstance(value, bool):
        if not -depth <= value < depth:
            raise ConfigError(key, f"layer {value} does not exist; {hint}")
        return range(depth)[value:value + 1 or None]
    if not isinstance(value, str) or value.count(":") != 1:
        raise ConfigError(key, f"{hint}, got {value!r}")
    try:
        start, stop = (int(p) if p.strip() else None for p in value.split(":"))
    except ValueError:
        raise ConfigError(key, f"{hint}, got {value!r}") from None
    if any(p is not None and not -depth <= p <= depth for p in (start, stop)):
        raise ConfigError(key, f"'{value}' reaches past the {depth} layers; {hint}")
    span = range(depth)[start:stop]
    if not span:
        raise ConfigError(key, f"'{value}' selects no layer of {depth}; {hint}")
    return span


def _check_keys(changes: Mapping, key: str) -> None:
    allowed = layer_keys()
    for name in changes:
        if name in MODEL_WIDE:
            raise ConfigError(f"{key}.{name}", f"cannot differ per layer (it shapes the whole model); set model.{name}")
        if name not in allowed:
            raise ConfigError(f"{key}.{name}", f"unknown key{did_you_mean(str(name), allowed + list(ENTRY_KEYS))}; "
                                               f"per-layer keys: {', '.join(allowed)}, and range, pattern, stack")


def _apply(base: Dict[str, Any], changes: Mapping) -> Dict[str, Any]:
    out = dict(base)
    for name, value in changes.items():
        old = out.get(name)
        if isinstance(value, Mapping) and "name" not in value and isinstance(old, Mapping):
            value = {**old, **value}  # options of the same component
        out[name] = value
    return out


def _entries(m: ModelConfig, key: str) -> List[Tuple[int, Mapping, List[Mapping]]]:
    """(index, entry, pattern) for each entry, checked for shape before any layer is resolved."""
    if m.layers is None:
        return []
    out = []
    for i, entry in enumerate(m.layers):
        k = f"{key}.layers[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(k, f"expected a mapping like {{range: '0:6', <model keys>}}, got {entry!r}")
        pattern = entry.get("pattern", [{}])
        if not isinstance(pattern, list) or not pattern or not all(isinstance(p, Mapping) for p in pattern):
            raise ConfigError(f"{k}.pattern", f"expected a non-empty list of mappings of model keys, got {pattern!r}")
        if "pattern" in entry:
            for j, p in enumerate(pattern):
                _check_keys(p, f"{k}.pattern[{j}]")
        stack = entry.get("stack")
        if stack is not None and (m.kind != "encoder_decoder" or stack not in ("encoder", "decoder")):
            raise ConfigError(f"{k}.stack", "only for kind encoder_decoder: 'encoder' or 'decoder'" if
                              m.kind != "encoder_decoder" else f"expected 'encoder' or 'decoder', got {stack!r}")
        _check_keys({n: v for n, v in entry.items() if n not in ENTRY_KEYS}, k)
        out.append((i, entry, pattern))
    return out


def resolve(m: ModelConfig, stack: str, depth: int, key: str = "model") -> List[Tuple[ModelConfig, str]]:
    """One (config, key of the entry that last changed it) per layer of ``stack``; layers no entry
    touches are ``m`` itself (with ``layers`` cleared)."""
    base = dataclasses.replace(m, layers=None)
    entries = _entries(m, key)
    if not entries:
        return [(base, key)] * depth
    plain = to_dict(base)
    layers: List[Dict[str, Any]] = [{} for _ in range(depth)]
    keys = [key] * depth
    for i, entry, pattern in entries:
        if entry.get("stack", stack) != stack:
            continue
        changes = {n: v for n, v in entry.items() if n not in ENTRY_KEYS}
        span = _span(entry.get("range", ":"), depth, f"{key}.layers[{i}].range")
        for j, layer in enumerate(span):
            layers[layer] = _apply(_apply(layers[layer], changes), pattern[j % len(pattern)])
            keys[layer] = f"{key}.layers[{i}]"
    out, built = [], {}
    for changes, k in zip(layers, keys):
        ident = repr(changes)
        if ident not in built:
            built[ident] = from_dict(ModelConfig, _apply(plain, changes), k) if changes else base
        out.append((built[ident], k))
    return out


def layout(m: ModelConfig, stack: str, depth: int) -> List[Tuple[str, str]]:
    """(layer indices, what differs from the model) for each distinct layer config, e.g. ("0, 2, 4", "..."):
    ``describe`` prints it."""
    base = to_dict(dataclasses.replace(m, layers=None))
    groups: Dict[str, List[int]] = {}
    for index, (cfg, _) in enumerate(resolve(m, stack, depth)):
        plain = to_dict(cfg)
        diff = ", ".join(f"{n}={_short(plain[n])}" for n in layer_keys() if plain[n] != base[n]) or "as the model"
        groups.setdefault(diff, []).append(index)
    return [(_indices(ix), diff) for diff, ix in groups.items()]


def _short(value: Any) -> str:
    if isinstance(value, Mapping) and "name" in value:
        opts = {k: v for k, v in value.items() if k != "name"}
        return value["name"] + (f"({', '.join(f'{k}={v}' for k, v in opts.items())})" if opts else "")
    return str(value)


def _indices(ix: List[int]) -> str:
    runs, start = [], ix[0]
    for a, b in zip(ix, ix[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(runs)
