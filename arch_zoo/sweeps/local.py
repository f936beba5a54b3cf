"""The local launcher: N long-lived worker processes on this machine.

Workers come from a 'forkserver': a clean interpreter that imports the training stack once and
then forks a worker per request in milliseconds. (Forking this process instead could hang a child
once torch's OpenMP pool has run here; spawning a fresh interpreter per worker would pay the ~5-10 s
import of torch and Lightning N times.) Where forkserver is missing, workers are spawned. Each sets
its share of the cores as torch threads, then trains run after run, one at a time, sent over its
own pipe. A pipe per
worker, rather than a shared queue, means a worker killed at any moment cannot take a queue's lock
down with it; its death shows on its sentinel, its run is recorded as interrupted (a rerun resumes
it from its checkpoint) and a fresh worker takes its place. Finished runs are on disk already."""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from multiprocessing.connection import wait
from typing import Callable, Dict, List, Optional

from ..openmp import VARIABLE, passive_unless_chosen
from .worker import Result, Task, TaskQueue, available_cores

PRELOAD = ["arch_zoo.sweeps.local", "arch_zoo.training.run", "arch_zoo.training.trainer"]
STOP_GRACE_S = 30.0  # how long interrupted workers get to record their runs before being terminated
# after SIGTERM a worker finishes its step and writes a full checkpoint first, which for a large model
# on a slow disk takes a while; a scheduler that will not wait this long kills everything itself
TERM_GRACE_S = 120.0
TICK_S = 1.0  # while runs train, how often ``on_tick`` is called (a sweep's live progress lines)


def _worker_main(conn, threads: int) -> None:
    started = time.perf_counter()
    try:
        import warnings

        for category in (DeprecationWarning, FutureWarning):  # libraries' notices, once per run: noise in a sweep
            warnings.simplefilter("ignore", category)
        from .worker import execute, set_threads

        set_threads(threads)
        from ..training import run, trainer  # noqa: F401  (the whole stack, once per worker)
        from ..training.interrupts import sigterm_raises
    except BaseException:  # noqa: BLE001 - reported to the parent, which explains it to the user
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid(), time.perf_counter() - started, time.monotonic()))
    with sigterm_raises():  # between runs SIGTERM ends the worker quietly; during one, run_one handles it
        while True:
            try:
                task = conn.recv()
                if task is None:
                    return
                conn.send(("result", execute(task)))
            except (EOFError, KeyboardInterrupt, BrokenPipeError):  # parent gone, Ctrl-C or SIGTERM: run_one has
                return  # recorded its run


class _Worker:
    def __init__(self, ctx, threads: int):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, threads), daemon=False)
        self.process.start()
        child.close()
        self.task: Optional[Task] = None
        self.ready = False


class LocalLauncher:
    def __init__(self, workers: int = 1, threads: Optional[int] = None):
        self.n = max(1, workers)
        self.threads = threads or max(1, available_cores() // self.n)
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        self.ctx = mp.get_context(method)
        if method == "forkserver":  # no effect once this process's forkserver runs: it has them already
            self.ctx.set_forkserver_preload(PRELOAD)
        self.workers: List[_Worker] = []
        self.started_workers = 0
        self.startup_s: List[float] = []  # per worker: start() (or its respawn) to ready, imports included
        self.ready_at: Dict[int, float] = {}  # pid -> time.monotonic() in the worker once its imports were done
        self._start_times: Dict[int, float] = {}
        self._began = time.perf_counter()
        # called with the busy tasks as runs are handed out and at least every tick_s while they train
        self.on_tick: Optional[Callable[[List[Task]], None]] = None
        self.tick_s = TICK_S

    def start(self) -> None:
        """Get the workers going now, so their imports overlap the parent's planning. A forkserver
        starts without waiting for its imports; its workers are forked once ``run`` needs them."""
        self._began = time.perf_counter()
        if self.ctx.get_start_method() == "forkserver":
            from multiprocessing import forkserver

            with _passive_openmp():
                forkserver.ensure_running()
        else:
            while len(self.workers) < self.n:
                self._spawn()

    def _spawn(self) -> _Worker:
        began = time.perf_counter()
        with _passive_openmp(), _main_module_hidden():
            w = _Worker(self.ctx, self.threads)
        self._start_times[id(w)] = min(began, self._began) if self.started_workers < self.n else began
        self.workers.append(w)
        self.started_workers += 1
        return w

    def run(self, tasks: List[Task], on_result: Callable[[Task, Result], None],
            on_lost: Callable[[Task, Optional[int], str], None]) -> None:
        queue = TaskQueue(tasks)
        while len(self.workers) < self.n:
            self._spawn()
        respawns = 0
        while queue or any(w.task for w in self.workers):
            for w in self.workers:
                if w.ready and w.task is None:
                    task = w.task = queue.next()  # busy before the send: an interrupt then still reaches it
                    try:
                        if task is not None:
                            w.conn.send(task)
                    except (BrokenPipeError, OSError):  # it just died: the task goes first to the next worker
                        w.task = None
                        queue.pending.appendleft(task)
            if not self.workers:
                raise RuntimeError("no sweep worker is left")
            if self.on_tick is not None:
                self.on_tick(self.busy())
            handles = {w.conn: w for w in self.workers}
            handles.update({w.process.sentinel: w for w in self.workers})
            ready = wait(list(handles), timeout=self.tick_s if self.on_tick is not None else None)
            for w in {id(handles[h]): handles[h] for h in ready}.values():
                if self._drain(w, queue, on_result) and w.process.is_alive():
                    continue
                w.process.join(timeout=5)
                if w.process.is_alive():  # the pipe broke but the process lingers
                    w.process.terminate()
                    w.process.join(timeout=5)
                self.workers.remove(w)
                why = _death(w.process.exitcode)
                if w.task is not None:
                    on_lost(w.task, w.process.pid, why)
                elif not w.ready:
                    respawns += 1
                    if respawns > 2 * self.n:
                        raise RuntimeError(f"sweep workers keep dying before they start ({why})")
                if queue or any(x.task for x in self.workers):
                    self._spawn()

    def _drain(self, w: _Worker, queue: TaskQueue, on_result) -> bool:
        """Handle every message waiting on ``w``'s pipe; False once the pipe has closed."""
        try:
            while w.conn.poll():
                self._receive(w, w.conn.recv(), queue, on_result)
        except (EOFError, OSError):
            return False
        return True

    def _receive(self, w: _Worker, message, queue: TaskQueue, on_result) -> None:
        kind = message[0]
        if kind == "ready":
            w.ready = True
            self.ready_at[message[1]] = message[3]
            self.startup_s.append(time.perf_counter() - self._start_times.pop(id(w), time.perf_counter()))
        elif kind == "error":
            raise RuntimeError(f"a sweep worker could not start:\n{message[1]}")
        elif kind == "result":
            task, result = w.task, message[1]
            w.task = None
            queue.settle(task, result, on_result)

    def busy(self) -> List[Task]:
        """The tasks the workers have in hand."""
        return [w.task for w in self.workers if w.task is not None]

    def stop(self, interrupt: bool = False, abort: bool = False, signum: int = signal.SIGINT) -> None:
        """Ask idle workers to exit. ``interrupt`` also sends ``signum`` to busy ones (run_one records
        their runs as interrupted; after SIGTERM, checkpointed at the step they were at) and to those
        still starting, and kills what has not exited after a grace period; ``abort`` (nothing was
        sent yet) terminates at once."""
        for w in self.workers:
            try:
                if abort:
                    w.process.terminate()
                elif interrupt and (w.task is not None or not w.ready):  # one still importing stops now too
                    os.kill(w.process.pid, signum)
                elif w.task is None:
                    w.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        grace = (TERM_GRACE_S if signum == signal.SIGTERM else STOP_GRACE_S) if interrupt else 60.0
        deadline = time.monotonic() + grace
        # past the grace: SIGTERM (a checkpoint, then exit), then SIGKILL; a worker that has had its
        # SIGTERM would ignore another
        late = (signal.SIGKILL,) if interrupt and signum == signal.SIGTERM else (signal.SIGTERM, signal.SIGKILL)
        for w in self.workers:
            for sig in late:
                if _exited(w, deadline):
                    break
                with contextlib.suppress(OSError):
                    os.kill(w.process.pid, sig)
                deadline = time.monotonic() + 5
            w.process.join(timeout=1)  # reaps a spawned worker (a forked one is its forkserver's to reap)
            w.conn.close()
        self.workers = []


def _exited(w: _Worker, deadline: float) -> bool:
    """Whether ``w`` has exited by ``deadline``: its end of the pipe closes when it does. (Its
    sentinel cannot say: a forkserver killed with the sweep's process group reports every worker
    dead at once.) A message still on the way (a run it just finished) is on disk already."""
    while wait([w.conn], max(0.0, deadline - time.monotonic())):
        try:
            w.conn.recv()
        except (EOFError, OSError):
            return True
    return False


def end_forkserver() -> None:
    """Kill this process's forkserver now; for a command about to exit. Left alone, the server
    would first finish importing torch and Lightning (a sweep with nothing to run exits while it
    is still at it) and then tear down its interpreter: seconds in which it still holds the
    command's stdout and stderr, so `arch-zoo sweep ... | tee log`, or a subprocess capturing
    the output, waits for it. It holds nothing else: every run is on disk by then. Not reaped,
    so a later ``ensure_running`` in this process sees it dead and starts a fresh one."""
    from multiprocessing import forkserver

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def _main_module_hidden():
    """Workers need nothing from the caller's __main__ (their target and tasks are arch_zoo's), so
    multiprocessing is not told about it: it would re-run the caller's script in every worker, and
    a script or notebook without an `if __name__ == "__main__":` guard would start sweeps there."""
    space = getattr(sys.modules.get("__main__"), "__dict__", {})
    saved = {k: space[k] for k in ("__file__", "__spec__") if k in space}
    space.pop("__file__", None)
    if "__spec__" in saved:
        space["__spec__"] = None
    try:
        yield
    finally:
        space.update(saved)


@contextlib.contextmanager
def _passive_openmp():
    """Workers' OpenMP threads sleep while they wait (openmp.py), unless the user chose otherwise;
    the coordinator's own environment is left as it was."""
    if not passive_unless_chosen():
        yield
        return
    try:
        yield
    finally:
        os.environ.pop(VARIABLE, None)


def _death(exitcode: Optional[int]) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"its worker process was killed ({name})"
    return f"its worker process exited (code {exitcode})"
