"""The Slurm launcher: each run is one Slurm job, submitted through submitit as one job array.

A job trains its run with the same ``execute`` the local workers use (the run's lock, resume from
``checkpoints/last.ckpt``), so a sweep is resumable exactly as a local one: rerun the command and
finished runs are kept. On preemption or near its time limit Slurm signals the job (submitit asks
for USR2); submitit's checkpointing protocol then requeues the same run, which resumes from its
last checkpoint (written after every validation).

submitit is an optional extra: ``pip install 'arch-zoo[slurm]'``. The sweep's output directory
must be on a file system the compute nodes share (job files go to ``<store>/slurm/``).
``cluster="local"`` runs the jobs as local subprocesses through submitit's local executor (to
try a sweep before submitting it, and for the tests)."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from ..errors import ConfigError
from .worker import Result, Task, TaskQueue, available_cores

CLUSTERS = ("slurm", "local")


def parse_time(text: str) -> int:
    """Slurm's --time formats (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) -> whole minutes (at least 1)."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", str(text).strip())
    if not m:
        raise ConfigError("--slurm-time", f"{text!r} is not a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)")
    days, a, b, c = (int(x) if x else None for x in m.groups())
    if days is None:  # MM, MM:SS, HH:MM:SS
        seconds = a * 60 if b is None else a * 60 + b if c is None else a * 3600 + b * 60 + c
    else:  # D-HH, D-HH:MM, D-HH:MM:SS
        seconds = days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    return max(1, -(-seconds // 60))


def parse_extra(items: List[str]) -> Dict[str, str]:
    """``--slurm-extra key=value`` (repeatable) -> #SBATCH --key=value lines, passed through as they are."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise ConfigError("--slurm-extra", f"{item!r} is not KEY=VALUE (e.g. --slurm-extra qos=high)")
        out[key] = value
    return out


class RunJob:
    """What one Slurm job runs: a picklable callable that follows submitit's checkpointing protocol
    (``checkpoint`` returns the submission to requeue: the same run, which resumes from its
    checkpoint)."""

    def __init__(self, task: Task, threads: int):
        self.task, self.threads = task, threads

    def __call__(self) -> Result:
        import warnings

        from ..training.run import RunInterrupted
        from .worker import execute, set_threads

        for category in (DeprecationWarning, FutureWarning):
            warnings.simplefilter("ignore", category)
        set_threads(self.threads)
        try:
            return execute(self.task)
        except RunInterrupted as exc:
            # submitit's preemption handler exits the job with SystemExit (its requeue code for the
            # local executor); run_one records the run as interrupted and raises RunInterrupted in
            # its place: give submitit its exit back so that the job is requeued.
            if isinstance(exc.__context__, SystemExit):
                raise exc.__context__ from None
            raise

    def checkpoint(self, *args: Any, **kwargs: Any):
        import submitit

        # the run's own last.ckpt is the checkpoint: requeue the same run, waiting for its lock
        # (a preempted process may still be releasing it)
        from dataclasses import replace

        return submitit.helpers.DelayedSubmission(RunJob(replace(self.task, wait=True), self.threads))


class SlurmLauncher:
    def __init__(self, store_root: Optional[str] = None, partition: Optional[str] = None,
                 time_limit: Optional[str] = None, gpus: Optional[int] = None, extra: Optional[List[str]] = None,
                 cluster: str = "slurm", max_in_flight: Optional[int] = None, poll_s: float = 2.0):
        try:
            import submitit  # noqa: F401
        except ImportError:
            raise ConfigError("--launcher", "submitit is not installed; pip install 'arch-zoo[slurm]'") from None
        if cluster not in CLUSTERS:
            from ..errors import choice_error

            raise choice_error("--slurm-cluster", "submitit cluster", cluster, list(CLUSTERS))
        if gpus is not None and gpus < 0:
            raise ConfigError("--slurm-gpus", f"must be 0 or more, got {gpus}")
        self.partition, self.gpus, self.cluster = partition, gpus, cluster
        self.timeout_min = parse_time(time_limit) if time_limit else None
        self.extra = parse_extra(extra or [])
        self.max_in_flight, self.poll_s = max_in_flight, poll_s
        self.store_root = store_root
        self.startup_s: List[float] = []
        self.jobs: Dict[Any, Task] = {}

    def start(self) -> None:
        if self.cluster == "slurm":
            import shutil

            if shutil.which("sbatch") is None:
                raise ConfigError("--launcher", "slurm: sbatch is not on PATH (run the sweep on a Slurm "
                                  "login node, or try it here with --slurm-cluster local)")

    def executor(self, root: str, tasks: List[Task]):
        import submitit

        executor = submitit.AutoExecutor(folder=Path(root) / "slurm", cluster=self.cluster)
        cpus = max(1 + t.config.train.num_workers for t in tasks)
        params: Dict[str, Any] = {"name": Path(root).name, "cpus_per_task": cpus, "nodes": 1, "tasks_per_node": 1}
        if self.timeout_min is not None:
            params["timeout_min"] = self.timeout_min
        if self.gpus is not None:
            params["gpus_per_node"] = self.gpus
        if self.cluster == "slurm":
            params.update(slurm_partition=self.partition, slurm_additional_parameters=self.extra)
            if self.max_in_flight:
                params["slurm_array_parallelism"] = self.max_in_flight
            params = {k: v for k, v in params.items() if v is not None}
        executor.update_parameters(**params)
        return executor, cpus

    def run(self, tasks: List[Task], on_result: Callable[[Task, Result], None],
            on_lost: Callable[[Task, Optional[int], str], None]) -> None:
        executor, cpus = self.executor(tasks[0].store_root, tasks)
        threads = cpus if self.cluster == "slurm" else max(1, available_cores() // max(1, min(len(tasks), self.max_in_flight or len(tasks))))
        queue = TaskQueue(tasks)
        self.jobs = jobs = {}
        began = time.perf_counter()
        while queue or jobs:
            batch = []
            while queue and (self.max_in_flight is None or len(jobs) + len(batch) < self.max_in_flight):
                batch.append(queue.next())
            if batch:
                with executor.batch():  # one job array
                    submitted = [(executor.submit(RunJob(task, threads)), task) for task in batch]
                for job, task in submitted:
                    jobs[job] = task
                if not self.startup_s:
                    self.startup_s.append(time.perf_counter() - began)
            finished = [job for job in jobs if job.done()]
            if not finished:
                time.sleep(self.poll_s)
                continue
            for job in finished:
                task = jobs.pop(job)
                try:
                    result = job.result()
                except Exception as exc:  # noqa: BLE001 - the job died (killed, node lost, out of time)
                    detail = (str(exc).strip().splitlines() or [""])[-1][:200]
                    on_lost(task, None, f"its Slurm job {job.job_id} ended without a result ({detail})")
                    continue
                queue.settle(task, result, on_result)

    def busy(self) -> List[Task]:
        return list(self.jobs.values())

    def stop(self, interrupt: bool = False, abort: bool = False, signum: Optional[int] = None) -> None:
        # like the local launcher: the runs stop, each recorded as interrupted by run_one; a rerun resumes.
        # The job gets what a cancel sends (scancel: SIGTERM, so a checkpoint at the step it was at;
        # the local cluster: SIGINT), whatever ``signum`` stopped this process
        if interrupt:
            for job in self.jobs:
                try:
                    job.cancel(check=False)
                except Exception:  # noqa: BLE001 - a job that already ended
                    pass
