"""Users' own components: modules or ``.py`` files that register with the package's decorators.

A config names them under ``plugins:`` (``[my_lab.blocks, ./my_norms.py]``); installed packages
may also declare an entry point in the group ``arch_zoo.plugins``. Both are imported before a
config is validated, so their components are checked like built-ins. A ``.py`` path in a YAML file
is relative to that file, on the command line relative to the current directory; the saved
config holds it absolute, so a run directory alone re-imports it (``generate``, ``restore``,
sweep workers). A module name is imported as Python imports it, with the current directory on
the path as ``python -m`` has it.

Above ``registry``, ``parse`` and ``schema`` and below validation and loading: it also teaches
pickle to carry a config that names plugins as plain data, so a worker process imports the plugins
before their options classes are named."""
from __future__ import annotations

import copyreg
import hashlib
import importlib
import importlib.util
import pickle
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .. import registry
from ..errors import ConfigError
from ..coerce import to_dict
from .parse import from_dict
from .schema import ExperimentConfig

GROUP = "arch_zoo.plugins"  # the entry-point group plugin packages declare: a public name, kept
_loaded: Dict[str, Dict[str, Any]] = {}  # plugin as the config names it (paths absolute) -> its record
_entry_points_done = False


def is_path(plugin: str) -> bool:
    return plugin.endswith(".py") or "/" in plugin or "\\" in plugin


def resolve(plugins: Any, here: Path, key: str = "plugins") -> Any:
    """The ``plugins`` value with ``.py`` paths made absolute against ``here`` (the config file's
    directory, or the current one for overrides); anything else is returned for the schema to judge."""
    if isinstance(plugins, str):
        plugins = [plugins]
    if not isinstance(plugins, (list, tuple)):
        return plugins
    out = []
    for p in plugins:
        p = str(p) if isinstance(p, Path) else p
        if isinstance(p, str) and is_path(p):
            path = Path(p).expanduser()
            p = str((path if path.is_absolute() else here / path).resolve())
        out.append(p)
    return out


def resolve_in(data: Any, here: Path) -> Any:
    """A config mapping (a file's, or one override's) with its ``plugins`` paths made absolute."""
    if isinstance(data, Mapping) and "plugins" in data:
        return {**data, "plugins": resolve(data["plugins"], here)}
    return data


def _sha256(path: Optional[str]) -> Optional[str]:
    if not path or not Path(path).is_file():
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: " + ((str(exc).strip().splitlines() or [""])[0])


def _import_file(path: Path):
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    name = f"arch_zoo_plugin_{path.stem}_{digest}"  # one module per file, whatever its stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ left beside the user's file
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.dont_write_bytecode = writes
    return module


def _with_cwd_on_path() -> None:
    cwd = str(Path.cwd())
    if cwd not in sys.path:  # as `python -m` has it: a module beside the user's configs imports
        sys.path.append(cwd)


def available(plugin: str) -> bool:
    """Whether ``plugin`` can be imported as it is named (a file that exists, a module that is found),
    without importing it."""
    if is_path(plugin):
        return Path(plugin).is_file()
    _with_cwd_on_path()
    try:
        return importlib.util.find_spec(plugin) is not None
    except (ImportError, ValueError):  # a parent package that is missing
        return False


def _import(plugin: str, label: str):
    """Import one plugin with its registrations attributed to ``label``; one-line ConfigError on failure."""
    try:
        with registry.attributed_to(label):  # no half-loaded plugin: what it registered goes too
            if is_path(plugin):
                path = Path(plugin)
                if not path.is_file():
                    raise ConfigError("plugins", f"{label}: file not found")
                return _import_file(path)
            _with_cwd_on_path()
            return importlib.import_module(plugin)
    except ConfigError:
        raise
    except registry.AlreadyRegistered as exc:
        raise ConfigError("plugins", f"{label}: {exc}") from None
    except SyntaxError as exc:
        where = f" ({'' if exc.filename == plugin else f'{exc.filename}, '}line {exc.lineno})"
        raise ConfigError("plugins", f"{label}: cannot import{where}: SyntaxError: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 - anything the user's module raises is a mistake to name
        raise ConfigError("plugins", f"{label}: cannot import: {_first_line(exc)}") from None


def _record(label: str, module, **extra) -> Dict[str, Any]:
    path = getattr(module, "__file__", None)
    return {"plugin": label, "module": module.__name__, "path": path, "sha256": _sha256(path), **extra}


def load_plugins(plugins: Sequence[str]) -> List[Dict[str, Any]]:
    """Import each plugin once per process (with the installed entry points); their records."""
    load_entry_points()
    plugins = resolve(list(plugins), Path.cwd())  # from Python: paths relative to the current directory
    for plugin in plugins:
        if not isinstance(plugin, str) or not plugin:
            raise ConfigError("plugins", f"expected a module name or a .py path, got {plugin!r}")
        if plugin not in _loaded:
            _loaded[plugin] = _record(plugin, _import(plugin, plugin))
    return [_loaded[p] for p in plugins]


def load_entry_points(force: bool = False) -> None:
    """Import every ``arch_zoo.plugins`` entry point of the installed distributions (once per
    process, unless ``force``). An entry point names a module, or a function called with no arguments."""
    global _entry_points_done
    if _entry_points_done and not force:
        return
    _entry_points_done = True
    for ep in metadata.entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        label = f"entry point '{ep.name}'" + (f" ({dist.name} {dist.version})" if dist else "")
        if label in _loaded:
            continue
        module = _import(ep.module, label)
        if ep.attr:  # module:function, called once; what it registers is the entry point's
            try:
                with registry.attributed_to(label, undo_on_error=False):
                    ep.load()()
            except Exception as exc:  # noqa: BLE001
                raise ConfigError("plugins", f"{label}: {ep.value} failed: {_first_line(exc)}") from None
        _loaded[label] = _record(label, module, entry_point=ep.name,
                                 dist=f"{dist.name} {dist.version}" if dist else None)


def records(plugins: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """What a run records: each plugin it names, then every entry point loaded in this process."""
    named = load_plugins(plugins)
    return named + [r for r in _loaded.values() if "entry_point" in r and r not in named]


def rebuild(cls: type, data: Dict[str, Any]):
    """Unpickling a config (a sweep's task in a worker process): its plugins first, then the schema."""
    load_plugins(data.get("plugins") or ())
    return from_dict(cls, data)


def _reduce(cfg: ExperimentConfig):
    """A config with plugins travels as plain data, so the process that unpickles it imports the
    plugins before their options classes are looked up. Registered here, not in the schema: only
    this module knows how to import plugins, and every config that names one was loaded through it."""
    if not cfg.plugins:
        return object.__reduce_ex__(cfg, pickle.DEFAULT_PROTOCOL)
    return rebuild, (type(cfg), to_dict(cfg))


copyreg.pickle(ExperimentConfig, _reduce)


def checked(value: Any) -> List[str]:
    """The ``plugins`` key as a list of names, or a one-line error."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) and p for p in value):
        raise ConfigError("plugins", f"expected a list of module names or .py paths, got {value!r}")
    return list(value)


def changed_since(recorded: Any) -> List[str]:
    """One line per plugin whose file differs from the one a run recorded (its ``plugins`` records)."""
    now = {r["plugin"]: r for r in _loaded.values()}
    out = []
    for old in recorded if isinstance(recorded, list) else []:
        new = now.get(old.get("plugin")) if isinstance(old, dict) else None
        if new is not None and old.get("sha256") and new["sha256"] != old["sha256"]:
            out.append(f"plugin {old['plugin']} changed since the run was trained (sha256 {old['sha256'][:12]} "
                       f"then, {str(new['sha256'])[:12]} now): the model may not be the one that was trained")
    return out
