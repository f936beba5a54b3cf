"""Checks of a typed config against the registries, and the defaults that depend on other keys.

Sits above the schema (``config``) and the components; ``loading`` calls ``validate`` on what it
reads. The recipe and the task check their own sections (``checks``). Every error is a
``ConfigError`` naming the dotted key.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Union

import torch

from ..components.feedforward import is_gated
from ..components.heads import HEADS
from ..components.mixers.attention import reads_attention_keys
from ..components.mixers.base import MIXERS, serves
from ..components.parametrization import PARAMETRIZATIONS
from ..components.placements import PLACEMENTS
from ..components.positions import POSITIONS, PositionContext, stack_causality
from ..errors import ConfigError, choice_error
from .kinds import KINDS, kind_of
from .layers import check_entries, resolve
from .schema import ExperimentConfig, ModelConfig, ResolvedModel, TrainConfig


def _positive(key: str, value: Optional[Union[int, float]], allow_zero: bool = False) -> None:
    if value is not None and (value < 0 or (value == 0 and not allow_zero)):
        raise ConfigError(key, f"must be {'>= 0' if allow_zero else 'positive'}, got {value}")


def position_limit(m: ModelConfig) -> Optional[int]:
    """The longest sequence the model's position scheme can represent in any of its stacks (None: any length)."""
    scheme = POSITIONS.get(m.position.name).factory
    limits = [scheme.max_length(m.position.options, PositionContext.of(m, causal)) for causal in stack_causality(m)]
    return min((n for n in limits if n is not None), default=None)


FFN_MULTIPLE = 8
D_FF_RULE = {False: "4 * d_model", True: f"8/3 * d_model, up to a multiple of {FFN_MULTIPLE}"}  # by gated


def default_d_ff(d_model: int, gated: bool) -> int:
    """4 * d_model (Vaswani et al. 2017, GPT-2, BERT). A gated FFN has three matrices instead of
    two, so 8/3 * d_model keeps its parameters those of the 4x MLP (Shazeer 2020, LLaMA); rounded
    up to a multiple of 8 for matmul-friendly shapes."""
    if not gated:
        return 4 * d_model
    return FFN_MULTIPLE * -(-8 * d_model // (3 * FFN_MULTIPLE))  # ceil, in integers


def _stacks_by_default(entry) -> tuple:
    """The stacks a mixer serves at its default options (a parallel layer's default branches include
    mamba2: a decoder's only), which is what naming it as a choice offers."""
    try:
        return entry.factory.stacks_of(entry.options())
    except (ConfigError, TypeError, ValueError):
        return entry.factory.stacks


def check_mixer(m: ModelConfig, stack: str, key: str, layer: Optional[int] = None, hint: str = "") -> None:
    """The layer config ``m``'s mixer can serve ``stack`` ("encoder": bidirectional; "decoder": causal).
    ``layer``: the first layer of the stack that takes ``m`` where a ``model.layers`` entry chose it, so
    the error says which stack the entry reached."""
    if not serves(m.mixer, stack):
        able = [e.name for e in MIXERS.entries() if stack in _stacks_by_default(e)]
        what = "a bidirectional encoder" if stack == "encoder" else "a causal decoder"
        where = what if layer is None else f"{stack} layer {layer} ({what.split()[1]})"
        raise ConfigError(f"{key}.mixer", f"mixer '{m.mixer.name}' cannot serve {where} (it serves: "
                          f"{', '.join(MIXERS.get(m.mixer.name).factory.stacks_of(m.mixer.options)) or 'none'}); "
                          f"mixers for {what}: "
                          f"{', '.join(able)}{hint}")
    MIXERS.get(m.mixer.name).factory.check(m.mixer.options, m, key)


ATTENTION_KEYS = ("attention", "qk_norm", "attention_scale", "attn_logit_softcap")  # act in attention only


def learns(spec, ctx: PositionContext) -> bool:
    """The scheme holds trained parameters (T5's bias table): built on the CPU, small, with the global
    random state left as it was, so validating never moves a seed."""
    with torch.random.fork_rng(devices=[]):
        return any(True for _ in POSITIONS.build(spec, ctx).parameters())


def learns_by_default(entry, ctx: PositionContext) -> bool:
    """``learns`` for a scheme at its default options (True where it has none that build)."""
    try:
        return learns(POSITIONS.parse(entry.name, "position"), ctx)
    except (ConfigError, TypeError, ValueError):
        return True


def check_attention_keys(m: ModelConfig, resolved: dict, key: str) -> None:
    """Keys that act only in attention need an attention layer to act in: on a stack whose layers all
    take another mixer (and no cross-attention reads them) they would silently do nothing. A position
    scheme without parameters is the exception: it acts in the attention layers and nowhere else (RoPE
    in Qwen3-Next), so a mixer sweep over a RoPE base may take a layout with none (``describe`` says in
    how many layers it acts); a learned one (T5's table) would be trained by nothing."""
    def reads(cfg: ModelConfig) -> bool:
        return reads_attention_keys(MIXERS.get(cfg.mixer.name).factory)

    scheme = POSITIONS.get(m.position.name).factory
    cross = kind_of(m).cross_attention
    for name, layers in resolved.items():
        if any(map(reads, layers)) or (cross and name == "decoder" and m.cross_attention_position):
            continue
        ctx = PositionContext.of(m, name == "decoder")
        if scheme.acts_in_attention and not scheme.adds_to_embeddings and learns(m.position, ctx):
            fits = [e.name for e in POSITIONS.entries()
                    if e.factory.adds_to_embeddings or not learns_by_default(e, ctx)]
            raise ConfigError(f"{key}.position", f"'{m.position.name}' has parameters that only attention reads, and "
                              f"no {name} layer has attention (mixer {layers[0].mixer.name}), so nothing would train "
                              f"them; choose one of: {', '.join(fits)}")
    if cross or any(reads(c) for layers in resolved.values() for c in layers):
        return
    defaults = ModelConfig()
    for name in ATTENTION_KEYS:
        if getattr(m, name) != getattr(defaults, name):
            raise ConfigError(f"{key}.{name}", f"acts in attention, and no layer has attention (mixer "
                              f"{m.mixer.name}): leave it at its default, or give some layers mixer: attention")


def validate_model(m: ModelConfig, key: str = "model", stack: Optional[str] = None) -> ModelConfig:
    """Cross-field checks, every error naming the key; returns ``m`` with its defaults that depend
    on other keys (d_ff) filled in, so the saved config holds the numbers the model was built with.
    ``stack``: the one stack a layer's config serves (None: the model's, all its stacks)."""
    return _validated(m, key, stack).config


def resolve_model(m: ModelConfig, key: str = "model") -> ResolvedModel:
    """``m`` validated, with each stack's per-layer configs resolved as validation checked them: what
    ``build_model`` builds."""
    return _validated(m, key, None)


def resolve_layers(m: Union[ModelConfig, ResolvedModel]) -> ResolvedModel:
    """The per-layer configs of a config that did not come through validation (built by hand and
    handed to a model class), resolved without the model's own checks; a resolved one as it is."""
    if isinstance(m, ResolvedModel):
        return m
    return ResolvedModel(m, {name: tuple(layer_models(m, name, depth)) for name, depth in stacks(m)})


def _validated(m: ModelConfig, key: str, stack: Optional[str]) -> ResolvedModel:
    """The checks in the order they report (which mistake is named first), then the resolution."""
    _check_sizes(m, key)
    if m.d_ff is None:
        m = dataclasses.replace(m, d_ff=default_d_ff(m.d_model, is_gated(m.ffn)))
    _check_embeddings_and_heads(m, key)
    _check_positions(m, key)
    _check_cross_attention(m, key)
    if stack is None:
        check_entries(m, stacks(m), key)
    if m.layers is None:  # with model.layers, each layer's own mixer is checked as it resolves
        _check_model_mixer(m, key, stack)
    resolved = {name: tuple(layer_models(m, name, depth, key)) for name, depth in stacks(m)}
    if stack is None:
        check_attention_keys(m, resolved, key)
    PARAMETRIZATIONS.get(m.parametrization.name).factory.check(m.parametrization.options, m, f"{key}.parametrization")
    _check_head(m, key)
    return ResolvedModel(m, resolved)


def _check_sizes(m: ModelConfig, key: str) -> None:
    for name in ("d_model", "n_layers", "n_encoder_layers", "n_decoder_layers", "n_heads", "n_kv_heads",
                 "head_dim", "d_ff", "max_seq_len", "vocab_size"):
        _positive(f"{key}.{name}", getattr(m, name))
    for name in ("attention_scale", "attn_logit_softcap", "final_logit_softcap"):
        _positive(f"{key}.{name}", getattr(m, name))
    for f in dataclasses.fields(m):  # a key that only refines another does nothing without it: say so
        other = f.metadata.get("acts_with")
        if other and getattr(m, f.name) != f.default and getattr(m, other) is None:
            raise ConfigError(f"{key}.{f.name}", f"refines {key}.{other}, which is not set: set {key}.{other} "
                              f"too, or leave {f.name} at {f.default}")


def _check_embeddings_and_heads(m: ModelConfig, key: str) -> None:
    _positive(f"{key}.type_vocab_size", m.type_vocab_size, allow_zero=True)
    if m.type_vocab_size and not kind_of(m).token_types:
        able = " or ".join(f"'{k.name}'" for k in KINDS.values() if k.token_types)
        raise ConfigError(f"{key}.type_vocab_size", f"token-type embeddings are built for kind {able} only, "
                          f"not '{m.kind}'; set it to 0")
    for name in ("dropout", "attention_dropout", "embedding_dropout"):
        value = getattr(m, name)
        if value is not None and not 0.0 <= value < 1.0:
            raise ConfigError(f"{key}.{name}", f"must be in [0, 1), got {value}")
    if m.head_dim is None and m.d_model % m.n_heads:
        raise ConfigError(f"{key}.n_heads", f"d_model ({m.d_model}) is not divisible by n_heads ({m.n_heads}); "
                          f"change one, or set {key}.head_dim explicitly")
    if m.n_heads % m.kv_heads:
        raise ConfigError(f"{key}.n_kv_heads", f"n_heads ({m.n_heads}) is not divisible by n_kv_heads ({m.kv_heads})")


def _check_positions(m: ModelConfig, key: str) -> None:
    scheme = POSITIONS.get(m.position.name)
    for causal in stack_causality(m):
        scheme.factory.check(m.position.options, PositionContext.of(m, causal), f"{key}.position")
    if not m.cross_attention_position:
        return
    if not kind_of(m).cross_attention:
        able = " or ".join(f"'{k.name}'" for k in KINDS.values() if k.cross_attention)
        raise ConfigError(f"{key}.cross_attention_position", f"only applies to kind {able}")
    if not scheme.factory.acts_in_attention:
        able = [e.name for e in POSITIONS.entries() if e.factory.acts_in_attention]
        raise ConfigError(f"{key}.cross_attention_position", f"position '{m.position.name}' only adds to "
                          f"embeddings, so it cannot act in cross-attention; schemes that can: {', '.join(able)}")


def _check_cross_attention(m: ModelConfig, key: str) -> None:
    placement = PLACEMENTS.get(m.norm_placement.name).factory
    if kind_of(m).cross_attention and not placement.cross_attention:
        raise ConfigError(f"{key}.norm_placement", f"placement '{m.norm_placement.name}' has no form with "
                          f"cross-attention; for {m.kind} choose one of: "
                          f"{', '.join(e.name for e in PLACEMENTS.entries() if e.factory.cross_attention)}")


def _check_model_mixer(m: ModelConfig, key: str, stack: Optional[str]) -> None:
    """The model's mixer serves each stack it reaches (``stack``, or all the model's)."""
    for name in [stack] if stack is not None else kind_of(m).stacks:
        # of a model whose other stack it serves: how to give it to the decoder alone
        one = stack is None and len(kind_of(m).stacks) > 1 and serves(m.mixer, "decoder")
        check_mixer(m, name, key, hint=f"; for the decoder only: {key}.layers: [{{stack: decoder, mixer: "
                                       f"{m.mixer.name}}}]" if one else "")


def _check_head(m: ModelConfig, key: str) -> None:
    head = HEADS.get(m.head.name)
    if m.kind not in head.factory.kinds:
        fits = [e.name for e in HEADS.entries() if m.kind in e.factory.kinds]
        raise ConfigError(f"{key}.head", f"head '{m.head.name}' does not fit kind '{m.kind}'; "
                          f"heads for {m.kind}: {', '.join(fits)}")


# Where versions before the resolved model hid the per-layer configs on the config itself; nothing
# sets it now (the resolution is ResolvedModel, a value), and tests hold that no config carries it.
RESOLVED_LAYERS = "_resolved_layers"


def layer_configs(m: Union[ModelConfig, ResolvedModel], stack: str, depth: int) -> List[ModelConfig]:
    """The config of each layer of ``stack``: a resolved model's as validation resolved them; a config
    that did not come through validation is resolved here."""
    if isinstance(m, ResolvedModel):
        return m.layers(stack)
    return layer_models(m, stack, depth)


def stacks(m: ModelConfig) -> List[tuple]:
    """(stack, depth) of each stack the model has."""
    depth = {"encoder": m.encoder_layers, "decoder": m.decoder_layers}
    return [(s, depth[s]) for s in kind_of(m).stacks]


def layer_models(m: ModelConfig, stack: str, depth: int, key: str = "model") -> List[ModelConfig]:
    """The validated config of each layer of ``stack``: ``m`` where ``model.layers`` changes nothing."""
    if m.layers is None:
        return [m] * depth
    layers, checked = resolve(m, stack, depth, key), {}
    for index, (cfg, k) in enumerate(layers):
        if id(cfg) not in checked:
            check_mixer(cfg, stack, k, index, _stack_hint(m, cfg, stack, k))
            checked[id(cfg)] = validate_model(cfg, k, stack)
            scheme = POSITIONS.get(cfg.position.name).factory
            if cfg.position != m.position and scheme.adds_to_embeddings:
                raise ConfigError(f"{k}.position", f"'{cfg.position.name}' adds to the embeddings, which the whole "
                                  f"stack shares; per layer, choose a scheme that acts in attention or none: "
                                  f"{', '.join(e.name for e in POSITIONS.entries() if not e.factory.adds_to_embeddings)}")
            if m.cross_attention_position and cfg.position != m.position:
                try:  # cross-attention keeps the model's scheme, built for this layer's heads
                    POSITIONS.get(m.position.name).factory.check(m.position.options, PositionContext.of(cfg, True), k)
                except ConfigError as exc:
                    raise ConfigError(f"{k}.head_dim", f"cross-attention uses model.position at this layer's "
                                      f"shape: {exc.message}") from None
    return [checked[id(cfg)] for cfg, _ in layers]


def _stack_hint(m: ModelConfig, layer: ModelConfig, stack: str, key: str) -> str:
    """For an encoder_decoder entry without ``stack`` (it reaches both stacks) whose mixer serves the
    other stack: how to keep it to that one."""
    other = {"encoder": "decoder", "decoder": "encoder"}[stack]
    entries = {f"{key.rsplit('.layers[', 1)[0]}.layers[{i}]": e for i, e in enumerate(m.layers or [])}
    if len(kind_of(m).stacks) < 2 or "stack" in entries.get(key, {"stack": stack}) or not serves(layer.mixer, other):
        return ""
    return f"; the entry has no stack, so it reaches both stacks: add stack: {other} to change the {other} only"


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


# The precision strings Lightning 2.x accepts (lightning_fabric.connector's _PRECISION_INPUT_STR and its
# _ALIAS), kept here as data: importing lightning_fabric to ask it pulls torch._dynamo, torchmetrics and
# transformers, seconds that `describe`, `--dry-run` and every config error would wait for.
# tests/test_imports.py holds this to the installed Lightning's own list.
PRECISIONS = ("transformer-engine", "transformer-engine-float16", "16-true", "16-mixed", "bf16-true", "bf16-mixed",
              "32-true", "64-true", "64", "32", "16", "bf16")


EXACT_MATCH_DECODING = ("auto", "compiled", "eager")


def validate_train(t: TrainConfig, key: str = "train") -> None:
    for name in ("max_steps", "batch_size", "eval_batch_size", "accumulate_grad_batches", "val_every", "log_every",
                 "val_batches"):
        _positive(f"{key}.{name}", getattr(t, name))
    for name in ("warmup_steps", "weight_decay", "exact_match_samples", "num_workers", "grad_clip", "group_by_length",
                 "attention_diagnostics_every"):
        _positive(f"{key}.{name}", getattr(t, name), allow_zero=True)
    if t.attention_diagnostics_every and not t.attention_diagnostics:
        raise ConfigError(f"{key}.attention_diagnostics_every", "records training steps only with "
                          f"{key}.attention_diagnostics: true")
    if t.attention_diagnostics_every % t.log_every:  # a training row is written every log_every steps, no other
        raise ConfigError(f"{key}.attention_diagnostics_every", f"must be a multiple of {key}.log_every "
                          f"({t.log_every}), got {t.attention_diagnostics_every}")
    _positive(f"{key}.lr", t.lr)
    if len(t.betas) != 2 or not all(0 <= b < 1 for b in t.betas):
        raise ConfigError(f"{key}.betas", f"expected two numbers in [0, 1), got {t.betas}")
    if not 0 <= t.label_smoothing < 1:
        raise ConfigError(f"{key}.label_smoothing", f"must be in [0, 1), got {t.label_smoothing}")
    if not 0 <= t.min_lr_ratio <= 1:
        raise ConfigError(f"{key}.min_lr_ratio", f"must be in [0, 1], got {t.min_lr_ratio}")
    if t.num_nodes < 1:
        raise ConfigError(f"{key}.num_nodes", f"must be at least 1, got {t.num_nodes}")
    if t.compile_mode not in COMPILE_MODES:
        raise choice_error(f"{key}.compile_mode", "torch.compile mode", t.compile_mode, COMPILE_MODES)
    if t.exact_match_decoding not in EXACT_MATCH_DECODING:
        raise choice_error(f"{key}.exact_match_decoding", "decoding path", t.exact_match_decoding, EXACT_MATCH_DECODING)
    if str(t.precision) not in PRECISIONS:
        raise choice_error(f"{key}.precision", "precision", t.precision, PRECISIONS)


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` checked, its model's defaults filled in and its layers resolved (``resolved_model``): what
    config owns; ``arch_zoo.experiment.validate`` adds the task's and the recipe's checks."""
    resolved = resolve_model(cfg.model)
    cfg = dataclasses.replace(cfg, model=resolved.config, resolved_model=resolved)
    validate_train(cfg.train)
    return cfg
