"""Turning plain YAML data into typed dataclasses, with errors that name the key."""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal, Mapping, Union

from .errors import ConfigError, choice_error, did_you_mean

_NONE = type(None)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp`` and convert where YAML is loose (int -> float)."""
    if isinstance(tp, str):  # postponed annotations
        tp = eval(tp, vars(typing))  # noqa: S307 - our own annotations only
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Union:
        args = typing.get_args(tp)
        if value is None and _NONE in args:
            return None
        errors = []
        for arg in args:
            if arg is _NONE:
                continue
            try:
                return coerce(value, arg, key)
            except ConfigError as exc:
                errors.append(exc)
        raise errors[0]
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise choice_error(key, "value", value, [str(c) for c in choices])
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(key, f"expected a list, got {value!r}")
        (item,) = typing.get_args(tp)[:1] or (Any,)
        items = [coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, f"expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(key, f"expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(key, f"expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(key, f"expected a string, got {value!r}")
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(key, f"expected {_type_name(tp)}, got {value!r}")
    return value


def from_dict(cls: type, data: Any, key: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping; unknown keys are errors with a did-you-mean.

    A field whose metadata names a ``registry`` is parsed by that registry (bare name or
    ``{name: ..., **options}``)."""
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(key or "config", f"expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    prefix = f"{key}." if key else ""
    for name in data:
        if name not in fields:
            raise ConfigError(
                f"{prefix}{name}",
                f"unknown key{did_you_mean(str(name), fields)}; allowed keys: {', '.join(sorted(fields))}",
            )
    kwargs = {}
    for name, f in fields.items():  # defaults of component fields get their registered options too
        if f.metadata.get("registry") is not None and name not in data and f.default is not None:
            kwargs[name] = f.metadata["registry"]().parse(f.default, f"{prefix}{name}")
    for name, value in data.items():
        registry = fields[name].metadata.get("registry")
        if registry is not None and value is None and fields[name].default is None:
            kwargs[name] = None
        elif registry is not None:
            kwargs[name] = registry().parse(value, f"{prefix}{name}")
        else:
            kwargs[name] = coerce(value, hints[name], f"{prefix}{name}")
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise ConfigError(key or "config", str(exc)) from None


def to_dict(obj: Any) -> Any:
    """Inverse of ``from_dict``: plain data fit for YAML (component specs become {name, **opts})."""
    if callable(getattr(type(obj), "to_dict", None)):  # a component spec ({name, **options})
        return obj.to_dict()
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def first_difference(a: Any, b: Any, prefix: str = "") -> Union[str, None]:
    """'key.path: A there, B here' for the first place two ``to_dict`` trees differ, else None. A
    component's ``name`` comes before its options: rope vs alibi, not the option only one of them has."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b), key=lambda k: (k != "name", str(k)))
        for k in keys:
            d = first_difference(a.get(k), b.get(k), f"{prefix}{k}.")
            if d:
                return d
        return None
    return None if a == b else f"{prefix[:-1]}: {a!r} there, {b!r} here"
