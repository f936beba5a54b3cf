"""The Ray launcher: each run is a Ray task with its resource request, on ``ray.init(address=...)``
(an existing cluster) or on a local one. Ray reuses its worker processes, so the stack is imported
once per worker, not once per run.

Ray is an optional extra: ``pip install 'arch-zoo[ray]'``. On a multi-machine cluster, every node
needs arch_zoo installed and the sweep's output directory on a shared file system (the run locks
are flock()s on that file system)."""
from __future__ import annotations

import signal
import threading
from typing import Any, Callable, Dict, List, Optional

from ..errors import ConfigError
from .worker import Result, Task, TaskQueue


def _run_task(pickled_task: bytes, threads: int) -> Result:
    """The task travels pickled: Ray would unpickle an argument before this function runs, and a
    config naming plugin components needs the built-in registries imported first."""
    import pickle
    import warnings

    from ..experiment import all_registries
    from .worker import execute, set_threads

    all_registries()
    task = pickle.loads(pickled_task)

    for category in (DeprecationWarning, FutureWarning):
        warnings.simplefilter("ignore", category)

    set_threads(threads)
    return execute(task)


def resources(config, cluster: Dict[str, float]) -> Dict[str, float]:
    """What one run asks Ray for: a CPU (plus its data-loader workers), and the GPUs the config
    trains on (accelerator gpu/cuda, or auto on a cluster that has GPUs)."""
    t = config.train
    cpus = 1 + t.num_workers
    wants_gpu = t.accelerator in ("gpu", "cuda") or (t.accelerator == "auto" and cluster.get("GPU", 0) > 0)
    gpus = 0.0
    if wants_gpu:
        gpus = float(t.devices) if isinstance(t.devices, int) else float(len(t.devices)) \
            if isinstance(t.devices, list) else 1.0
    return {"num_cpus": cpus, "num_gpus": gpus}


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A ``--ray-address`` (``HOST:PORT`` or ``ray://HOST:PORT``) nothing listens on is a user
    mistake: say so in one line at once (``ray.init`` itself retries for minutes, then fails with
    a traceback). ``auto`` and other forms are left to Ray."""
    import socket

    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ConfigError("--ray-address", f"no Ray cluster reachable at {address} ({why}); "
                          "start one with `ray start --head` or check the address") from None


class RayLauncher:
    def __init__(self, address: Optional[str] = None, max_in_flight: Optional[int] = None,
                 init_kwargs: Optional[Dict[str, Any]] = None):
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("--launcher", "ray is not installed; pip install 'arch-zoo[ray]'") from None
        self.address, self.max_in_flight = address, max_in_flight
        self.init_kwargs = init_kwargs or {}
        self.started_here = False
        self.startup_s: List[float] = []
        self.in_flight: Dict[Any, Task] = {}

    def start(self) -> None:
        import time

        import ray

        if ray.is_initialized():
            return
        began = time.perf_counter()
        kwargs = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR",
                  **self.init_kwargs}
        if self.address:
            check_reachable(self.address)
            kwargs["address"] = self.address
        term = signal.getsignal(signal.SIGTERM)
        try:
            ray.init(**kwargs)
        except ConnectionError as exc:  # something listens there, but not a Ray cluster this can join
            raise ConfigError("--ray-address", f"cannot join a Ray cluster at {self.address} "
                              f"({(str(exc).splitlines() or [''])[0]}; a cluster with token auth also "
                              "needs RAY_AUTH_MODE=token here)") from None
        finally:
            if threading.current_thread() is threading.main_thread():
                # ray.init makes SIGTERM a bare exit; the sweep's own handling (run_sweep) stops the runs,
                # records the call's end and exits 143
                if term is not None:  # None: a handler not set from Python, which cannot be put back
                    signal.signal(signal.SIGTERM, term)
        self.started_here = True
        self.startup_s.append(time.perf_counter() - began)

    def run(self, tasks: List[Task], on_result: Callable[[Task, Result], None],
            on_lost: Callable[[Task, Optional[int], str], None]) -> None:
        import pickle

        import ray

        self.start()
        cluster = ray.cluster_resources()
        remote = ray.remote(_run_task)
        queue = TaskQueue(tasks)
        in_flight = self.in_flight = {}
        while queue or in_flight:
            while queue and (self.max_in_flight is None or len(in_flight) < self.max_in_flight):
                task = queue.next()
                request = resources(task.config, cluster)
                ref = remote.options(**request, max_retries=0).remote(pickle.dumps(task), max(1, int(request["num_cpus"])))
                in_flight[ref] = task
            done, _ = ray.wait(list(in_flight), num_returns=1)
            task = in_flight.pop(done[0])
            try:
                result = ray.get(done[0])
            except ray.exceptions.RayError as exc:  # the worker process died, or Ray lost the node
                on_lost(task, None, f"its Ray task failed ({type(exc).__name__})")
                continue
            queue.settle(task, result, on_result)

    def busy(self) -> List[Task]:
        return list(self.in_flight.values())

    def stop(self, interrupt: bool = False, abort: bool = False, signum: Optional[int] = None) -> None:
        import ray

        if interrupt and ray.is_initialized():
            # Ray delivers a cancel as Ctrl-C, whatever stopped this process (``signum``): run_one
            # records each run as interrupted at its last checkpoint; a rerun resumes them
            for ref in self.in_flight:
                ray.cancel(ref)
        if self.started_here and ray.is_initialized():
            ray.shutdown()
