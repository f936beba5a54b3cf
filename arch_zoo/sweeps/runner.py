"""``run_sweep``: spec -> plan -> store -> launcher -> index (the tables the CLI prints: ``tables.py``)."""
from __future__ import annotations

import dataclasses
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from ..formatting import plural
from ..metrics import PER_BYTE
from ..run_names import plain
from ..rundir import PAUSED, PRUNED, SUMMARY
from .plan import Plan, make_plan, second_plan
from .rungs import cut_runs, next_round
from .spec import SweepSpec, load_spec
from .store import Store, read_json
from .stages import stage_two_size
from .plan_checks import comparison_warnings
from .tune import STAGE_TUNE, Choice, base_settings, choose, edge_warning, per_byte_rows, shown, variant_key
from .invocation import Invocation, utc_now, worker_times
from .worker import FINISHED, Result, Task
from ..training.interrupts import SweepInterrupted, sigterm_held, sigterm_raises

DEFAULT_OUT = "runs/sweeps"
NOT_DONE = ("failed", "interrupted", "pending", "running", PAUSED)


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
            if run.tune.get("stage") == STAGE_TUNE and s["status"] in ("diverged", PRUNED):
                continue  # a tuning range is meant to reach instability: that value is just not chosen
            if s["status"] in NOT_DONE + ("diverged",):
                out.append(f"{run.variant} s{run.seed}: {s['status']}" + (f" ({s['reason']})" if s.get("reason") else ""))
        return out


def make_launcher(kind: str, workers: Optional[int], ray_address: Optional[str] = None,
                  ray_init: Optional[Dict[str, Any]] = None, threads: Optional[int] = None,
                  slurm: Optional[Dict[str, Any]] = None):
    if kind == "local":
        from .local import LocalLauncher

        return LocalLauncher(workers or 1, threads)
    if kind == "ray":
        from .ray_launcher import RayLauncher

        return RayLauncher(ray_address, max_in_flight=workers, init_kwargs=ray_init)
    if kind == "slurm":
        from .slurm_launcher import SlurmLauncher

        return SlurmLauncher(max_in_flight=workers, **(slurm or {}))
    from ..errors import choice_error

    raise choice_error("--launcher", "launcher", kind, ["local", "ray", "slurm"])


def _check_loggers(plan) -> None:
    """A dashboard library that is missing or an MLflow server that does not answer is one error up
    front, not the same failure once per run."""
    from ..tracking.deps import check_logging

    seen = set()
    for run in plan.runs:
        key = repr(run.config.logging)
        if key not in seen:
            seen.add(key)
            check_logging(run.config.logging)


def run_sweep(spec: Union[str, Path, SweepSpec], out: Union[str, Path] = DEFAULT_OUT, workers: Optional[int] = None,
              launcher: str = "local", ray_address: Optional[str] = None, retry_failed: bool = False,
              log: Callable[[str], None] = print, ray_init: Optional[Dict[str, Any]] = None,
              threads: Optional[int] = None, command: Optional[str] = None,
              on_launch: Optional[Callable[[], None]] = None,
              slurm: Optional[Dict[str, Any]] = None) -> SweepOutcome:
    """Run (or resume) a sweep; every problem with the spec is raised before any run starts.
    ``threads``: torch threads per local worker (default: the cores divided among the workers).
    Each call that gets past planning records itself in the store's invocations.jsonl as it goes
    (its ``command``, commit and machine when it starts, each run it trains, its outcome and wall
    time at the end), which reports print as the sweep's provenance. ``on_launch`` is
    called once the runs are handed to the launcher, when this process has nothing to do but wait.
    ``slurm``: the Slurm launcher's options (partition, time_limit, gpus, extra, cluster).

    SIGTERM (a cluster's preemption or time limit) or Ctrl-C stops the sweep as they stop ``train``:
    the signal goes on to every run in progress, which checkpoints (after SIGTERM, at the step it
    was at) and records itself as interrupted; the call records its end and raises
    ``SweepInterrupted`` (exit 143 or 130), and rerunning the same command resumes."""
    with sigterm_raises():
        return _run_sweep(spec, out, workers, launcher, ray_address, retry_failed, log, ray_init, threads,
                          command, on_launch, slurm)


def _run_sweep(spec, out, workers, launcher, ray_address, retry_failed, log, ray_init, threads, command,
               on_launch, slurm) -> SweepOutcome:
    began = time.perf_counter()
    started_at = utc_now()
    spec = spec if isinstance(spec, SweepSpec) else load_spec(spec)
    launch = make_launcher(launcher, workers, ray_address, ray_init, threads, slurm)
    plan, store, imported = _plan(spec, out, launch, log)
    planned = time.perf_counter()
    call = Invocation(store, command, started_at, launcher, getattr(launch, "n", None), log)
    outcome = SweepOutcome(plan, store)
    index_s, tasks, ended = [0.0], [], []  # store I/O: run.json files, index.csv rewrites, invocations
    runs = {r.run_id: r for r in plan.runs}
    received = [0]  # a halving run reports once per rung it trains to
    # stage 2's runs, counted in the progress total before stage 1 has chosen them: one counter over both
    coming = [stage_two_size(plan) if spec.tune is not None else 0]

    def on_result(task: Task, result: Result) -> None:
        outcome.results[task.run_id] = result
        received[0] += 1
        t = time.perf_counter()
        store.write_index(plan)
        call.ran(result)
        index_s[0] += time.perf_counter() - t
        run = runs[task.run_id]
        value = result.metrics.get(spec.metric["name"])
        shown = f"  {spec.metric['name']} {value:.4f}" if isinstance(value, (int, float)) else ""
        note = "  (finished by another process)" if result.outcome == "skipped" else ""
        reason = f" ({result.reason})" if result.reason and result.status != "completed" else ""
        log(f"[{received[0]}/{len(tasks) + coming[0]}] {run.variant} s{run.seed}: {result.status}{reason}{shown}"
            f"  {result.seconds:.1f}s{note}")

    def on_lost(task: Task, pid: Optional[int], why: str) -> None:
        store.mark_lost(task.run_id, pid, why)
        on_result(task, Result(task.run_id, "lost", "interrupted", why))

    def finish(how: str, **extra: Any) -> None:
        ran = [r.seconds for r in outcome.results.values() if r.outcome == "trained"]
        outcome.timings = {"wall_s": time.perf_counter() - began, "import_s": imported - began,
                           "plan_s": planned - imported, "store_s": index_s[0], "run_s": ran,
                           "worker_startup_s": list(launch.startup_s), "workers": getattr(launch, "n", None),
                           **worker_times(outcome.results.values(), getattr(launch, "ready_at", {}))}
        with sigterm_held():  # one end record, however a SIGTERM falls
            call.end(outcome.timings, how, **extra)
            ended.append(how)

    def launch_tasks(todo: List[Task]) -> None:
        if todo:
            if on_launch is not None and len(todo) == len(tasks):
                on_launch()
            launch.run(todo, on_result, on_lost)

    try:
        call.start(len(plan.runs))  # before anything is written, so any kill from here on leaves a trace
        writing = time.perf_counter()  # (the commit and machine lookups above are not store I/O)
        store.write_plan(plan)
        store.write_index(plan)
        halving = spec.tune is not None and spec.tune.halving is not None
        stops = next_round(plan, store, retry_failed, log) if halving else None
        tasks += _tasks(plan, store, retry_failed, log, stops)
        index_s[0] += time.perf_counter() - writing
        launch_tasks(tasks)
        while stops:  # successive halving: the next rung's runs, decided from the store as it now is
            previous, stops = stops, next_round(plan, store, False, log)
            if stops == previous:  # e.g. a worker died: the same round again would not get further
                log("stage 1: the last round left its runs where they were; rerun the same command to resume")
                break
            more = _tasks(plan, store, False, log, stops)
            tasks += more
            launch_tasks(more)
        second = _second_stage(plan, store, log) if spec.tune is not None else None
        coming[0] = 0
        if second is not None:  # a tuned sweep's stage 2, planned from stage 1's finished runs
            store.check_conflicts(second)
            plan = outcome.plan = Plan(spec, plan.runs + second.runs, second.axes, second.names)
            runs.update({r.run_id: r for r in second.runs})
            store.write_plan(plan)
            store.write_index(plan)
            more = _tasks(second, store, retry_failed, log)
            tasks += more
            launch_tasks(more)
        launch.stop(abort=not tasks)
        store.write_index(plan)
        finish("finished")
    except BaseException as exc:
        name = getattr(exc, "signal_name", "SIGINT") if isinstance(exc, KeyboardInterrupt) else None
        busy = launch.busy()
        launch.stop(interrupt=True, signum=getattr(signal, name or "SIGINT"))
        store.write_index(plan)
        stopped = [(f"{runs[t.run_id].variant} s{runs[t.run_id].seed}", store.status(t.run_id).get("step"))
                   for t in busy]
        if not ended:
            finish("interrupted", **({"signal": name, "stopped": [t.run_id for t in busy]} if name else {}))
        if name:
            raise SweepInterrupted(name, stopped) from None
        raise
    return outcome


def _plan(spec: SweepSpec, out, launch, log: Callable[[str], None]) -> Tuple[Plan, Store, float]:
    """The plan, checked against the store, and every token store it needs prepared, while the
    launcher's workers start; (plan, store, when the imports ended). Any failure stops the workers
    and is raised before anything is written (Ctrl-C as ``SweepInterrupted``)."""
    try:
        launch.start()  # workers import the stack while this process plans
        from ..config.catalog import all_registries

        all_registries()  # the components, tasks and torch: timed apart from the planning itself
        imported = time.perf_counter()
        plan = make_plan(spec)
        store = Store(Path(out) / spec.name)
        store.check_conflicts(plan)
        _check_loggers(plan)
        from ..data.tasks.common import prepare_all

        prepare_all([r.config for r in plan.runs], log)  # each distinct token store once, before any worker
        for line in comparison_warnings(plan):  # what --dry-run warned of, said again as the sweep starts
            log(line)
    except BaseException as exc:
        launch.stop(abort=True)
        if isinstance(exc, KeyboardInterrupt):  # nothing was written yet
            raise SweepInterrupted(getattr(exc, "signal_name", "SIGINT"), []) from None
        raise
    return plan, store, imported


def stage_one(plan: Plan, store: Store) -> Tuple[List[str], Dict[str, Choice], Dict[str, str]]:
    """A tuned sweep's stage 1 as the store holds it: its runs not finished yet ('variant s<seed>:
    status'), each variant's choice (final only once none waits) and each variant's name, by the
    key ``choose`` gives it. Reads the store, writes nothing (``--dry-run`` shows it too)."""
    tune = plan.spec.tune
    rows, measured, waiting, names = [], [], [], {}
    cut = cut_runs(plan, store) if tune.halving is not None else set()
    split = tune.select.rsplit("/", 1)[0]
    for run in plan.runs:
        status = PRUNED if run.run_id in cut else store.status(run.run_id)["status"]
        if status not in FINISHED + ("failed", PRUNED):
            waiting.append(f"{run.variant} s{run.seed}: {status}")
        summary = read_json(store.run_dir(run.run_id) / SUMMARY) or {}
        final = summary.get("final", {})
        rows.append((run.settings, run.seed, status, final.get(tune.select)))
        measured.append((final.get(f"{split}/{PER_BYTE}"),
                         ((summary.get("task") or {}).get("bytes_per_token") or {}).get(split)))
        names[variant_key(base_settings(run.settings, tune.keys))] = run.tune["variant"]
    rows, switched = per_byte_rows(tune, rows, measured)  # a tuned key that changes what a token is
    chosen = choose(tune, rows)
    for label, (metric, why) in switched.items():
        if label in chosen:
            chosen[label] = dataclasses.replace(chosen[label], by=metric, why=why)
    return waiting, chosen, names


def choice_line(tune, name: str, c: Choice, verb: str = "trains at") -> str:
    if c.value is None:
        return f"stage 1: no {tune.key} completed on every tuning seed for {name}; it has no stage 2"
    line = f"stage 1: {name} {verb} {shown(tune, c.value)} ({c.by or tune.select} {c.scores[c.value]:.4f})"
    return line + (f"\n  {c.why}" if c.why else "")


def _second_stage(plan: Plan, store: Store, log: Callable[[str], None]) -> Optional[Plan]:
    """Stage 2's plan from stage 1's runs as the store holds them, or None while any is unfinished."""
    tune = plan.spec.tune
    waiting, chosen, names = stage_one(plan, store)
    if waiting:
        log(f"stage 2 waits for stage 1: {plural(len(waiting), 'run')} not finished ({'; '.join(waiting[:3])}); "
            "rerun the same command to resume")
        return None
    for key, c in chosen.items():
        log(choice_line(tune, names[key], c))
        warning = edge_warning(tune.key, names[key], c.edge, plain(c.value)) if c.value is not None else None
        if warning:
            log(warning)
    return second_plan(plan.spec, chosen)


def _best_by(metric: Dict[str, str]):
    """(name, goal) of the sweep's metric when its runs log it at each validation (val/..., val@L/...)."""
    split = metric["name"].split("/", 1)[0]
    return (metric["name"], metric["goal"]) if split == "val" or split.startswith("val@") else None


def _tasks(plan: Plan, store: Store, retry_failed: bool, log: Callable[[str], None],
           stops: Optional[Dict[str, Optional[int]]] = None) -> List[Task]:
    """The runs to train; ``stops`` (successive halving): only these runs, each to its rung."""
    tasks, kept = [], {"completed": 0, "diverged": 0, "failed": 0}
    for run in plan.runs:
        if stops is not None and run.run_id not in stops:
            continue
        status = store.status(run.run_id)
        state = status.get("status")
        retry = retry_failed and state in ("failed", "diverged")
        if state in FINISHED + ("failed",) and not retry:
            kept[state] += 1
            continue
        tasks.append(Task(run.run_id, str(store.run_dir(run.run_id)), run.config, str(store.root), retry,
                          status.get("updated") if retry else None, stop_at=(stops or {}).get(run.run_id),
                          best=_best_by(plan.spec.metric)))
    if stops is not None:
        return tasks  # next_round said what it trains
    done = ", ".join(f"{n} {k}" for k, n in kept.items() if n)
    if done:
        hint = " (--retry-failed reruns failed and diverged ones)" if kept["failed"] + kept["diverged"] else ""
        log(f"sweep {plan.spec.name}: {done} already; {len(tasks)} to run{hint}")
    else:
        log(f"sweep {plan.spec.name}: {plural(len(tasks), 'run')}")
    return tasks
