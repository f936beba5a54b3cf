"""The schema's value types and plain-data conversions, with errors that name the key.

A leaf beside the registry, which coerces components' options with it: ``coerce`` checks one value
against its annotation, ``ComponentSpec`` is a chosen component, ``to_dict`` / ``first_difference``
work on any schema tree. Parsing a whole dataclass, where component fields need their registry, is
``config.parse.from_dict`` above both."""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Dict, Literal, Mapping, Union

from .errors import ConfigError, choice_error

_NONE = type(None)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, key: str, nested: Any = None) -> Any:
    """Check ``value`` against the annotation ``tp`` and convert where YAML is loose (int -> float).
    ``nested(cls, value, key)`` parses a dataclass annotation (``parse.from_dict``)."""
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
                return coerce(value, arg, key, nested)
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
        items = [coerce(v, item, f"{key}[{i}]", nested) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp) and nested is not None:
        return nested(tp, value, key)
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


@dataclass(frozen=True)
class NoOptions:
    """Options of a component that takes none."""


@dataclass(frozen=True)
class ComponentSpec:
    """A chosen component: its registered name plus its validated options dataclass."""

    name: str
    options: Any = NoOptions()

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, **_options(self.options)}

    def describe(self) -> str:
        opts = _options(self.options)
        if not opts:
            return self.name
        return f"{self.name}(" + ", ".join(f"{k}={v}" for k, v in opts.items()) + ")"


def _options(options: Any) -> Dict[str, Any]:
    """``dataclasses.asdict`` of an options dataclass, but a component spec among its values (a
    parallel mixer's branches) as ``{name, **options}``, the spelling the registry parses back."""
    def plain(value):
        if isinstance(value, ComponentSpec):
            return value.to_dict()
        if isinstance(value, (list, tuple)):
            return type(value)(plain(v) for v in value)
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return {f.name: plain(getattr(options, f.name)) for f in dataclasses.fields(options)}


def component_field(family: str, default: Any) -> Any:
    """A dataclass field naming a component of registry ``family`` (``model.position``, a task's
    ``tokenizer``). The family is a name, so the schema needs no registry; ``parse.from_dict`` and
    config merging look it up. A changed name drops the old options, and overrides of a name and its
    options combine in either order."""
    return dataclasses.field(default=default, metadata={"family": family})


def derived_field() -> Any:
    """A dataclass field that validation computes from the others (a model's resolved layers): not a
    key of the config, so neither read from data, saved, compared nor listed (``schema_fields``)."""
    return dataclasses.field(default=None, compare=False, repr=False, metadata={"derived": True})


def schema_fields(cls_or_obj: Any) -> tuple:
    """The fields that are keys of the config: every field but the derived ones."""
    return tuple(f for f in dataclasses.fields(cls_or_obj) if not f.metadata.get("derived"))


def field_family(f: dataclasses.Field):
    """The registry family a schema field names components of, or None for a plain field."""
    return f.metadata.get("family")


def to_dict(obj: Any) -> Any:
    """Inverse of ``from_dict``: plain data fit for YAML (component specs become {name, **opts})."""
    if callable(getattr(type(obj), "to_dict", None)):  # a component spec ({name, **options})
        return obj.to_dict()
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in schema_fields(obj)}
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
