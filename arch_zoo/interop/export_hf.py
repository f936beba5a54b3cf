"""arch_zoo models -> Hugging Face models: ``to_hf(model)``, the inverse of ``from_hf``.

The family is decided from the config's fields: each family's writer (``families/<model_type>.py``) turns
the config into a ``config.json``, and the family is kept only when its own importer reads that
back as the same function. The tensors are the importer's mapping run backwards: the importer's
weight function is run against a recorder that notes each (arch_zoo name <- Hugging Face names,
transform) it would apply, and each transform is inverted by applying it to the Hugging Face
tensor's element indices, which says where every arch_zoo element came from. So no mapping table
is written twice, and ``from_hf(to_hf(m))`` gives ``m`` back. Needs ``transformers``."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..coerce import to_dict
from ..config.loading import model_config
from ..errors import ConfigError
from ..generation.prompts import decoder_start_id
from ..config.kinds import KINDS
from .checkpoint import CheckpointError, WeightMap
from .hf import _strip
from .export_family import mixer_layout, takes_mixers
from .family import FAMILIES, architecture, exporters
from .function_view import count_differences, first_difference, function_view
from .mapping import NotExpressible


@dataclass
class FamilyChoice:
    """Where a model's config lands: a native family (``hf_config``) or nowhere (``reason``)."""
    hf_config: Optional[Dict[str, Any]]
    reason: str


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ConfigError("--to", "hf needs transformers: pip install 'arch-zoo[hf]'") from None
    return transformers


def _hf_config(raw: Dict[str, Any]):
    transformers = _transformers()
    return transformers.AutoConfig.for_model(raw["model_type"], **{k: v for k, v in raw.items() if k != "model_type"})


def sized(model):
    """The model's config with its vocabulary size (a trained run's config leaves it to the tokenizer)."""
    import dataclasses

    return dataclasses.replace(model.config, vocab_size=model.vocab_size)


def native_config(cfg) -> FamilyChoice:
    """The Hugging Face config of the first family that expresses ``cfg`` exactly, or why none does. The
    mixer layout decides which families can (those whose layers take its mixers); the reason names it
    and the nearest of those families' first field it has no equivalent for."""
    want = function_view(cfg)
    d = to_dict(cfg)
    layout = mixer_layout(cfg)
    reasons: List[Tuple[float, str, str]] = []  # (distance, family, why): the nearest family's is reported
    candidates = exporters(cfg.kind)
    fitting = [f for f in candidates if takes_mixers(f, cfg)]
    for candidate in fitting:
        family = candidate.name
        try:
            raw = candidate.write(cfg, d)
            hf = _hf_config(raw).to_dict()
            arch = architecture(hf)
            got = function_view(model_config(arch.config(dict(hf), _Names(_meta_state(raw, arch.prefix)))))
        except NotExpressible as exc:
            reasons.append((1e6, family, f"{exc} has no {family} equivalent"))
            continue
        except Exception as exc:  # noqa: BLE001 - transformers' config validation raises its own types
            reasons.append((2e6, family, f"{family}'s config cannot hold it ({str(exc).splitlines()[0]})"))
            continue
        diff = first_difference(want, got)
        if diff is None:
            return FamilyChoice(raw, f"written as {raw['architectures'][0]}")
        reasons.append((count_differences(want, got), family, f"{diff} has no {family} equivalent"))
    if not reasons:
        if candidates:
            return FamilyChoice(None, f"its mixer layout ({layout}) is no Hugging Face family's")
        return FamilyChoice(None, f"no Hugging Face family maps a model of kind {cfg.kind}")
    _, family, why = min(reasons, key=lambda r: r[0])
    fits = f"{family} only" if len(fitting) == 1 else f"{len(fitting)} families, of which {family} is the nearest"
    return FamilyChoice(None, f"its mixer layout ({layout}) fits {fits}: {why}")


def native_form(model) -> Tuple[Any, FamilyChoice]:
    """(the model to write, the family it lands in): ``model`` itself, or, where only that maps to a
    family, ``model`` with its plain RMSNorm gains zero-centred (``zero_centred``: Gemma 2 from a run
    with plain gains, as earlier versions imported and preset it)."""
    from .zero_centred import as_zero_centred, zero_centred_config

    mapping = native_config(sized(model))
    if mapping.hf_config is None:
        cfg = zero_centred_config(sized(model))  # the config first: the model is rebuilt only if it maps
        other = native_config(cfg) if cfg is not None else mapping
        if other.hf_config is not None:
            family = FAMILIES[other.hf_config["model_type"]].name
            why = f"{other.reason} (its RMSNorm gains g written as w = g - 1, which {family} applies as 1 + w)"
            return as_zero_centred(model, cfg), FamilyChoice(other.hf_config, why)
    return model, mapping


class _Names(WeightMap):
    """Which tensors the Hugging Face class has (an importer's config asks, e.g. BERT's MLM head)."""

    def __init__(self, names: Sequence[str]):
        super().__init__({n: torch.empty(0) for n in names})


def _hf_class(raw: Dict[str, Any]):
    return getattr(_transformers(), raw["architectures"][0])


def _meta_state(raw: Dict[str, Any], prefix: str) -> Dict[str, Tensor]:
    """The Hugging Face class's tensors (on the meta device: names and shapes, no memory), prefix
    stripped as the importer strips it."""
    with torch.device("meta"):
        model = _hf_class(raw)(_hf_config(raw))
    return _strip(model.state_dict(), prefix)


class _Recorder:
    """Stands in for the WeightMap an importer fills: notes (arch_zoo name, Hugging Face names,
    transform) for each mapping whose Hugging Face tensors the target class has."""

    def __init__(self, names: Sequence[str], shapes: Optional[Dict[str, Any]] = None):
        self.names = set(names)
        self.maps: List[Tuple[str, List[str], Optional[Callable]]] = []
        self.shapes = shapes or {}
        # what an importer builds itself from ``take`` (Qwen3-Next's regrouped rows): element ids, each
        # Hugging Face tensor's a range of its own (``ranges``), so each element's origin can be read off
        self.out: Dict[str, Tensor] = {}
        self.sources: Dict[str, str] = {}
        self.ranges: List[Tuple[int, int, str]] = []

    def take(self, name: str) -> Tensor:
        start = self.ranges[-1][1] if self.ranges else 0
        shape = self.shapes[name]
        end = start + int(torch.Size(shape).numel())
        self.ranges.append((start, end, name))
        return torch.arange(start, end, dtype=torch.int64).reshape(shape)

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def copy(self, dst: str, src: str, fn: Optional[Callable] = None) -> None:
        if src in self.names:
            self.maps.append((dst, [src], fn))

    def alias(self, dst: str, src: str) -> None:
        self.copy(dst, src)

    def fuse(self, dst: str, srcs: Sequence[str]) -> None:
        if all(s in self.names for s in srcs):
            self.maps.append((dst, list(srcs), None))


def _place(target: Tensor, filled: Tensor, value: Tensor, fn: Callable) -> None:
    """Inverts ``value = fn(target)`` where ``fn`` rearranges elements and may add a constant (a
    gain offset by 1, exact only where the sum was): ``fn`` applied to element indices says where each element of ``value`` came from."""
    shape = target.shape
    offset = fn(torch.zeros(shape, dtype=torch.int64))
    where = fn(torch.arange(target.numel(), dtype=torch.int64).reshape(shape)) - offset
    index = where.round().long().reshape(-1) if where.is_floating_point() else where.reshape(-1)
    target.view(-1)[index] = (value - offset).reshape(-1).to(target.dtype)
    filled.view(-1)[index] = True


def _scatter(value: Tensor, ids: Tensor, ranges, shapes, out: Dict[str, Tensor], filled: Dict[str, Tensor]) -> None:
    """Puts each element of ``value`` where its id (``_Recorder.take``) says it came from."""
    value, ids = value.reshape(-1), ids.reshape(-1)
    for start, end, src in ranges:
        hit = (ids >= start) & (ids < end)
        if bool(hit.any()):
            at = ids[hit] - start
            out.setdefault(src, torch.zeros(shapes[src], dtype=value.dtype)).view(-1)[at] = value[hit]
            filled.setdefault(src, torch.zeros(shapes[src], dtype=torch.bool)).view(-1)[at] = True


def hf_state(model, raw: Dict[str, Any]) -> Dict[str, Tensor]:
    """The Hugging Face tensors of ``model`` for the class ``raw`` names, under that class's names."""
    arch = architecture(raw)
    shapes = {k: v.shape for k, v in _meta_state(raw, arch.prefix).items()}
    names = list(shapes)
    recorder = _Recorder(names, shapes)
    arch.weights(recorder, model.config)
    ours = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    out: Dict[str, Tensor] = {}
    filled: Dict[str, Tensor] = {}
    for dst, srcs, fn in recorder.maps:
        if dst not in ours:
            continue
        value = ours[dst]
        if len(srcs) > 1:  # fused: split along dim 0 by the Hugging Face shapes
            for src, piece in zip(srcs, value.split([shapes[s][0] for s in srcs])):
                out[src] = piece.clone()
        elif fn is None:
            out[srcs[0]] = value.clone()
        else:
            target = out.setdefault(srcs[0], torch.zeros(shapes[srcs[0]], dtype=value.dtype))
            _place(target, filled.setdefault(srcs[0], torch.zeros(shapes[srcs[0]], dtype=torch.bool)), value, fn)
    for dst, ids in recorder.out.items():
        if dst in ours:
            _scatter(ours[dst], ids, recorder.ranges, shapes, out, filled)
    for name, mask in filled.items():
        if not bool(mask.all()):
            raise CheckpointError(name, "not every element was given a value by the export (an importer "
                                        "transform that is not a rearrangement)")
    ignore = [re.compile(p) for p in arch.ignore]
    missing = [n for n in names if n not in out and not any(p.fullmatch(n) for p in ignore)]
    if missing:
        raise CheckpointError(missing[0], f"no arch_zoo tensor maps to this {raw['architectures'][0]} tensor")
    # back under the class's own names: the importer stripped the base-model prefix where there was one
    full = set(_meta_state(raw, ""))
    return {(arch.prefix + k if arch.prefix + k in full else k): v for k, v in out.items()}


def special_ids(tokenizer) -> Dict[str, Optional[int]]:
    """bos / eos / pad for config.json and generation_config.json (decoder start: the BOS that
    arch_zoo's seq2seq training and generation start the decoder with)."""
    if tokenizer is None:
        return {}
    return {"bos_token_id": tokenizer.bos_id, "eos_token_id": tokenizer.eos_id, "pad_token_id": tokenizer.pad_id}


def generation_config(hf, ids: Dict[str, Any]):
    """generation_config.json: the special ids ``generate`` starts and stops with, where given."""
    from transformers import GenerationConfig

    keep = {k: v for k, v in ids.items() if v is not None}
    if keep and hf.can_generate():
        hf.generation_config = GenerationConfig(**{**hf.generation_config.to_diff_dict(), **keep})
    return hf


def to_hf(model, tokenizer=None):
    """The transformers model (eval mode, float32) equal to ``model``, an arch_zoo model whose config a
    Hugging Face family expresses; ``ConfigError`` says which field none does (``export`` then writes
    remote code). ``tokenizer`` (an arch_zoo tokenizer) gives config.json its special token ids."""
    model, mapping = native_form(model)
    if mapping.hf_config is None:
        raise ConfigError("model", f"no Hugging Face family expresses this model: {mapping.reason}")
    return build_hf(model, mapping.hf_config, tokenizer)


def build_hf(model, raw: Dict[str, Any], tokenizer=None):
    ids = special_ids(tokenizer)
    if KINDS[architecture(raw).kind].cross_attention:  # the decoder starts where arch_zoo starts it: an imported
        # checkpoint's own start token (T5's <pad>), else the tokenizer's BOS; without a tokenizer, pad (as T5)
        ids["decoder_start_token_id"] = decoder_start_id(tokenizer) if tokenizer is not None else model.config.pad_token_id
    raw = {**raw, **ids}
    state = hf_state(model, raw)
    hf = _hf_class(raw)(_hf_config(raw))
    result = hf.load_state_dict(state, strict=False)
    arch = architecture(raw)
    ignore = [re.compile(p) for p in arch.ignore]
    left = [k for k in result.missing_keys if not any(p.fullmatch(k[len(arch.prefix):] if k.startswith(arch.prefix)
                                                                  else k) for p in ignore)]
    if left or result.unexpected_keys:
        raise CheckpointError((left or result.unexpected_keys)[0], "did not fit the Hugging Face model")
    return generation_config(hf.float().eval(), ids)
