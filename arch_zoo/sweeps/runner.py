"""``run_sweep``: spec -> plan -> store -> launcher -> index, and the tables the CLI prints."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

from ..formatting import plural
from .plan import Plan, make_plan
from .spec import SweepSpec, load_spec
from .store import Store, read_json
from .values import plain
from .worker import FINISHED, Result, Task

DEFAULT_OUT = "runs/sweeps"
NOT_DONE = ("failed", "interrupted", "pending", "running")


@dataclass
class SweepOutcome:
    plan: Plan
    store: Store
    results: Dict[str, Result] = field(default_factory=dict)  # what this call ran, by run id
    timings: Dict[str, Any] = field(default_factory=dict)

    def statuses(self) -> Dict[str, Dict[str, Any]]:
        return {r.run_id: self.store.status(r.run_id) for r in self.plan.runs}

    def problems(self) -> List[str]:
        """One entry per run that did not complete (diverged included: its numbers are not a result
        to compare): 'variant s<seed>: status (reason)'."""
        out = []
        statuses = self.statuses()
        for run in self.plan.runs:
            s = statuses[run.run_id]
            if s["status"] in NOT_DONE + ("diverged",):
                out.append(f"{run.variant} s{run.seed}: {s['status']}" + (f" ({s['reason']})" if s.get("reason") else ""))
        return out


def make_launcher(kind: str, workers: Optional[int], ray_address: Optional[str] = None,
                  ray_init: Optional[Dict[str, Any]] = None, threads: Optional[int] = None):
    if kind == "local":
        from .local import LocalLauncher

        return LocalLauncher(workers or 1, threads)
    if kind == "ray":
        from .ray_launcher import RayLauncher

        return RayLauncher(ray_address, max_in_flight=workers, init_kwargs=ray_init)
    from ..errors import choice_error

    raise choice_error("--launcher", "launcher", kind, ["local", "ray"])


def run_sweep(spec: Union[str, Path, SweepSpec], out: Union[str, Path] = DEFAULT_OUT, workers: Optional[int] = None,
              launcher: str = "local", ray_address: Optional[str] = None, retry_failed: bool = False,
              log: Callable[[str], None] = print, ray_init: Optional[Dict[str, Any]] = None,
              threads: Optional[int] = None, command: Optional[str] = None,
              on_launch: Optional[Callable[[], None]] = None) -> SweepOutcome:
    """Run (or resume) a sweep; every problem with the spec is raised before any run starts.
    ``threads``: torch threads per local worker (default: the cores divided among the workers).
    Each call that gets past planning appends its ``command``, commit, machine and wall time to
    the store's invocations.jsonl, which reports print as the sweep's provenance. ``on_launch`` is
    called once the runs are handed to the launcher, when this process has nothing to do but wait."""
    began = time.perf_counter()
    started_at = _utc_now()
    spec = spec if isinstance(spec, SweepSpec) else load_spec(spec)
    launch = make_launcher(launcher, workers, ray_address, ray_init, threads)
    launch.start()  # workers import the stack while this process plans
    try:
        from ..registry import all_registries

        all_registries()  # the components, tasks and torch: timed apart from the planning itself
        imported = time.perf_counter()
        plan = make_plan(spec)
        store = Store(Path(out) / spec.name)
        store.check_conflicts(plan)
    except BaseException:
        launch.stop(abort=True)
        raise
    planned = time.perf_counter()
    store.write_plan(plan)
    store.write_index(plan)
    index_s = [time.perf_counter() - planned]  # store I/O: run.json files, index.csv rewrites
    outcome = SweepOutcome(plan, store)
    tasks = _tasks(plan, store, retry_failed, log)
    runs = {r.run_id: r for r in plan.runs}

    def on_result(task: Task, result: Result) -> None:
        outcome.results[task.run_id] = result
        t = time.perf_counter()
        store.write_index(plan)
        index_s[0] += time.perf_counter() - t
        run = runs[task.run_id]
        value = result.metrics.get(spec.metric["name"])
        shown = f"  {spec.metric['name']} {value:.4f}" if isinstance(value, (int, float)) else ""
        note = "  (finished by another process)" if result.outcome == "skipped" else ""
        reason = f" ({result.reason})" if result.reason and result.status != "completed" else ""
        log(f"[{len(outcome.results)}/{len(tasks)}] {run.variant} s{run.seed}: {result.status}{reason}{shown}"
            f"  {result.seconds:.1f}s{note}")

    def on_lost(task: Task, pid: Optional[int], why: str) -> None:
        store.mark_lost(task.run_id, pid, why)
        on_result(task, Result(task.run_id, "lost", "interrupted", why))

    def finish(how: str) -> None:
        ran = [r.seconds for r in outcome.results.values() if r.outcome == "trained"]
        outcome.timings = {"wall_s": time.perf_counter() - began, "import_s": imported - began,
                           "plan_s": planned - imported, "store_s": index_s[0], "run_s": ran,
                           "worker_startup_s": list(launch.startup_s), "workers": getattr(launch, "n", None)}
        try:
            _log_invocation(store, command, started_at, launcher, outcome, how)
        except OSError as exc:  # provenance is worth a warning, never the sweep's results
            log(f"warning: could not append to {store.root / 'invocations.jsonl'}: {exc}")

    try:
        if tasks:
            if on_launch is not None:
                on_launch()
            launch.run(tasks, on_result, on_lost)
    except BaseException:
        launch.stop(interrupt=True)
        store.write_index(plan)
        finish("interrupted")
        raise
    launch.stop(abort=not tasks)
    store.write_index(plan)
    finish("finished")
    return outcome


def _utc_now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _log_invocation(store: Store, command: Optional[str], started_at: str, launcher: str, outcome: SweepOutcome,
                    how: str) -> None:
    from ..provenance import git_commit, machine

    t = outcome.timings
    store.log_invocation({
        "command": command, "started": started_at, "ended": _utc_now(), "wall_s": round(t["wall_s"], 2),
        "outcome": how, "runs_trained": len(t["run_s"]), "launcher": launcher, "workers": t["workers"],
        "git_commit": git_commit(), "machine": machine(),
        "timings_s": {"training": round(sum(t["run_s"]), 2), "import": round(t["import_s"], 2),
                      "plan": round(t["plan_s"], 2), "store": round(t["store_s"], 2),
                      "worker_startup": round(max(t["worker_startup_s"] or [0.0]), 2)}})


def _tasks(plan: Plan, store: Store, retry_failed: bool, log: Callable[[str], None]) -> List[Task]:
    tasks, kept = [], {"completed": 0, "diverged": 0, "failed": 0}
    for run in plan.runs:
        status = store.status(run.run_id)
        state = status.get("status")
        retry = retry_failed and state in ("failed", "diverged")
        if state in FINISHED + ("failed",) and not retry:
            kept[state] += 1
            continue
        tasks.append(Task(run.run_id, str(store.run_dir(run.run_id)), run.config, str(store.root), retry,
                          status.get("updated") if retry else None))
    done = ", ".join(f"{n} {k}" for k, n in kept.items() if n)
    if done:
        hint = " (--retry-failed reruns failed and diverged ones)" if kept["failed"] + kept["diverged"] else ""
        log(f"sweep {plan.spec.name}: {done} already; {len(tasks)} to run{hint}")
    else:
        log(f"sweep {plan.spec.name}: {plural(len(tasks), 'run')}")
    return tasks


# ------------------------------------------------------------------------------------------ tables

def _table(header: List[str], rows: List[List[str]], right: tuple = ()) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = []
    for row in [header] + rows:
        cells = [str(x).rjust(w) if i in right else str(x).ljust(w) for i, (x, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def dry_run_table(plan: Plan) -> str:
    rows = []
    for run in plan.runs:
        changes = {**run.settings, **run.matched}
        rows.append([run.variant + (" *" if run.is_baseline else ""), str(run.seed),
                     ", ".join(f"{k}={plain(v)}" for k, v in changes.items()) or "-", f"{run.params:,}", run.run_id])
    text = _table(["variant", "seed", "changed keys", "params", "run_id"], rows, right=(1, 3))
    return text + f"{plural(len(plan.runs), 'run')}; * marks the baseline; nothing was trained (--dry-run)\n"


def results_table(outcome: SweepOutcome) -> str:
    metric = outcome.plan.spec.metric["name"]
    rows, statuses = [], outcome.statuses()
    for run in outcome.plan.runs:
        final = (read_json(outcome.store.run_dir(run.run_id) / "summary.json") or {}).get("final", {})
        value = final.get(metric)
        rows.append([run.variant + (" *" if run.is_baseline else ""), str(run.seed), statuses[run.run_id]["status"],
                     f"{value:.4f}" if isinstance(value, (int, float)) else "-"])
    goal = "lower" if outcome.plan.spec.metric["goal"] == "min" else "higher"
    return (_table(["variant", "seed", "status", metric], rows, right=(1, 3))
            + f"{metric}: {goal} is better; * marks the baseline; index: {outcome.store.root / 'index.csv'}\n")
