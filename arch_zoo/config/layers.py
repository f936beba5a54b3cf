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

import contextlib
import contextvars
import dataclasses
import warnings
from typing import Any, Dict, Iterator, List, Mapping, Tuple

from . import model_families  # noqa: F401  (fills the registries that component keys are parsed by)
from ..errors import ConfigError, did_you_mean
from ..coerce import to_dict
from ..components.mixers.base import MIXERS
from .kinds import KINDS, kind_of
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
        both = [kd.name for kd in KINDS.values() if len(kd.stacks) > 1]  # an entry picks a stack where there are two
        if stack is not None and (m.kind not in both or stack not in kind_of(m).stacks):
            raise ConfigError(f"{k}.stack", f"only for kind {' or '.join(both)}: 'encoder' or 'decoder'" if
                              m.kind not in both else f"expected 'encoder' or 'decoder', got {stack!r}")
        _check_keys({n: v for n, v in entry.items() if n not in ENTRY_KEYS}, k)
        out.append((i, entry, pattern))
    return out


def _assign(m: ModelConfig, stack: str, depth: int, key: str
            ) -> Tuple[List[Dict[str, Any]], List[str], Dict[int, set], set]:
    """What the entries set on each layer of ``stack``: (changes per layer, key of the entry that last
    changed each layer, each entry's later entries that replaced a value of it, the entries some layer
    still holds a value of). A later value replaces an earlier one; a component mapping without
    ``name`` merges into it, so both entries stay in effect."""
    layers: List[Dict[str, Any]] = [{} for _ in range(depth)]
    keys = [key] * depth
    holders: List[Dict[str, set]] = [{} for _ in range(depth)]  # layer -> model key -> entries its value holds
    replaced: Dict[int, set] = {}
    for i, entry, pattern in _entries(m, key):
        if entry.get("stack", stack) != stack:
            continue
        changes = {n: v for n, v in entry.items() if n not in ENTRY_KEYS}
        span = _span(entry.get("range", ":"), depth, f"{key}.layers[{i}].range")
        for j, layer in enumerate(span):
            for part in (changes, pattern[j % len(pattern)]):
                for name, value in part.items():
                    held = holders[layer].setdefault(name, set())
                    if not (isinstance(value, Mapping) and "name" not in value
                            and isinstance(layers[layer].get(name), Mapping)):
                        for earlier in held - {i}:
                            replaced.setdefault(earlier, set()).add(i)
                        held.clear()
                    held.add(i)
                layers[layer] = _apply(layers[layer], part)
            keys[layer] = f"{key}.layers[{i}]"
    effective = {i for layer in holders for held in layer.values() for i in held}
    return layers, keys, replaced, effective


def resolve(m: ModelConfig, stack: str, depth: int, key: str = "model") -> List[Tuple[ModelConfig, str]]:
    """One (config, key of the entry that last changed it) per layer of ``stack``; layers no entry
    touches are ``m`` itself (with ``layers`` cleared)."""
    base = dataclasses.replace(m, layers=None)
    if m.layers is None:
        return [(base, key)] * depth
    plain = to_dict(base)
    layers, keys, _, _ = _assign(m, stack, depth, key)
    out, built = [], {}
    for changes, k in zip(layers, keys):
        ident = repr(changes)
        if ident not in built:
            built[ident] = from_dict(ModelConfig, _apply(plain, changes), k) if changes else base
        out.append((built[ident], k))
    return out


_TRAINED = contextvars.ContextVar("trained_config", default=None)


@contextlib.contextmanager
def as_trained(where: str) -> Iterator[None]:
    """Configs read inside are a run's saved ones (``where``: its directory): they built the model that
    trained, so an entry that changes no layer is a warning there, not an error (runs written before
    the check still restore)."""
    token = _TRAINED.set(where)
    try:
        yield
    finally:
        _TRAINED.reset(token)


def check_entries(m: ModelConfig, stacks: List[Tuple[str, int]], key: str = "model") -> None:
    """Each entry changes some layer: a pattern with items past its range, an entry that sets nothing,
    or one whose every value later entries replace on the same layers would change none, silently
    (an entry without ``range`` applies to every layer: a list of plain entries, one meant per layer,
    gives every layer the last one's keys)."""
    if not m.layers:
        return
    try:
        _check_entries(m, stacks, key)
    except ConfigError as exc:
        if _TRAINED.get() is None:
            raise
        warnings.warn(f"{_TRAINED.get()}: {exc}; the run was built as its config resolves", stacklevel=2)


def _check_entries(m: ModelConfig, stacks: List[Tuple[str, int]], key: str) -> None:
    spans: Dict[int, int] = {}  # entry -> the most layers its range covers in a stack it applies to
    replaced: Dict[int, set] = {}
    effective: set = set()
    for stack, depth in stacks:
        _, _, over, held = _assign(m, stack, depth, key)
        for i, later in over.items():
            replaced.setdefault(i, set()).update(later)
        effective |= held
        for i, entry, _ in _entries(m, key):
            if entry.get("stack", stack) == stack:
                spans[i] = max(spans.get(i, 0), len(_span(entry.get("range", ":"), depth, key)))
    for i, entry, pattern in _entries(m, key):
        k = f"{key}.layers[{i}]"
        if "pattern" in entry and len(pattern) > spans.get(i, 0):
            extra = list(range(spans[i], len(pattern)))
            raise ConfigError(f"{k}.pattern", f"has {len(pattern)} items for the {spans[i]} layers of its range "
                              f"({entry.get('range', ':')!r}): item{'s' if len(extra) > 1 else ''} {_indices(extra)} "
                              f"would reach no layer; remove {'them' if len(extra) > 1 else 'it'} or widen the range")
    per_layer = ("an entry without range applies to every layer: for one entry per layer, write one entry "
                 "{pattern: [{keys of layer 0}, {keys of layer 1}, ...]}")
    for i, entry, pattern in _entries(m, key):
        if i in effective:
            continue
        k = f"{key}.layers[{i}]"
        if not replaced.get(i):
            raise ConfigError(k, f"sets no model key, so it changes no layer; remove it ({per_layer})")
        names = ", ".join(dict.fromkeys(n for part in [entry, *pattern] for n in part if n not in ENTRY_KEYS))
        later = ", ".join(f"{key}.layers[{j}]" for j in sorted(replaced[i]))
        raise ConfigError(k, f"has no effect: every key it sets ({names}) is set again on the same layers by "
                          f"{later}; {per_layer}")


def pattern_notes(m: ModelConfig, stacks: List[Tuple[str, int]], key: str = "model") -> List[str]:
    """Which layers each item of a pattern reaches where the pattern does not tile its range (3 items
    over 4 layers: the first item reaches layers 0 and 3): ``describe`` and ``sweep --dry-run`` say it."""
    notes = []
    for i, entry, pattern in _entries(m, key):
        for stack, depth in stacks:
            if "pattern" not in entry or entry.get("stack", stack) != stack:
                continue
            span = _span(entry.get("range", ":"), depth, key)
            if len(span) % len(pattern):
                items = "; ".join(f"item {j} -> {layers_word(list(span)[j::len(pattern)])}"
                                  for j in range(len(pattern)))
                where = f" of the {stack}" if len(stacks) > 1 else ""
                notes.append(f"{key}.layers[{i}].pattern: {len(pattern)} items over {len(span)} layers{where} "
                             f"(range {entry.get('range', ':')!r}) do not tile them: {items}")
    return notes


def resolved_mixer(m: ModelConfig) -> ModelConfig:
    """``m`` with its mixer's nulls filled in from ``m`` (a head count left null is the model's)."""
    options = MIXERS.get(m.mixer.name).factory.resolved_options(m.mixer.options, m)
    return dataclasses.replace(m, mixer=dataclasses.replace(m.mixer, options=options))


def layout(m: ModelConfig, stack: str, depth: int) -> List[Tuple[List[int], str]]:
    """(layer indices, what differs from the model, a changed mixer's options resolved) for each distinct
    layer config, e.g. ([0, 2, 4], "mixer=gated_deltanet(n_heads=2, ...)"): ``describe`` prints it."""
    base = to_dict(dataclasses.replace(m, layers=None))
    groups: Dict[str, List[int]] = {}
    for index, (cfg, _) in enumerate(resolve(m, stack, depth)):
        plain = to_dict(resolved_mixer(cfg) if cfg.mixer != m.mixer else cfg)
        diff = ", ".join(f"{n}={_short(plain[n])}" for n in layer_keys() if plain[n] != base[n]) or "as the model"
        groups.setdefault(diff, []).append(index)
    return [(ix, diff) for diff, ix in groups.items()]


def _short(value: Any) -> str:
    if isinstance(value, Mapping) and "name" in value:
        opts = {k: v for k, v in value.items() if k != "name"}
        return value["name"] + (f"({', '.join(f'{k}={v}' for k, v in opts.items())})" if opts else "")
    return str(value)


def layers_word(ix: List[int]) -> str:
    """"layer 3" or "layers 0-2, 5": the word agrees with the indices."""
    return f"layer{'s' if len(ix) > 1 else ''} {_indices(ix)}"


def _indices(ix: List[int]) -> str:
    runs, start = [], ix[0]
    for a, b in zip(ix, ix[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(runs)
