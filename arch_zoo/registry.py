"""Name -> component registries. Every swappable part is registered here with a typed options
dataclass, so configs can name it, the CLI can list it and errors can offer the alternatives."""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Type

from .coerce import ComponentSpec, NoOptions, coerce, component_field  # noqa: F401  (component authors import them from here)
from .errors import ConfigError, choice_error, did_you_mean

_FAMILIES: Dict[str, "Registry"] = {}  # family -> registry, filled as each family's module is imported
_LOADING: list = []  # the plugins being imported now (``attributed_to``): where registrations come from
_ADDED: list = []  # (registry, name) registered while a plugin loads: undone if its import fails


@contextlib.contextmanager
def attributed_to(label: str, undo_on_error: bool = True):
    """Registrations made inside are the plugin ``label``'s (``arch-zoo components`` names it); if
    the block raises, they are removed again, so no plugin is ever half-loaded. The one way the
    plugin loader touches the registries."""
    _LOADING.append(label)
    added = len(_ADDED)
    try:
        yield
    except BaseException:
        if undo_on_error:
            for reg, name in _ADDED[added:]:
                reg.unregister(name)
        raise
    finally:
        del _ADDED[added:]
        _LOADING.pop()


class AlreadyRegistered(ValueError):
    """A name registered twice in one family (a plugin reusing a built-in's name, say)."""


@dataclass(frozen=True)
class Entry:
    name: str
    factory: Callable[..., Any]
    options: Type
    description: str
    source: Optional[str] = None  # the plugin that registered it; None: built in

    def option_fields(self) -> Dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(self.options)}


class Registry:
    """A family of interchangeable components (positions, norms, ...).

    ``register(name, options=OptsDataclass)`` decorates a class (or factory); ``parse`` turns a
    config value -- a bare name or ``{name: ..., **options}`` -- into a validated ``(Entry, options)``
    pair and ``build`` calls the factory with ``options`` plus whatever context the caller passes.
    """

    def __init__(self, family: str, kind: str, moved: Optional[Dict[str, str]] = None):
        self.family = family  # e.g. "positions"
        self.kind = kind  # e.g. "position scheme", used in error messages
        self.moved = dict(moved or {})  # options or names that left this family -> where they live now
        # options only some entries have -> why an entry without one cannot take it (one line, with the choices)
        self.not_everywhere: Dict[str, str] = {}
        self._entries: Dict[str, Entry] = {}
        _FAMILIES.setdefault(family, self)

    def register(self, name: str, options: Type = NoOptions, description: Optional[str] = None):
        if not dataclasses.is_dataclass(options):
            raise TypeError(f"options for {self.family}/{name} must be a dataclass")

        def decorate(factory):
            if name in self._entries:
                where = self._entries[name].source
                raise AlreadyRegistered(f"{self.kind} '{name}' already exists "
                                        f"({f'from {where}' if where else 'built in'}); register it under another name")
            doc = description or (inspect.getdoc(factory) or "").split("\n")[0]
            builtin = factory.__module__.startswith("arch_zoo.")  # a plugin's import may import built-ins first
            source = None if builtin else _LOADING[-1] if _LOADING else factory.__module__
            self._entries[name] = Entry(name, factory, options, doc, source)
            if _LOADING:
                _ADDED.append((self, name))
            return factory

        return decorate

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a plugin whose import failed; tests restoring the built-ins)."""
        self._entries.pop(name, None)

    def choices(self) -> list:
        return sorted(self._entries)

    def entries(self) -> list:
        return [self._entries[n] for n in self.choices()]

    def get(self, name: str, key: str = "") -> Entry:
        if name not in self._entries and name in self.moved:  # a name that now belongs to another key
            raise ConfigError(key or self.family, f"'{name}' is not one of the {self.kind}s any more: set {self.moved[name]}")
        if name not in self._entries:
            raise choice_error(key or self.family, self.kind, name, self._entries)
        return self._entries[name]

    def parse(self, value: Any, key: str) -> "ComponentSpec":
        """Validate a config value against this registry; return a normalized spec."""
        if isinstance(value, ComponentSpec):
            value = value.to_dict()
        if isinstance(value, str):
            name, raw = value, {}
        elif isinstance(value, Mapping):
            if "name" not in value:
                raise ConfigError(key, f"a {self.kind} needs 'name'; choices: {', '.join(self.choices())}")
            raw = dict(value)
            name = raw.pop("name")
        else:
            raise ConfigError(key, f"expected a {self.kind} name or {{name: ..., <options>}}, got {value!r}")
        entry = self.get(str(name), f"{key}.name" if raw else key)
        fields = entry.option_fields()
        for opt in raw:
            if opt not in fields and opt in self.moved:
                raise ConfigError(f"{key}.{opt}", f"not an option of the {self.kind} any more: set {self.moved[opt]}")
            if opt not in fields and opt in self.not_everywhere:
                raise ConfigError(f"{key}.{opt}", f"{self.kind} '{name}' has no such option: {self.not_everywhere[opt]}")
            if opt not in fields:
                allowed = ", ".join(sorted(fields)) or "none"
                raise ConfigError(
                    f"{key}.{opt}",
                    f"unknown option for {self.kind} '{name}'{did_you_mean(opt, fields)}; options: {allowed}",
                )
        kwargs = {k: coerce(v, fields[k].type, f"{key}.{k}") for k, v in raw.items()}
        try:
            options = entry.options(**kwargs)
        except ConfigError as exc:  # an options dataclass may name the option at fault, relative to us
            raise ConfigError(f"{key}.{exc.key}" if exc.key else key, exc.message) from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(key, str(exc)) from None
        return ComponentSpec(entry.name, options)

    def build(self, spec: "ComponentSpec", *args, **context):
        return self.get(spec.name).factory(spec.options, *args, **context)


def family_registry(family: str) -> Registry:
    """The registry of ``family``, once the module that defines it is imported (``arch_zoo.experiment``
    imports every built-in family)."""
    if family not in _FAMILIES:
        raise LookupError(f"no registry '{family}' is loaded; import arch_zoo.experiment first")
    return _FAMILIES[family]
