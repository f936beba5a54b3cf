"""Plain data -> schema dataclasses: ``coerce`` for plain fields, the family's registry for
component fields. Above ``registry`` (which itself coerces option values with ``coerce``)."""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Mapping

from ..errors import ConfigError, did_you_mean
from ..registry import family_registry
from ..coerce import coerce, field_family, schema_fields


def from_dict(cls: type, data: Any, key: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping; unknown keys are errors with a did-you-mean.

    A field that names a registry family is parsed by that registry (bare name or
    ``{name: ..., **options}``); nested dataclass fields are parsed the same way."""
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(key or "config", f"expected a mapping, got {data!r}")
    fields = {f.name: f for f in schema_fields(cls)}
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
        if field_family(f) is not None and name not in data and f.default is not None:
            kwargs[name] = family_registry(field_family(f)).parse(f.default, f"{prefix}{name}")
        elif name not in data and dataclasses.is_dataclass(hints[name]):  # and those of a section left out
            kwargs[name] = from_dict(hints[name], {}, f"{prefix}{name}")
    for name, value in data.items():
        family = field_family(fields[name])
        if family is not None and value is None and fields[name].default is None:
            kwargs[name] = None
        elif family is not None:
            kwargs[name] = family_registry(family).parse(value, f"{prefix}{name}")
        else:
            kwargs[name] = coerce(value, hints[name], f"{prefix}{name}", nested=from_dict)
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise ConfigError(key or "config", str(exc)) from None
