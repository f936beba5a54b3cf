"""``run_sweep``: spec -> plan -> store -> launcher -> index (the tables the CLI prints: ``tables.py``)."""
from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from ..formatting import plural
from ..progress import LiveLines
from ..rundir import PAUSED, PRUNED
from .plan import Plan, make_plan
from .rungs import next_round
from .shadowing import check_worker_imports
from .spec import SweepSpec, load_spec
from .store import Store
from .stages import second_stage, stage_two_size
from .plan_checks import comparison_warnings
from .tune import STAGE_TUNE
from .invocation import Invocation, utc_now, worker_times
from .live import SweepProgress
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

        local = LocalLauncher(workers or 1, threads)  # starts no process yet
        check_worker_imports(local.ctx.get_start_method())
        return local
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
              slurm: Optional[Dict[str, Any]] = None, progress: bool = False) -> SweepOutcome:
    """Run (or resume) a sweep; every problem with the spec is raised before any run starts.
    ``threads``: torch threads per local worker (default: the cores divided among the workers).
    Each call that gets past planning records itself in the store's invocations.jsonl as it goes
    (its ``command``, commit and machine when it starts, each run it trains, its outcome and wall
    time at the end), which reports print as the sweep's provenance. ``on_launch`` is
    called once the runs are handed to the launcher, when this process has nothing to do but wait.
    ``slurm``: the Slurm launcher's options (partition, time_limit, gpus, extra, cluster).
    ``progress``: local workers' runs are shown as they train (``sweeps/live.py``), on stdout, where
    ``log`` then writes too if it is ``print``.

    SIGTERM (a cluster's preemption or time limit) or Ctrl-C stops the sweep as they stop ``train``:
    the signal goes on to every run in progress, which checkpoints (after SIGTERM, at the step it
    was at) and records itself as interrupted; the call records its end and raises
    ``SweepInterrupted`` (exit 143 or 130), and rerunning the same command resumes."""
    console = LiveLines() if progress else None
    if console is not None and log is print:
        log = console.log
    try:
        with sigterm_raises():
            return _run_sweep(spec, out, workers, launcher, ray_address, retry_failed, log, ray_init, threads,
                              command, on_launch, slurm, console)
    finally:
        if console is not None:
            console.close()


def _run_sweep(spec, out, workers, launcher, ray_address, retry_failed, log, ray_init, threads, command,
               on_launch, slurm, console) -> SweepOutcome:
    began, started_at = time.perf_counter(), utc_now()
    spec = spec if isinstance(spec, SweepSpec) else load_spec(spec)
    launch = make_launcher(launcher, workers, ray_address, ray_init, threads, slurm)
    plan, store, imported = _plan(spec, out, launch, log)
    planned = time.perf_counter()
    call = Invocation(store, command, started_at, launcher, getattr(launch, "n", None), log)
    sweep = _Sweep(SweepOutcome(plan, store), launch, call, log, retry_failed, on_launch, (began, imported, planned))
    if console is not None and hasattr(launch, "on_tick"):  # local workers: their runs' records are on this disk
        sweep.live = SweepProgress(console, sweep.label)
        launch.on_tick = sweep.live.tick
    try:
        sweep.run()
    except BaseException as exc:
        stopped = sweep.stop(exc)
        if stopped is not None:
            raise stopped from None
        raise
    return sweep.outcome


class _Sweep:
    """One call's runs from the plan to their end: the launcher's callbacks, the progress counter, the
    store's index and the invocation's record, however the call ends."""

    def __init__(self, outcome: SweepOutcome, launch, call: Invocation, log: Callable[[str], None],
                 retry_failed: bool, on_launch: Optional[Callable[[], None]], times: Tuple[float, float, float]):
        self.outcome, self.store, self.spec = outcome, outcome.store, outcome.plan.spec
        self.launch, self.call, self.log = launch, call, log
        self.retry_failed, self.on_launch = retry_failed, on_launch
        self.began, self.imported, self.planned = times
        self.index_s = 0.0  # store I/O: run.json files, index.csv rewrites, invocations
        self.tasks: List[Task] = []
        self.ended = False
        self.runs = {r.run_id: r for r in outcome.plan.runs}
        self.received = 0  # a halving run reports once per rung it trains to
        # stage 2's runs, counted in the progress total before stage 1 has chosen them: one counter over both
        self.coming = stage_two_size(outcome.plan) if self.spec.tune is not None else 0
        self.live: Optional[SweepProgress] = None

    @property
    def plan(self) -> Plan:
        return self.outcome.plan

    def run(self) -> None:
        self.call.start(len(self.plan.runs))  # before anything is written, so any kill from here on leaves a trace
        stops = self._first_round()
        self._halving_rounds(stops)
        self._stage_two()
        self._seed_rounds()
        self.launch.stop(abort=not self.tasks)
        self.store.write_index(self.plan)
        self.finish("finished")

    def _first_round(self) -> Optional[Dict[str, Optional[int]]]:
        """The plan written and the first tasks launched; successive halving's first stops, if it halves."""
        writing = time.perf_counter()  # (the commit and machine lookups of call.start are not store I/O)
        self.store.write_plan(self.plan)
        self.store.write_index(self.plan)
        halving = self.spec.tune is not None and self.spec.tune.halving is not None
        stops = next_round(self.plan, self.store, self.retry_failed, self.log) if halving else None
        self.tasks += _tasks(self.plan, self.store, self.retry_failed, self.log, stops)
        self.index_s += time.perf_counter() - writing
        self.launch_tasks(self.tasks)
        return stops

    def _halving_rounds(self, stops: Optional[Dict[str, Optional[int]]]) -> None:
        """Successive halving: each next rung's runs, decided from the store as it now is."""
        while stops:
            previous, stops = stops, next_round(self.plan, self.store, False, self.log)
            if stops == previous:  # e.g. a worker died: the same round again would not get further
                self.log("stage 1: the last round left its runs where they were; rerun the same command to resume")
                break
            more = _tasks(self.plan, self.store, False, self.log, stops)
            self.tasks += more
            self.launch_tasks(more)

    def _stage_two(self) -> None:
        """A tuned sweep's stage 2, planned from stage 1's finished runs."""
        second = second_stage(self.plan, self.store, self.log) if self.spec.tune is not None else None
        self.coming = 0
        if second is None:
            return
        self.store.check_conflicts(second)
        self.outcome.plan = Plan(self.spec, self.plan.runs + second.runs, second.axes, second.names)
        self.runs.update({r.run_id: r for r in second.runs})
        self.store.write_plan(self.plan)
        self.store.write_index(self.plan)
        more = _tasks(second, self.store, self.retry_failed, self.log)
        self.tasks += more
        self.launch_tasks(more)

    def _seed_rounds(self) -> None:
        """Adaptive seeds: rounds of more seeds for the comparisons still undecided (``seed_rounds``)."""
        if self.spec.adaptive is None:
            return
        from .seed_rounds import next_round

        while True:
            more = next_round(self.plan, self.store, self.log)
            if not more:
                return
            self.store.check_conflicts(Plan(self.spec, more, self.plan.axes, self.plan.names))
            self.outcome.plan = Plan(self.spec, self.plan.runs + more, self.plan.axes, self.plan.names)
            self.runs.update({r.run_id: r for r in more})
            self.store.write_plan(self.plan)
            self.store.write_index(self.plan)
            todo = _tasks(Plan(self.spec, more, self.plan.axes, self.plan.names), self.store, self.retry_failed,
                          self.log)
            self.tasks += todo
            self.launch_tasks(todo)

    def launch_tasks(self, todo: List[Task]) -> None:
        if todo:
            if self.on_launch is not None and len(todo) == len(self.tasks):
                self.on_launch()
            self.launch.run(todo, self.on_result, self.on_lost)

    def on_result(self, task: Task, result: Result) -> None:
        self.outcome.results[task.run_id] = result
        self.received += 1
        t = time.perf_counter()
        self.store.write_index(self.plan)
        self.call.ran(result)
        self.index_s += time.perf_counter() - t
        if self.live is not None:  # the run's live line goes as its end line comes
            self.live.tick(self.launch.busy())
        self.log(self._progress(self.runs[task.run_id], result))

    def label(self, run_id: str) -> str:
        run = self.runs[run_id]
        return f"{run.variant} s{run.seed}"

    def _progress(self, run, result: Result) -> str:
        name = self.spec.metric["name"]
        value = result.metrics.get(name)
        shown = f"  {name} {value:.4f}" if isinstance(value, (int, float)) else ""
        note = "  (finished by another process)" if result.outcome == "skipped" else ""
        reason = f" ({result.reason})" if result.reason and result.status != "completed" else ""
        return (f"[{self.received}/{len(self.tasks) + self.coming}] {run.variant} s{run.seed}: {result.status}{reason}"
                f"{shown}  {result.seconds:.1f}s{note}")

    def on_lost(self, task: Task, pid: Optional[int], why: str) -> None:
        self.store.mark_lost(task.run_id, pid, why)
        self.on_result(task, Result(task.run_id, "lost", "interrupted", why))

    def finish(self, how: str, **extra: Any) -> None:
        ran = [r.seconds for r in self.outcome.results.values() if r.outcome == "trained"]
        launch = self.launch
        self.outcome.timings = {
            "wall_s": time.perf_counter() - self.began, "import_s": self.imported - self.began,
            "plan_s": self.planned - self.imported, "store_s": self.index_s, "run_s": ran,
            "worker_startup_s": list(launch.startup_s), "workers": getattr(launch, "n", None),
            **worker_times(self.outcome.results.values(), getattr(launch, "ready_at", {}))}
        with sigterm_held():  # one end record, however a SIGTERM falls
            self.call.end(self.outcome.timings, how, **extra)
            self.ended = True

    def stop(self, exc: BaseException) -> Optional[SweepInterrupted]:
        """After ``exc`` cut the call short: every run in progress stopped, the index and the end recorded;
        the ``SweepInterrupted`` to raise for a signal (SIGTERM, Ctrl-C), else None (``exc`` goes on)."""
        name = getattr(exc, "signal_name", "SIGINT") if isinstance(exc, KeyboardInterrupt) else None
        busy = self.launch.busy()
        self.launch.stop(interrupt=True, signum=getattr(signal, name or "SIGINT"))
        self.store.write_index(self.plan)
        runs = [self.runs[t.run_id] for t in busy]
        stopped = [(f"{r.variant} s{r.seed}", self.store.status(r.run_id).get("step")) for r in runs]
        if not self.ended:
            self.finish("interrupted", **({"signal": name, "stopped": [t.run_id for t in busy]} if name else {}))
        return SweepInterrupted(name, stopped) if name else None


def _plan(spec: SweepSpec, out, launch, log: Callable[[str], None]) -> Tuple[Plan, Store, float]:
    """The plan, checked against the store, and every token store it needs prepared, while the
    launcher's workers start; (plan, store, when the imports ended). Any failure stops the workers
    and is raised before anything is written (Ctrl-C as ``SweepInterrupted``)."""
    try:
        launch.start()  # workers import the stack while this process plans
        from ..experiment import all_registries

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
