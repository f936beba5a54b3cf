"""Evaluate runs with lm-evaluation-harness and keep the results in their run directories.

Everything a user can get wrong is checked before a model runs: the tasks (names, data files),
each run (a run directory whose model can score text). Results are written only once lm_eval has
finished, one file per task, each atomically."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from .. import rundir
from ..errors import ConfigError
from ..provenance import git_commit
from ..trained.restore import restore
from .lm import ArchZooLM, check_scorable
from .results import task_records, write_records
from .tasks import check_tasks, task_manager


@dataclass
class RunsToEvaluate:
    runs: List[Path]
    skipped: Dict[str, str] = field(default_factory=dict)  # run id -> its status (not completed)


def runs_of(path) -> RunsToEvaluate:
    """A run directory, or a sweep's completed runs (the others are listed in ``skipped``)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError("run", f"{path} does not exist")
    if (path / rundir.CHECKPOINT).is_file() or (path / rundir.CONFIG).is_file():
        return RunsToEvaluate([path])
    if not (path / "runs").is_dir():
        raise ConfigError("run", f"{path} is neither a run directory (no {rundir.CHECKPOINT}) nor a sweep "
                          "(no runs/)")
    found = RunsToEvaluate([])
    for run_dir in sorted(p for p in (path / "runs").iterdir() if p.is_dir()):
        status = (rundir.read_json(run_dir / rundir.STATUS) or {}).get("status") or "pending"
        if status == "completed":
            found.runs.append(run_dir)
        else:
            found.skipped[run_dir.name] = status
    if not found.runs:
        raise ConfigError("run", f"{path} has no completed run to evaluate"
                          + (f" ({_counts(found.skipped)})" if found.skipped else ""))
    return found


def _counts(skipped: Dict[str, str]) -> str:
    by: Dict[str, int] = {}
    for status in skipped.values():
        by[status] = by.get(status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(by.items()))


def check_kinds(run_dirs: Sequence[Path]) -> None:
    """Every run's model kind, from its config.yaml, before any model is loaded or run (``restore``
    reads the rest when its turn comes, and names what is wrong with it)."""
    import yaml

    for run_dir in run_dirs:
        try:
            model = (yaml.safe_load((run_dir / rundir.CONFIG).read_text()) or {}).get("model") or {}
        except (OSError, yaml.YAMLError, AttributeError):
            continue  # restore says what is wrong with the file
        kind = model.get("kind", "decoder") if isinstance(model, dict) else "decoder"
        check_scorable(str(kind), str(run_dir))


def evaluate(lm: ArchZooLM, tasks: Sequence[str], manager, limit: Optional[float], num_fewshot: Optional[int],
             seed: int = 0) -> Dict[str, Any]:
    """lm_eval on ``tasks``; ``manager`` is passed on, else lm_eval indexes its ~15,000 built-in task
    files again (tens of seconds) whatever the tasks are."""
    import lm_eval
    from lm_eval import evaluator

    # lm_eval records the working directory's git commit by running git with the terminal as its
    # stderr: outside a checkout the user would read git's "fatal: not a git repository". It records
    # the commit of the code that evaluated, asked quietly, instead.
    asked, evaluator.get_git_commit_hash = evaluator.get_git_commit_hash, git_commit
    try:
        return lm_eval.simple_evaluate(model=lm, tasks=list(tasks), task_manager=manager, limit=limit,
                                       num_fewshot=num_fewshot, log_samples=False, bootstrap_iters=1000,
                                       random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
                                       fewshot_random_seed=seed, verbosity="ERROR")
    finally:
        evaluator.get_git_commit_hash = asked


def evaluate_runs(path, task_names: Sequence[str], limit: Optional[float] = None, include_path: Optional[str] = None,
                  builtin_tasks: bool = True, num_fewshot: Optional[int] = None,
                  model_args: Optional[Dict[str, Any]] = None, on_result=None) -> RunsToEvaluate:
    """``arch-zoo eval`` as a function: evaluates each run of ``path`` on ``task_names`` and writes
    eval/<task>.json into it; ``on_result(run_dir, records)`` is called after each run's files."""
    import lm_eval

    if not task_names:
        raise ConfigError("--tasks", "no task given")
    found = runs_of(path)
    check_kinds(found.runs)
    first = ArchZooLM(run=str(found.runs[0]), restored=restore(found.runs[0]), **dict(model_args or {}))
    manager = task_manager(task_names, include_path, builtin_tasks)
    check_tasks(task_names, manager)
    for run_dir in found.runs:
        lm = first if run_dir == found.runs[0] else ArchZooLM(run=str(run_dir), restored=restore(run_dir),
                                                              **dict(model_args or {}))
        results = evaluate(lm, task_names, manager, limit, num_fewshot)
        state = rundir.resume_state(run_dir) or {}
        context = {"checkpoint": rundir.CHECKPOINT, "step": state.get("step"), "limit": limit,
                   "max_length": lm.max_length, "lm_eval": lm_eval.__version__, "evaluated": rundir.now()}
        records = task_records(results, context)
        write_records(run_dir, records)
        if on_result is not None:
            on_result(run_dir, records)
    return found
