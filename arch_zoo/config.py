"""The typed experiment schema and the one place YAML is read.

``load(source, overrides)`` reads a YAML file (or ``preset:NAME``), merges OmegaConf dotlist
overrides (``model.position=rope``), and returns a validated ``ExperimentConfig``. Every error is
a ``ConfigError`` naming the dotted key, the bad value and the choices.

OmegaConf is imported only by the loading functions, so ``arch_zoo.models`` (which needs the
schema) works with torch alone.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Union

from .config_types import from_dict, to_dict
from .errors import ConfigError, choice_error, yaml_error
from .registry import ComponentSpec, component_field


def component(registry: str, default: Optional[str]):
    """A config field naming a registered component (bare name or {name: ..., **options});
    a ``None`` default makes the component optional."""
    return component_field(registry, ComponentSpec(default) if default else None)


@dataclass(frozen=True)
class ModelConfig:
    kind: Literal["encoder", "decoder", "encoder_decoder"] = "decoder"
    vocab_size: Optional[int] = None  # null: taken from the task's tokenizer
    d_model: int = 256
    n_layers: int = 4
    n_encoder_layers: Optional[int] = None  # default: n_layers
    n_decoder_layers: Optional[int] = None  # default: n_layers
    n_heads: int = 4
    n_kv_heads: Optional[int] = None  # default: n_heads (MHA); 1 is MQA; in between is GQA
    head_dim: Optional[int] = None  # default: d_model // n_heads
    d_ff: Optional[int] = None  # default: 4 * d_model; gated FFNs 8/3 * d_model, up to a multiple of 8
    max_seq_len: int = 512
    position: ComponentSpec = component("positions", "sinusoidal")
    cross_attention_position: bool = False  # also apply the scheme's rotate/bias in cross-attention
    norm: ComponentSpec = component("norms", "layernorm")
    norm_placement: Literal["pre", "post"] = "pre"
    final_norm: Optional[bool] = None  # norm after the last layer; default: true for pre, false for post
    ffn: ComponentSpec = component("feedforward", "gelu")
    attention: ComponentSpec = component("attention", "sdpa")  # the kernel only: never changes the function
    attention_scale: Optional[float] = None  # multiplier on q.k; null: 1/sqrt(head_dim); T5: 1.0
    head: ComponentSpec = component("heads", "lm")
    init: ComponentSpec = component("init", "normal")
    dropout: float = 0.0  # residual paths
    attention_dropout: Optional[float] = None  # default: dropout
    embedding_dropout: Optional[float] = None  # default: dropout
    bias: bool = True  # biases in attention and feed-forward projections
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(d_model)
    type_vocab_size: int = 0  # token-type (segment) embeddings added to the tokens' (BERT: 2); 0: none
    embedding_norm: bool = False  # a model.norm over the embeddings once positions are added (BERT)
    tie_embeddings: bool = True  # output projection shares the token embedding
    tie_encoder_decoder_embeddings: bool = False
    pad_token_id: int = 0

    # Resolved views of the defaults above.
    @property
    def encoder_layers(self) -> int:
        return self.n_encoder_layers if self.n_encoder_layers is not None else self.n_layers

    @property
    def decoder_layers(self) -> int:
        return self.n_decoder_layers if self.n_decoder_layers is not None else self.n_layers

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def dim_per_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    @property
    def use_final_norm(self) -> bool:
        return self.final_norm if self.final_norm is not None else self.norm_placement == "pre"

    def rate(self, name: str) -> float:
        value = getattr(self, name)
        return self.dropout if value is None else value


@dataclass(frozen=True)
class TrainConfig:
    max_steps: int = 1000  # optimizer steps
    batch_size: int = 32  # per device
    eval_batch_size: Optional[int] = None  # default: batch_size
    optimizer: Literal["adamw", "adam", "sgd"] = "adamw"
    lr: float = 1e-3  # peak learning rate
    weight_decay: float = 0.0  # decoupled for adamw, L2 for adam/sgd; never on biases, norms, embeddings
    betas: List[float] = field(default_factory=lambda: [0.9, 0.98])
    momentum: float = 0.9  # sgd only
    schedule: Literal["constant", "cosine", "noam"] = "constant"  # each with linear warmup
    warmup_steps: int = 0
    min_lr_ratio: float = 0.0  # cosine decays to lr * min_lr_ratio
    label_smoothing: float = 0.0
    grad_clip: Optional[float] = 1.0  # max global grad norm; null disables
    accumulate_grad_batches: int = 1
    precision: str = "32-true"  # Lightning precision: 32-true, bf16-mixed, 16-mixed, ...
    compile: bool = False  # torch.compile the model for training and evaluation (one graph where it holds)
    compile_mode: str = "default"  # torch.compile mode: default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs
    tf32: bool = True  # TF32 matmuls where CUDA is (Ampere and later); false keeps full fp32 matmuls
    accelerator: str = "auto"
    devices: Any = 1  # Lightning devices: 1, 2, "auto", [0, 1]
    strategy: str = "auto"  # Lightning strategy: auto, ddp, fsdp (CUDA only), ...
    num_nodes: int = 1  # machines the strategy spans (Lightning's num_nodes; launched by Slurm/torchrun)
    val_every: int = 200  # steps between validations (and checkpoints)
    val_batches: Optional[int] = None  # cap on batches per evaluation split
    exact_match_samples: int = 256  # held-out examples decoded greedily for exact match
    log_every: int = 10
    progress_bar: bool = True
    num_workers: int = 0


@dataclass(frozen=True)
class WandbConfig:
    enabled: bool = False
    project: str = "arch_zoo"
    entity: Optional[str] = None
    group: Optional[str] = None
    job_type: Optional[str] = None
    tags: List[str] = field(default_factory=list)
    mode: Optional[Literal["online", "offline", "disabled"]] = None  # null: $WANDB_MODE, else offline without a key


@dataclass(frozen=True)
class LoggingConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass(frozen=True)
class ExperimentConfig:
    name: str = "experiment"
    seed: int = 0  # fixes initialisation, data generation and data order
    model: ModelConfig = field(default_factory=ModelConfig)
    task: Optional[ComponentSpec] = component("tasks", None)  # required to train, not to describe
    train: TrainConfig = field(default_factory=TrainConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


PRESET_PREFIX = "preset:"


def _positive(key: str, value: Optional[Union[int, float]], allow_zero: bool = False) -> None:
    if value is not None and (value < 0 or (value == 0 and not allow_zero)):
        raise ConfigError(key, f"must be {'>= 0' if allow_zero else 'positive'}, got {value}")


def position_context(m: ModelConfig):
    from .components.positions import PositionContext

    return PositionContext(m.d_model, m.n_heads, m.dim_per_head, m.max_seq_len, causal=m.kind != "encoder")


def position_limit(m: ModelConfig) -> Optional[int]:
    """The longest sequence the model's position scheme can represent (None: any length)."""
    from .components.positions import POSITIONS

    return POSITIONS.get(m.position.name).factory.max_length(m.position.options, position_context(m))


FFN_MULTIPLE = 8
D_FF_RULE = {False: "4 * d_model", True: f"8/3 * d_model, up to a multiple of {FFN_MULTIPLE}"}  # by gated


def default_d_ff(d_model: int, gated: bool) -> int:
    """4 * d_model (Vaswani et al. 2017, GPT-2, BERT). A gated FFN has three matrices instead of
    two, so 8/3 * d_model keeps its parameters those of the 4x MLP (Shazeer 2020, LLaMA); rounded
    up to a multiple of 8 for matmul-friendly shapes."""
    if not gated:
        return 4 * d_model
    return FFN_MULTIPLE * -(-8 * d_model // (3 * FFN_MULTIPLE))  # ceil, in integers


def validate_model(m: ModelConfig, key: str = "model") -> ModelConfig:
    """Cross-field checks, every error naming the key; returns ``m`` with its defaults that depend
    on other keys (d_ff) filled in, so the saved config holds the numbers the model was built with."""
    from .components.feedforward import FEEDFORWARD
    from .components.positions import POSITIONS
    from .models.heads import HEADS

    for name in ("d_model", "n_layers", "n_encoder_layers", "n_decoder_layers", "n_heads", "n_kv_heads",
                 "head_dim", "d_ff", "max_seq_len", "vocab_size"):
        _positive(f"{key}.{name}", getattr(m, name))
    _positive(f"{key}.attention_scale", m.attention_scale)
    if m.d_ff is None:
        m = dataclasses.replace(m, d_ff=default_d_ff(m.d_model, FEEDFORWARD.get(m.ffn.name).factory.gated))
    _positive(f"{key}.type_vocab_size", m.type_vocab_size, allow_zero=True)
    if m.type_vocab_size and m.kind != "encoder":
        raise ConfigError(f"{key}.type_vocab_size", f"token-type embeddings are built for kind 'encoder' only, "
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
    scheme = POSITIONS.get(m.position.name)
    scheme.factory.check(m.position.options, position_context(m), f"{key}.position")
    if m.cross_attention_position:
        if m.kind != "encoder_decoder":
            raise ConfigError(f"{key}.cross_attention_position", "only applies to kind 'encoder_decoder'")
        if not scheme.factory.acts_in_attention:
            able = [e.name for e in POSITIONS.entries() if e.factory.acts_in_attention]
            raise ConfigError(f"{key}.cross_attention_position", f"position '{m.position.name}' only adds to "
                              f"embeddings, so it cannot act in cross-attention; schemes that can: {', '.join(able)}")
    head = HEADS.get(m.head.name)
    if m.kind not in head.factory.kinds:
        fits = [e.name for e in HEADS.entries() if m.kind in e.factory.kinds]
        raise ConfigError(f"{key}.head", f"head '{m.head.name}' does not fit kind '{m.kind}'; "
                          f"heads for {m.kind}: {', '.join(fits)}")
    return m


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _precision_choices() -> List[str]:
    """The precision strings the installed Lightning accepts ([] where Lightning is absent: ``restore`` needs none)."""
    try:
        from lightning_fabric import connector
    except ImportError:
        return []
    return [*typing.get_args(connector._PRECISION_INPUT_STR), *typing.get_args(connector._PRECISION_INPUT_STR_ALIAS)]


def validate_train(t: TrainConfig, key: str = "train") -> None:
    for name in ("max_steps", "batch_size", "eval_batch_size", "accumulate_grad_batches", "val_every", "log_every",
                 "val_batches"):
        _positive(f"{key}.{name}", getattr(t, name))
    for name in ("warmup_steps", "weight_decay", "exact_match_samples", "num_workers", "grad_clip"):
        _positive(f"{key}.{name}", getattr(t, name), allow_zero=True)
    _positive(f"{key}.lr", t.lr)
    if len(t.betas) != 2 or not all(0 <= b < 1 for b in t.betas):
        raise ConfigError(f"{key}.betas", f"expected two numbers in [0, 1), got {t.betas}")
    if not 0 <= t.label_smoothing < 1:
        raise ConfigError(f"{key}.label_smoothing", f"must be in [0, 1), got {t.label_smoothing}")
    if not 0 <= t.min_lr_ratio <= 1:
        raise ConfigError(f"{key}.min_lr_ratio", f"must be in [0, 1], got {t.min_lr_ratio}")
    if t.schedule == "noam" and t.warmup_steps == 0:
        raise ConfigError(f"{key}.warmup_steps", "the noam schedule needs warmup_steps > 0")
    if t.num_nodes < 1:
        raise ConfigError(f"{key}.num_nodes", f"must be at least 1, got {t.num_nodes}")
    if t.compile_mode not in COMPILE_MODES:
        raise choice_error(f"{key}.compile_mode", "torch.compile mode", t.compile_mode, COMPILE_MODES)
    precisions = _precision_choices()
    if precisions and str(t.precision) not in precisions:
        raise choice_error(f"{key}.precision", "precision", t.precision, precisions)


def validate_task(cfg: ExperimentConfig, key: str = "task") -> None:
    from .data.tasks import TASKS

    if cfg.task is None:
        return

    task = TASKS.get(cfg.task.name, key)
    if cfg.model.kind not in task.factory.kinds:
        fits = [e.name for e in TASKS.entries() if cfg.model.kind in e.factory.kinds]
        raise ConfigError(key, f"task '{cfg.task.name}' does not fit model.kind '{cfg.model.kind}' (it needs "
                          f"{' or '.join(task.factory.kinds)}); tasks for {cfg.model.kind}: {', '.join(fits)}")
    task.factory.check(cfg.task.options, cfg.model.kind, cfg.model.max_seq_len, key)


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    cfg = dataclasses.replace(cfg, model=validate_model(cfg.model))
    validate_train(cfg.train)
    validate_task(cfg)
    return cfg


# --------------------------------------------------------------------------------------- loading

def _omegaconf():
    """Imported on first use, so the schema (and with it arch_zoo.models) needs torch alone."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    return OmegaConf, OmegaConfBaseException


def preset_dir() -> Path:
    return Path(__file__).parent / "models" / "presets"


def preset_names() -> List[str]:
    return sorted(p.stem for p in preset_dir().glob("*.yaml"))


def _read_yaml(path: Path, key: str) -> Dict[str, Any]:
    OmegaConf, OmegaConfBaseException = _omegaconf()
    if path.is_dir():
        raise ConfigError(key, f"{path} is a directory; give a YAML file")
    if not path.is_file():
        raise ConfigError(key, f"file not found: {path}")
    import yaml

    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except (OmegaConfBaseException, yaml.YAMLError, ValueError, OSError) as exc:  # ValueError: not UTF-8
        raise ConfigError(key, yaml_error(path, exc)) from None
    if not data:  # an empty file is a mistake (a wrong path, an unsaved editor), not "all defaults"
        raise ConfigError(key, f"{path} is empty")
    if not isinstance(data, dict):
        raise ConfigError(key, f"{path} must hold a mapping, not {type(data).__name__}")
    return data


def _source_path(source: str, here: Path, key: str) -> Path:
    if source.startswith(PRESET_PREFIX):
        name = source[len(PRESET_PREFIX):]
        if name not in preset_names():
            from .errors import choice_error

            raise choice_error(key, "preset", name, preset_names())
        return preset_dir() / f"{name}.yaml"
    path = Path(source).expanduser()
    return path if path.is_absolute() else here / path


def _expand_model(value: Any, here: Path, key: str, depth: int = 0) -> Any:
    """``model: preset:NAME`` / ``model: path.yaml`` / ``model: {base: ..., **changes}`` -> a plain mapping."""
    if depth > 8:
        raise ConfigError(key, "model 'base' chain is too deep (a cycle?)")
    if isinstance(value, str):
        value = {"base": value}
    if not isinstance(value, dict) or "base" not in value:
        return value
    value = dict(value)
    path = _source_path(str(value.pop("base")), here, f"{key}.base")
    base = _read_yaml(path, f"{key}.base")
    base = base.get("model", base) if _is_experiment(base) else base
    base = _expand_model(base, path.parent, key, depth + 1)
    return _merge(ModelConfig, base, value)


def _is_experiment(data: Mapping) -> bool:
    """A model-only file (presets, configs/models/) has model keys and no experiment keys."""
    experiment = {f.name for f in dataclasses.fields(ExperimentConfig)}
    model = {f.name for f in dataclasses.fields(ModelConfig)} | {"base"}
    return any(k in experiment for k in data) or not any(k in model for k in data)


def _merge(schema: Any, base: Any, over: Any, set_here: frozenset = frozenset(), prefix: str = "") -> Any:
    """Deep-merge ``over`` onto ``base`` following the schema (a dataclass, or None for plain data).

    A component whose name changes is replaced whole: the options ``base`` gave the old one would
    not fit the new one. Options in ``set_here`` (dotted keys set earlier on the same command line)
    are kept, so `x.position=alibi x.position.max_bias=4` and the reverse order mean the same."""
    if not isinstance(over, Mapping) or not isinstance(base, Mapping):
        return over
    fields = {f.name: f for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else {}
    hints = typing.get_type_hints(schema) if fields else {}
    out = dict(base)
    for k, v in over.items():
        f, key = fields.get(k), f"{prefix}{k}"
        if k not in out or f is None:
            out[k] = _merge(None, out[k], v) if isinstance(out.get(k), Mapping) else v
        elif "registry" in f.metadata and v is not None and out[k] is not None:
            out[k] = _merge_component(f.metadata["registry"](), out[k], v, set_here, key)
        elif dataclasses.is_dataclass(hints[k]):
            out[k] = _merge(hints[k], out[k], v, set_here, f"{key}.")
        elif isinstance(out[k], Mapping) and isinstance(v, Mapping):
            out[k] = _merge(None, out[k], v)
        else:
            out[k] = v
    return out


def _merge_component(registry, base: Any, over: Any, set_here: frozenset, key: str) -> Dict[str, Any]:
    """{name, **options} of a component field after ``over``; nested components (a task's
    tokenizer) merge by the options dataclass of the name that results."""
    old = dict(base) if isinstance(base, Mapping) else {"name": base}
    new = dict(over) if isinstance(over, Mapping) else {"name": over}
    name = new.get("name", old.get("name"))
    if name != old.get("name"):
        old = {k: v for k, v in old.items() if f"{key}.{k}" in set_here}
    schema = registry.get(name).options if name in registry.choices() else None
    return {"name": name, **_merge(schema, {k: v for k, v in old.items() if k != "name"},
                                   {k: v for k, v in new.items() if k != "name"}, set_here, f"{key}.")}


def _leaves(data: Any, prefix: str = "") -> List[str]:
    if not isinstance(data, Mapping):
        return [prefix[:-1]]
    return [leaf for k, v in data.items() for leaf in _leaves(v, f"{prefix}{k}.")]


def parse_overrides(overrides: Sequence[str]) -> Dict[str, Any]:
    OmegaConf, OmegaConfBaseException = _omegaconf()
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(item, "an override must look like key=value (e.g. model.position=rope)")
    try:
        return OmegaConf.to_container(OmegaConf.from_dotlist(list(overrides)), resolve=False)
    except OmegaConfBaseException as exc:
        raise ConfigError("overrides", str(exc).splitlines()[0]) from None


def load_dict(source: Union[str, Path, Mapping], overrides: Sequence[str] = ()) -> Dict[str, Any]:
    """The merged, interpolation-resolved plain data, before typing."""
    OmegaConf, OmegaConfBaseException = _omegaconf()
    if isinstance(source, Mapping):
        data, here = dict(source), Path.cwd()
    else:
        source = str(source)
        path = _source_path(source, Path.cwd(), "config")
        data, here = _read_yaml(path, "config"), path.parent
    if not _is_experiment(data):  # a model-only file (configs/models/*.yaml, presets)
        data = {"name": Path(str(source)).stem.replace(PRESET_PREFIX, ""), "model": data}
    if "model" in data:
        data["model"] = _expand_model(data["model"], here, "model")
    merged, set_here = data, frozenset()
    for item in overrides:  # one at a time, so a component's name and options combine in any order
        over = parse_overrides([item])
        if "model" in over:
            over["model"] = _expand_model(over["model"], here, "model")
        merged = _merge(ExperimentConfig, merged, over, set_here)
        set_here |= set(_leaves(over))
    try:
        return OmegaConf.to_container(OmegaConf.create(merged), resolve=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(getattr(exc, "full_key", "") or "config", str(exc).splitlines()[0]) from None


def load(source: Union[str, Path, Mapping], overrides: Sequence[str] = ()) -> ExperimentConfig:
    return validate(from_dict(ExperimentConfig, load_dict(source, overrides)))


def model_config(data: Union[str, Path, Mapping, ModelConfig]) -> ModelConfig:
    """A validated ModelConfig from what the CLI accepts as a model: ``preset:NAME``, a path to a
    model (or experiment) YAML, a mapping (``base:`` allowed) or a ModelConfig."""
    if isinstance(data, ModelConfig):
        data = to_dict(data)  # re-parse so hand-built specs get their registered option types
    if isinstance(data, (str, Path)):  # read as `arch-zoo describe` reads it (interpolations resolved)
        return load(data).model
    if not isinstance(data, Mapping):
        raise ConfigError("model", f"expected preset:NAME, a YAML path, a mapping or a ModelConfig, got {data!r}")
    return validate_model(from_dict(ModelConfig, _expand_model(dict(data), Path.cwd(), "model"), "model"))


def to_yaml(cfg: Any) -> str:
    OmegaConf, _ = _omegaconf()
    return OmegaConf.to_yaml(OmegaConf.create(to_dict(cfg)))


def save(cfg: ExperimentConfig, path: Union[str, Path]) -> None:
    """Write the fully resolved config atomically (a crash never leaves half a file)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(to_yaml(cfg))
    tmp.replace(path)
