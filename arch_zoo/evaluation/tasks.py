"""lm_eval tasks by name, checked before any model runs: an unknown name or a task whose data
cannot be read is one line naming it, and nothing is evaluated."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ..errors import ConfigError, did_you_mean


def _first_line(exc: BaseException, limit: int = 160) -> str:
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return line if len(line) <= limit else line[:limit - 3] + "..."


def unreadable_task_files(path: Path) -> List[Tuple[Path, str]]:
    """Task files under ``path`` that are not YAML, with the parser's message: lm_eval's index skips
    them without a word, so a task they define is then only "unknown". Tags (``!function``) are
    accepted as lm_eval accepts them; only the syntax is checked."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    bad = []
    for file in sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()):
        try:
            yaml.load(file.read_text(), Loader=Loader)  # noqa: S506 - a SafeLoader that ignores tags
        except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
            bad.append((file, " ".join(str(exc).split())))
    return bad


def task_manager(names: Sequence[str], include_path: Optional[str], builtin: bool = True):
    """A TaskManager that knows every name in ``names``. The tasks under ``include_path`` are
    indexed first; lm_eval's own ~15,000 built-in task files (tens of seconds to index) only when
    a name is not among them and ``builtin`` allows it."""
    from lm_eval.tasks import TaskManager

    if include_path is not None:
        path = Path(include_path).expanduser()
        if not path.is_dir():
            raise ConfigError("--include-path", f"{path} is not a directory of lm_eval task files")
        local = TaskManager(include_path=str(path.resolve()), include_defaults=False)
        if all(n in local.all_tasks for n in names):
            return local
        for file, problem in unreadable_task_files(path)[:1]:
            raise ConfigError(str(file), f"is not valid YAML, so lm_eval skipped its tasks ({problem})")
        if not builtin:
            _unknown(names, local.all_tasks, f"under {path} (built-in tasks left out by --no-builtin-tasks)")
    elif not builtin:
        raise ConfigError("--no-builtin-tasks", "leaves no tasks to look up: give --include-path DIR too")
    manager = TaskManager(include_path=str(Path(include_path).expanduser().resolve()) if include_path else None)
    _unknown(names, manager.all_tasks, "in lm_eval" + (f" or under {include_path}" if include_path else ""))
    return manager


def _unknown(names: Sequence[str], known: List[str], where: str) -> None:
    missing = [n for n in names if n not in known]
    if missing:
        raise ConfigError("--tasks", f"unknown lm_eval task '{missing[0]}'{did_you_mean(missing[0], known)} {where}; "
                          "list them with: lm_eval ls tasks")


def check_tasks(names: Sequence[str], manager) -> None:
    """Build each task once, its data read, so that a missing file fails here, naming the task, before
    any model runs (lm_eval builds them again for each run: a group then keeps its aggregate)."""
    for name in names:
        try:
            if hasattr(manager, "load"):  # lm_eval >= 0.4.10; get_task_dict before
                manager.load([name])
            else:
                from lm_eval.tasks import get_task_dict

                get_task_dict([name], manager)
        except Exception as exc:  # noqa: BLE001 - datasets' and lm_eval's errors: all mean "cannot read this task"
            raise ConfigError("--tasks", f"{name}: cannot load the task's data ({type(exc).__name__}: "
                              f"{_first_line(exc)})") from None
