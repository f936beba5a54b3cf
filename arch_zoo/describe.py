"""Human-readable text for ``arch-zoo components`` and ``arch-zoo describe``."""
from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch.overrides import TorchFunctionMode

from .components.feedforward import has_sublayer, is_gated
from .components.mixers.attention import reads_attention_keys, score_width
from .components.placements import ends_with_norm
from .config import ExperimentConfig
from .experiment import all_registries
from .config.kinds import kind_of
from .config.layers import as_trained, layers_word, layout, pattern_notes, resolved_mixer
from .config.validation import D_FF_RULE, layer_configs, stacks
from .errors import ConfigError
from .registry import Registry
from .rundir import CONFIG as RUN_CONFIG

DEFAULT_VOCAB = 32000


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # list- and dict-typed options: files=[]
        return f.default_factory()
    return "required"


def _options(entry) -> str:
    fields = dataclasses.fields(entry.options)
    if not fields:
        return ""
    return "  [" + ", ".join(f"{f.name}={_default(f)}" for f in fields) + "]"


def _traits(entry) -> str:
    """What a component declares beyond its options (a feed-forward's gating sets d_ff's default)."""
    if hasattr(entry.factory, "gated_for"):
        return "  (d_ff default follows its options: an MoE's, its expert's)"
    gated = getattr(entry.factory, "gated", None)
    if gated is None:
        return ""
    return f"  ({'gated; ' if gated else ''}d_ff default {D_FF_RULE[gated]})"


def components_text() -> str:
    lines: List[str] = []
    for family, registry in all_registries().items():
        lines.append(f"{family}  ({registry.kind})")
        width = max((len(n) for n in registry.choices()), default=0)
        for entry in registry.entries():
            origin = f"  (plugin: {entry.source})" if entry.source else ""
            lines.append(f"  {entry.name:<{width}}  {entry.description}{_options(entry)}{_traits(entry)}{origin}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# torch.nn.init's fills and the Tensor's own random ones: a meta tensor has no values for them to set
_FILLS = {n for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")} | {
    "random_", "exponential_", "geometric_", "log_normal_", "cauchy_", "bernoulli_"}


class _CountOnly(TorchFunctionMode):
    """Beside ``torch.device("meta")``, for a model built only to be counted. torch 2.13 runs a meta
    tensor's arithmetic and ``normal_`` as Python reference kernels, whose first call imports
    torch._dynamo: 1.5-5 s on 2 cores, more than the rest of ``describe``. A count needs neither:
    fills of meta tensors are skipped, and ``arange`` (position tables: small, never parameters)
    runs on the CPU, so the arithmetic on it does too."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _FILLS:
            tensor = args[0] if args else kwargs.get("tensor")
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        elif name == "arange" and kwargs.get("device") is None:
            kwargs = {**kwargs, "device": "cpu"}
        return func(*args, **kwargs)
def _attention_scale(m, model) -> str:
    """The scale the model's mixer applies: over the width its q.k sum runs (MLA's differs from head_dim)."""
    if m.attention_scale is not None:
        return str(m.attention_scale)
    width, name = score_width(registry_of("mixers").get(m.mixer.name).factory, m.mixer.options, m)
    scale = model.parametrization.attention_scale(width)
    if scale is not None:
        return f"{scale:g} (the parametrization's, {m.parametrization.name})"
    return f"1/sqrt({name})" + ("" if name == "head_dim" else f" = 1/sqrt({width})")


def _fmt(n: float) -> str:
    from .formatting import si

    return si(n)


def describe_source(source: str, overrides: Sequence[str] = (), vocab_size: Optional[int] = None,
                    seq_len: Optional[int] = None) -> str:
    """``arch-zoo describe``: a YAML config, ``preset:NAME`` or a run directory. The vocabulary is the
    run's saved tokenizer's, else the task's (built as training would build it), else assumed."""
    from .config.loading import PRESET_PREFIX, published_vocab
    from .experiment import load

    path, run_dir = Path(source), None
    if not source.startswith(PRESET_PREFIX) and path.is_dir():
        if not (path / RUN_CONFIG).is_file():
            raise ConfigError("config", f"{path} is a directory without {RUN_CONFIG}; give a run directory, "
                                        "a YAML config or preset:NAME")
        run_dir, source = path, str(path / RUN_CONFIG)
    elif path.name == RUN_CONFIG and path.is_file():
        run_dir = path.parent
    with as_trained(str(run_dir)) if run_dir is not None and not overrides else contextlib.nullcontext():
        cfg = load(source, overrides)  # a run's config as it trained, unless the command line changes it
    return describe_text(cfg, vocab_size, seq_len, run_dir=run_dir,
                         task_changed=any(o.split("=", 1)[0].split(".")[0] in ("task", "seed") for o in overrides),
                         published=published_vocab(source, overrides))


def _vocab(cfg: ExperimentConfig, run_dir: Optional[Path], task_changed: bool,
           published: Optional[int] = None) -> Tuple[int, str, Any]:
    """(vocabulary size, where it comes from, the task's data where it was built for it, else None):
    the run's, the task's, the published model's its preset names (``published``), else assumed."""
    from .data.tokenizers import TOKENIZER_FILE, load_tokenizer

    if run_dir is not None and (run_dir / TOKENIZER_FILE).is_file() and not task_changed:
        return load_tokenizer(run_dir).vocab_size, f" (the run's {TOKENIZER_FILE})", None
    if cfg.task is not None:
        from .training.run import prepare

        data = prepare(cfg)
        return data.tokenizer.vocab_size, f" (the task's {data.tokenizer.name} tokenizer)", data
    if published is not None:
        return published, " (the published model's, from its preset; a task's tokenizer replaces it)", None
    return DEFAULT_VOCAB, " (assumed: no task or run gives it; pass --vocab-size)", None


def _flops_lines(model, m, seq_len: Optional[int], data, moe: bool) -> List[str]:
    """Forward FLOPs per token at a stated length: ``--seq-len``, else the task's training examples (as
    summary.json and sweep budgets count them), else model.max_seq_len."""
    from .data.lengths import split_lengths
    from .models.flops import FlopCounter, at_length, decoding_state_bytes

    seq2seq = kind_of(m).cross_attention  # a source and a target
    if seq_len is None and data is not None:
        train = split_lengths(data.splits["train"])
        counts = train.counts
        mean = (f"{train.mean(0):.3g} source + {train.mean(1):.3g} target" if seq2seq else f"{train.mean(0):.3g}")
        where = f"at the task's training lengths ({train.examples:,} examples, mean {mean} tokens)"
    else:
        n = seq_len or m.max_seq_len
        counts = at_length(model, n)
        what = f"source and target {n} tokens each" if seq2seq else f"length {n}"
        where = f"at {what}" + (" (--seq-len)" if seq_len else " (model.max_seq_len; --seq-len sets the length)")
    flops = FlopCounter(model).per_token(counts)
    lines = [f"forward FLOPs per token  {_fmt(flops['total'])} (a training step is ~3x"
             f"{'; active experts only' if moe else ''})",
             f"  {where}" + ("; source and target tokens both count" if seq2seq else "")]
    lines += [f"  {part:<26}{_fmt(n):>14}" for part, n in flops.items() if part != "total"]
    if kind_of(m).decodes:  # what one more token costs after a full context, and what decoding keeps
        n = seq_len or m.max_seq_len
        source = n if seq2seq else 0
        state = decoding_state_bytes(model, n, 4, source)
        lines += ["", f"decoding at context {n}" + (f" (source {n})" if seq2seq else ""),
                  f"  one step FLOPs            {_fmt(FlopCounter(model).decode_step(n, source)):>14}",
                  f"  state bytes (float32)     {_fmt(state):>14}  {_fmt(state / n)} per token"]
    return lines


def describe_text(cfg: ExperimentConfig, vocab_size: Optional[int] = None, seq_len: Optional[int] = None,
                  run_dir: Optional[Path] = None, task_changed: bool = False, published: Optional[int] = None) -> str:
    """What ``arch-zoo describe`` prints: the model's shape and components, its layers, its parameters,
    and its FLOPs and decoding state, each section read from the model built from ``cfg``."""
    from .models import build_model
    from .models.summary import active_parameters, count_parameters

    m = cfg.model
    vocab_note, data = "", None
    if vocab_size is None and m.vocab_size is not None:
        vocab_size = m.vocab_size
    elif vocab_size is None:
        vocab_size, vocab_note, data = _vocab(cfg, run_dir, task_changed, published)
    with torch.device("meta"), _CountOnly():  # counts and FLOPs need shapes only: a 7B preset costs no memory
        model = build_model(cfg, vocab_size)  # as load resolved it (a run's layers as they trained)
    total, active = count_parameters(model), active_parameters(model)
    start = [f"  weights       from {cfg.train.init_from} (train.init_from: a fresh run from them; optimizer, step "
             "and schedule start anew)"] if cfg.train.init_from else []
    lines = [*_component_lines(cfg.name, m, model, vocab_size, vocab_note)[:-1], *start, "", "layers", *_layer_lines(m),
             "", *_parameter_lines(model, total, active), "", *_flops_lines(model, m, seq_len, data, active != total)]
    return "\n".join(lines) + "\n"


def _component_lines(name: str, m, model, vocab_size: int, vocab_note: str) -> List[str]:
    """The headline (kind and sizes), then one line per component the model was built from."""
    from .models.embedding_scale import embedding_scale

    entry = registry_of("placements").get(m.norm_placement.name)
    placement = entry.factory.formula or entry.description
    gated = is_gated(m.ffn)
    return [
        f"{name}: {m.kind.replace('_', '-')} model",
        f"  d_model {m.d_model}, heads {m.n_heads} (kv heads {m.kv_heads}, head_dim {m.dim_per_head}), "
        f"d_ff {m.d_ff}, max_seq_len {m.max_seq_len}, vocab {vocab_size}{vocab_note}",
        "",
        "components",
        f"  position      {m.position.describe()}{_reach(m)}"
        + (", also in cross-attention" if m.cross_attention_position else ""),
        f"  norm          {m.norm.describe()}, placement {m.norm_placement.describe()}: {placement}; "
        f"final norm {'yes' if ends_with_norm(m) else 'no'}",
        f"  mixer         {resolved_mixer(m).mixer.describe()}" + _notes("mixers", m.mixer),
        f"  attention     {m.attention.describe()}, {m.attention_kernel.describe()} kernel, q.k scaled by "
        f"{_attention_scale(m, model)}"
        + (f", qk-norm {m.qk_norm.describe()} " + ("per head" if m.qk_norm_scope == "head" else
                                                   "over the whole q and k projections")
           if m.qk_norm is not None else "")
        + (f", logits soft-capped at {m.attn_logit_softcap} (sdpa runs the explicit math)"
           if m.attn_logit_softcap is not None else ""),
        f"  feed-forward  {m.ffn.describe()}{', gated' if gated else ''}, bias {'yes' if m.bias else 'no'}"
        + _notes("feedforward", m.ffn),
        f"  head          {m.head.describe()}" + (", tied to token embeddings" if m.tie_embeddings else "")
        + (f", output soft-capped at {m.final_logit_softcap}" if m.final_logit_softcap is not None else ""),
        f"  init          {m.init.describe()}",
        f"  parametrization {m.parametrization.describe()}: {model.parametrization.describe()}",
        f"  embeddings    scale by sqrt(d_model): {'yes' if m.scale_embeddings else 'no'}"
        + (f" (held at {model.embed.multiplier:g} by the parametrization)"
           if m.scale_embeddings and model.embed.multiplier != m.d_model ** 0.5 else "")
        + (", shared by encoder and decoder" if m.tie_encoder_decoder_embeddings else "")
        + (f", plus {m.type_vocab_size} token types" if m.type_vocab_size else "")
        + (f"; normalized by {m.norm.describe()} after positions" if m.embedding_norm else ""),
        f"  signal        {embedding_scale(m, vocab_size).describe()}",
        f"  dropout       residual {m.dropout}, attention {m.rate('attention_dropout')}, "
        f"embedding {m.rate('embedding_dropout')}",
        "",  # the layers' section follows
    ]


def _parameter_lines(model, total: int, active: int) -> List[str]:
    from .models.summary import parameter_breakdown

    lines = [f"parameters  {total:,} total" + (f", {active:,} active per token (experts not routed to "
                                               f"excluded)" if active != total else "")]
    for part, n in parameter_breakdown(model).items():
        lines.append(f"  {part:<26}{n:>14,}  {100 * n / total:5.1f}%")
    return lines


def _layer_lines(m) -> List[str]:
    """A headline per stack saying what each layer is (a hybrid's mixers by layer), then with
    ``model.layers`` what differs from the model per layer, and which layers a pattern that does not
    tile its range gave each item."""
    lines = []
    for stack, depth in stacks(m):
        cross = " -> cross-attention" if stack == "decoder" and kind_of(m).cross_attention else ""
        groups: dict = {}
        for index, cfg in enumerate(layer_configs(m, stack, depth)):
            ffn = " -> feed-forward" if has_sublayer(cfg.ffn) else ""  # ffn: none builds no feed-forward
            groups.setdefault((_mixing(cfg), ffn), []).append(index)
        how = "causal" if stack == "decoder" else "bidirectional"
        if len(groups) == 1:
            (mixing, ffn), = groups
            lines.append(f"  {stack} x {depth}: {mixing} ({how}){cross}{ffn}")
        else:
            lines.append(f"  {stack} x {depth} ({how}): " + "; ".join(
                f"{layers_word(ix)} {mixing}{cross}{ffn}" for (mixing, ffn), ix in groups.items()))
    if m.layers is not None:
        for stack, depth in stacks(m):
            lines += [f"  {stack} {layers_word(ix)}: {diff}" for ix, diff in layout(m, stack, depth)]
        lines += [f"  note: {line}" for line in pattern_notes(m, stacks(m))]
    return lines


def _reach(m) -> str:
    """In how many layers a scheme that acts only in attention acts, where some layer has no attention."""
    scheme = registry_of("positions").get(m.position.name).factory
    if not scheme.acts_in_attention or scheme.adds_to_embeddings:
        return ""
    layers = [cfg for stack, depth in stacks(m) for cfg in layer_configs(m, stack, depth)]
    attention = [cfg for cfg in layers if reads_attention_keys(registry_of("mixers").get(cfg.mixer.name).factory)]
    acting = [cfg for cfg in attention if cfg.position == m.position]
    if len(acting) == len(layers):
        return ""
    return f": acts in {len(acting)} of {len(layers)} layers" + (
        " (only attention reads it, and no layer has attention)" if not attention else " (only attention reads it)")


def _mixing(m) -> str:
    """The layers' mixer as the layer line names it (a mixer may say it as ``layer_name``)."""
    return getattr(registry_of("mixers").get(m.mixer.name).factory, "layer_name", m.mixer.name)


def _notes(family: str, spec) -> str:
    """What a component says about its options beyond their values (an MoE: its training loss)."""
    notes = getattr(registry_of(family).get(spec.name).factory, "notes", None)
    return f"\n{'':16}{notes(spec.options)}" if notes is not None else ""


def registry_of(family: str) -> Registry:
    return all_registries()[family]
