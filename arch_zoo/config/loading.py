"""The one place YAML is read: files, ``preset:NAME``, ``base:`` chains and key=value overrides.

An experiment file may name another as its ``base:`` (a path relative to the file, or ``preset:NAME``);
its own keys merge onto the base's by the rules of key=value overrides. A model-only file's ``base:``
names the model it builds on.

``load_dict(source, overrides)`` reads a YAML file (or ``preset:NAME``) and merges OmegaConf dotlist
overrides (``model.position=rope``) into plain data; ``resolved_model`` makes a model of it. A whole
experiment is typed and checked by ``arch_zoo.experiment.load``, above the packages that own its
task and recipe. Every error is a ``ConfigError`` naming the dotted key, the bad value and the choices.

OmegaConf is imported on first use (an optional dependency of the model library), so
``arch_zoo.models``, which accepts a preset or a YAML path, still imports with torch alone.
"""
from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import model_families  # noqa: F401  (fills the registries a model's component fields are parsed by)
from ..errors import ConfigError, choice_error, yaml_error
from ..registry import family_registry
from . import plugins as user_plugins
from ..coerce import field_family, schema_fields, to_dict
from .parse import from_dict
from .schema import ExperimentConfig, ModelConfig, ResolvedModel
from .validation import resolve_model

PRESET_PREFIX = "preset:"


def _omegaconf():
    """Imported on first use, so the schema (and with it arch_zoo.models) needs torch alone."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    return OmegaConf, OmegaConfBaseException


def preset_dir() -> Path:
    return Path(__file__).parents[1] / "models" / "presets"


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


def _read_source(path: Path, key: str, published: bool) -> Dict[str, Any]:
    """A YAML file's mapping. A preset's ``vocab_size`` is its published model's vocabulary: kept only
    where asked for (``published_vocab``: describe's size where nothing else gives one), never in a run's
    config, whose vocabulary is its task's tokenizer's whatever preset it started from."""
    data = _read_yaml(path, key)
    if not published and "vocab_size" in data and path.resolve().parent == preset_dir().resolve():
        data = {k: v for k, v in data.items() if k != "vocab_size"}
    return data


def _source_path(source: str, here: Path, key: str) -> Path:
    if source.startswith(PRESET_PREFIX):
        name = source[len(PRESET_PREFIX):]
        if name not in preset_names():
            raise choice_error(key, "preset", name, preset_names())
        return preset_dir() / f"{name}.yaml"
    path = Path(source).expanduser()
    return path if path.is_absolute() else here / path


def _expand_model(value: Any, here: Path, key: str, depth: int = 0, published: bool = False) -> Any:
    """``model: preset:NAME`` / ``model: path.yaml`` / ``model: {base: ..., **changes}`` -> a plain mapping."""
    if depth > 8:
        raise ConfigError(key, "model 'base' chain is too deep (a cycle?)")
    if isinstance(value, str):
        value = {"base": value}
    if not isinstance(value, dict) or "base" not in value:
        return value
    value = dict(value)
    path = _source_path(str(value.pop("base")), here, f"{key}.base")
    base = _read_source(path, f"{key}.base", published)
    base = base.get("model", base) if _is_experiment(base) else base
    base = _expand_model(base, path.parent, key, depth + 1, published)
    return _merge(ModelConfig, base, value)


def _is_experiment(data: Mapping) -> bool:
    """A model-only file (presets, configs/models/) has model keys and no experiment keys."""
    experiment = {f.name for f in schema_fields(ExperimentConfig)}
    model = {f.name for f in dataclasses.fields(ModelConfig)} | {"base"}
    return any(k in experiment for k in data) or not any(k in model for k in data)


def _registry(family: str):
    """The registry of a component field's family, or None where it is not loaded: reading a model
    out of an experiment file (``resolved_model``) merges its task and recipe sections as plain data,
    since config imports nothing of the packages that fill those registries."""
    try:
        return family_registry(family)
    except LookupError:
        return None


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
        if k not in out and f is not None and isinstance(v, Mapping):  # onto the schema's default
            if field_family(f) is not None and f.default is not None and "name" not in v:  # the default's options
                out[k] = _merge_component(_registry(field_family(f)), f.default.name, v, set_here, key)
                continue
            if dataclasses.is_dataclass(hints[k]):
                out[k] = _merge(hints[k], {}, v, set_here, f"{key}.")
                continue
        if k not in out or f is None:
            out[k] = _merge(None, out[k], v) if isinstance(out.get(k), Mapping) else v
        elif field_family(f) is not None and v is not None and out[k] is not None:
            out[k] = _merge_component(_registry(field_family(f)), out[k], v, set_here, key)
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
    schema = registry.get(name).options if registry is not None and name in registry.choices() else None
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


def _extends(data: Mapping, here: Path) -> bool:
    """Whether a file's ``base:`` names an experiment it builds on (beside experiment keys, or alone
    naming an experiment file), rather than the model a model-only file builds on."""
    if "base" not in data:
        return False
    rest = {k: v for k, v in data.items() if k != "base"}
    if rest:
        return _is_experiment(rest)
    path = _source_path(str(data["base"]), here, "base")
    return path.is_file() and _is_experiment(_read_yaml(path, "base"))


def _experiment_data(data: Dict[str, Any], here: Path, name: str, chain: tuple,
                     published: bool = False) -> Dict[str, Any]:
    """A file's (or a mapping's) experiment data, its ``base:`` chain merged under it by the command
    line's rules (``_merge``), each file's paths resolved from that file. ``chain``: the files
    that include this one, outermost first, to name a cycle."""
    data = user_plugins.resolve_in(data, here)  # paths in a file are relative to it
    base = None
    if _extends(data, here):
        data = dict(data)
        path = _source_path(str(data.pop("base")), here, "base")
        where = f" (the base of {chain[-1]})" if chain else ""
        if not path.is_file() and not path.is_dir():
            raise ConfigError("base", f"file not found: {path}{where}")
        if path.resolve() in chain:
            cycle = [*chain[list(chain).index(path.resolve()):], path.resolve()]
            raise ConfigError("base", f"the bases form a cycle: {' -> '.join(map(str, cycle))}")
        base = _experiment_data(_read_source(path, "base", published), path.parent, path.stem,
                                (*chain, path.resolve()), published)
    elif not _is_experiment(data):  # a model-only file (configs/models/*.yaml, presets)
        data = {"name": name, "model": data}
    if "model" in data:
        data["model"] = _expand_model(data["model"], here, "model", published=published)
    return data if base is None else _merge(ExperimentConfig, base, data)


def load_dict(source: Union[str, Path, Mapping], overrides: Sequence[str] = (),
              published: bool = False) -> Dict[str, Any]:
    """The merged, interpolation-resolved plain data, before typing. ``published``: presets' vocab_size
    kept (``_read_source``)."""
    OmegaConf, OmegaConfBaseException = _omegaconf()
    if isinstance(source, Mapping):
        here = Path.cwd()
        data = _experiment_data(dict(source), here, Path(str(source)).stem, (), published)
    else:
        path = _source_path(str(source), Path.cwd(), "config")
        here = path.parent
        data = _experiment_data(_read_source(path, "config", published), here,
                                Path(str(source)).stem.replace(PRESET_PREFIX, ""), (path.resolve(),), published)
    merged, set_here = data, frozenset()
    for item in overrides:  # one at a time, so a component's name and options combine in any order
        over = user_plugins.resolve_in(parse_overrides([item]), Path.cwd())  # on the command line: to the cwd
        if "model" in over:
            over["model"] = _expand_model(over["model"], here, "model", published=published)
        merged = _merge(ExperimentConfig, merged, over, set_here)
        set_here |= set(_leaves(over))
    try:
        return OmegaConf.to_container(OmegaConf.create(merged), resolve=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(getattr(exc, "full_key", "") or "config", str(exc).splitlines()[0]) from None


def published_vocab(source: Union[str, Path, Mapping], overrides: Sequence[str] = ()) -> Optional[int]:
    """The vocabulary size of the published model the config's preset is (``gpt2``: 50257), if any."""
    model = load_dict(source, overrides, published=True).get("model")
    return model.get("vocab_size") if isinstance(model, Mapping) else None


def model_config(data: Union[str, Path, Mapping, ModelConfig]) -> ModelConfig:
    """A validated ModelConfig from what the CLI accepts as a model: ``preset:NAME``, a path to a
    model (or experiment) YAML, a mapping (``base:`` allowed) or a ModelConfig."""
    return resolved_model(data).config


def resolved_model(data: Union[str, Path, Mapping, ModelConfig, ExperimentConfig, ResolvedModel]) -> ResolvedModel:
    """The one door to a model: whatever ``model_config`` takes, an ExperimentConfig (resolved by
    ``arch_zoo.experiment.load`` already) or a ResolvedModel, validated and its layers resolved, once.
    Of an experiment file, the model section is read: its task and recipe are the experiment's."""
    if isinstance(data, ResolvedModel):
        return data
    if isinstance(data, ExperimentConfig):
        return data.resolved() or resolved_model(data.model)
    if isinstance(data, ModelConfig):
        data = to_dict(data)  # re-parse so hand-built specs get their registered option types
    if isinstance(data, (str, Path)):  # read as `arch-zoo describe` reads it (interpolations resolved)
        data = load_dict(data)
        user_plugins.load_plugins(user_plugins.checked(data.get("plugins")))  # before their components are named
        return resolve_model(from_dict(ModelConfig, data.get("model", {}), "model"))
    if not isinstance(data, Mapping):
        raise ConfigError("model", f"expected preset:NAME, a YAML path, a mapping or a ModelConfig, got {data!r}")
    user_plugins.load_entry_points()
    return resolve_model(from_dict(ModelConfig, _expand_model(dict(data), Path.cwd(), "model"), "model"))


def to_yaml(cfg: Any) -> str:
    OmegaConf, _ = _omegaconf()
    return OmegaConf.to_yaml(OmegaConf.create(to_dict(cfg)))


def save(cfg: ExperimentConfig, path: Union[str, Path]) -> None:
    """Write the fully resolved config atomically (a crash never leaves half a file)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(to_yaml(cfg))
    tmp.replace(path)
