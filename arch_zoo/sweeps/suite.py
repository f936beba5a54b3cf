"""A probe suite: the spec's ``suite`` key (pure data: no torch, no store).

    suite: mad                            # a shipped suite (arch_zoo/sweeps/suites/<name>.yaml)
    suite:                                # or one of your own
      name: recall                        # optional: the report's title for it
      tasks:
        - task: copy                      # a registered task
          options: {max_len: 5}           # its options at the easiest level (the task's defaults elsewhere)
          vary: {max_len: [8, 10]}        # optional: one more entry per value, one key at a time from
                                          # the options above (MAD's difficulty levels)
          overrides: {train.max_steps: 200}   # optional: other config keys for this task's entries

A suite is a list of entries, each a (task, options) pair. A sweep crosses every variant with every
entry as one more axis, ``suite.task`` (its value is the entry's label), the way ``scale`` crosses
sizes; so names, run ids, the store, resume, launchers and tuning need nothing new, and a tuned sweep
tunes each (variant, entry) on its own, as MAD's protocol does. ``plan.py`` applies an entry as the
whole ``task`` (the base's task and its options are replaced) and records it in run.json, where the
report's suite table (``reports/suite.py``) finds it. Whether a task exists and accepts the options
is checked when the plan loads each entry's config, before anything trains.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import ConfigError, did_you_mean
from ..run_names import plain, yaml_value
from .fields import SweepSpec, Variant, _check_keys, _mapping, parse_overrides

SUITE_KEY = "suite.task"  # the axis a suite adds to every variant's settings
SUITE_KEYS = ("name", "description", "tasks")
TASK_KEYS = ("task", "options", "vary", "label", "overrides")
SHIPPED = Path(__file__).with_name("suites")


@dataclass(frozen=True)
class Entry:
    label: str  # the value of the suite.task axis: the task's name, with the level that differs
    task: str  # a registered task name
    options: Dict[str, Any]  # the task's options (without name)
    overrides: Tuple[str, ...]  # other config keys, as a dotlist
    where: str  # the spec key that made it, for errors: suite.tasks[1] or suite.tasks[1].vary.max_len[0]

    @property
    def task_config(self) -> Dict[str, Any]:
        return {"name": self.task, **self.options}


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    entries: Tuple[Entry, ...]
    description: str = ""

    @property
    def axes(self) -> List[str]:
        return [SUITE_KEY]

    def entry(self, label: str) -> Entry:
        return next(e for e in self.entries if e.label == label)

    @property
    def tasks(self) -> List[str]:
        """The suite's task names, in order (a task with several levels once)."""
        return list(dict.fromkeys(e.task for e in self.entries))


def shipped() -> List[str]:
    return sorted(p.stem for p in SHIPPED.glob("*.yaml"))


def _load_shipped(name: str) -> Dict[str, Any]:
    import yaml

    if name not in shipped():
        raise ConfigError("suite", f"unknown suite '{name}'{did_you_mean(name, shipped())}; shipped suites: "
                          f"{', '.join(shipped())}, or give your own as {{tasks: [{{task: NAME, options: {{...}}}}]}}")
    data = yaml.safe_load((SHIPPED / f"{name}.yaml").read_text(encoding="utf-8"))
    return {"name": name, **data}


def _entries(i: int, item: Any) -> List[Entry]:
    where = f"suite.tasks[{i}]"
    t = _mapping(item, where)
    _check_keys(t, TASK_KEYS, f"{where}.")
    name = t.get("task")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.task", f"expected a task name (see `arch-zoo components`), got {name!r}")
    options = _mapping(t.get("options") or {}, f"{where}.options")
    if "name" in options:
        raise ConfigError(f"{where}.options.name", "the task is named by 'task'; options hold its other keys")
    overrides = tuple(parse_overrides(t.get("overrides"), f"{where}.overrides"))
    for o in overrides:
        if o.split("=", 1)[0].strip().split(".")[0] == "task":
            raise ConfigError(f"{where}.overrides", f"{o.split('=', 1)[0]}: set task options under 'options'")
    label = t.get("label", name)
    if not isinstance(label, str) or not label:
        raise ConfigError(f"{where}.label", f"expected text, got {label!r}")
    out = [Entry(label, name, dict(options), overrides, where)]
    vary = _mapping(t.get("vary") or {}, f"{where}.vary")
    for key, values in vary.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise ConfigError(f"{where}.vary.{key}", f"expected a list of the option's harder values, got {values!r}")
        for j, v in enumerate(values):
            out.append(Entry(f"{label}:{key}={plain(v)}", name, {**options, key: v}, overrides,
                             f"{where}.vary.{key}[{j}]"))
    return out


def parse_suite(value: Any, spec: Optional[SweepSpec] = None) -> SuiteSpec:
    """``suite`` once the spec's axes are known (the suite sets the task, so no axis may vary it)."""
    if isinstance(value, str):
        value = _load_shipped(value)
    s = _mapping(value, "suite")
    _check_keys(s, SUITE_KEYS, "suite.")
    tasks = s.get("tasks")
    if not isinstance(tasks, (list, tuple)) or not tasks:
        raise ConfigError("suite.tasks", f"expected a list of tasks, each {{task: NAME, options: {{...}}}}, "
                          f"got {tasks!r}")
    entries: List[Entry] = []
    for i, item in enumerate(tasks):
        for e in _entries(i, item):
            same = next((o for o in entries if o.label == e.label), None)
            if same is not None:
                raise ConfigError(e.where, f"repeats the label '{e.label}' of {same.where} (give one a 'label')")
            if any(o.task_config == e.task_config and o.overrides == e.overrides for o in entries):
                raise ConfigError(e.where, f"repeats an earlier entry ({e.label}): the same runs would train twice")
            entries.append(e)
    for key, source in (spec.source_key if spec is not None else {}).items():
        if key == "task" or key.startswith("task."):
            raise ConfigError(f"{source}.{key}", "the suite sets each run's task; vary task options with the "
                              "suite's 'vary' instead")
    name = s.get("name", "suite")
    if not isinstance(name, str) or not name:
        raise ConfigError("suite.name", f"expected text, got {name!r}")
    return SuiteSpec(name, tuple(entries), str(s.get("description") or ""))


def check_overrides(suite: Optional[SuiteSpec], overrides: List[str], where: str) -> None:
    """Under a suite the task is the suite's: a task override would be silently replaced."""
    if suite is None:
        return
    for o in overrides:
        key = o.split("=", 1)[0].strip()
        if key == "task" or key.startswith("task."):
            raise ConfigError(key if where == "command line" else f"{where}.{key}",
                              "is set by the spec's suite (each entry replaces the task whole), so an override "
                              "cannot set it; put it in the suite entries' options")


# ----------------------------------------------------------------------------------------- expansion

def cross(variants: List[Variant], suite: SuiteSpec) -> List[Variant]:
    """Every variant at every entry, entry by entry: a suite stopped part way has whole entries."""
    return [Variant({**v.settings, SUITE_KEY: e.label}, {**v.sources, SUITE_KEY: "suite"})
            for e in suite.entries for v in variants]


def suite_overrides(suite: Optional[SuiteSpec], settings: Mapping[str, Any]) -> List[str]:
    """The task an entry sets, replacing the base's whole (``task=null`` first: a task of the same name
    would otherwise keep the base's options), then the entry's other keys."""
    if suite is None or SUITE_KEY not in settings:
        return []
    e = suite.entry(settings[SUITE_KEY])
    return ["task=null", f"task={yaml_value(e.task_config)}", *e.overrides]


def suite_blame(suite: Optional[SuiteSpec], settings: Mapping[str, Any], exc: ConfigError) -> Optional[str]:
    """The suite entry behind an error about the task (an unknown name, an option it rejects)."""
    if suite is None or SUITE_KEY not in settings:
        return None
    e = suite.entry(settings[SUITE_KEY])
    key = exc.key or ""
    if key == "task" or key.startswith("task."):
        from ..data.tasks import TASKS  # torch: only on an error, in the plan; a spec parses without it

        rest = key[len("task."):] if key.startswith("task.") else ""
        if rest == "name" or e.task not in TASKS.choices():
            return f"{e.where}.task"
        return f"{e.where}.options.{rest}" if rest and rest in e.options else e.where
    if any(key == o.split("=", 1)[0] for o in e.overrides):
        return f"{e.where}.overrides.{key}"
    return None


def suite_record(suite: SuiteSpec, settings: Mapping[str, Any], variant: str) -> Dict[str, Any]:
    """run.json's ``suite``: the entry and the architecture variant (the run's settings without the entry
    and a tuned key), which is what the report averages over the suite's tasks."""
    e = suite.entry(settings[SUITE_KEY])
    return {"name": suite.name, "entry": e.label, "task": e.task, "options": dict(e.options), "variant": variant,
            "entries": {x.label: x.task for x in suite.entries}, "tasks": suite.tasks}


def arch_settings(settings: Mapping[str, Any], tuned: Tuple[str, ...] = ()) -> Dict[str, Any]:
    return {k: v for k, v in settings.items() if k != SUITE_KEY and k not in tuned}
