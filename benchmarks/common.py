"""Timing, memory and reporting helpers shared by the side-by-side benchmarks.

Timing: every implementation is warmed up, then timed in round-robin rounds (the order rotates
each round), so machine noise (other processes, frequency changes) falls on all of them alike.
The statistic is the median seconds per call.

Memory: measured for one implementation at a time in a fresh child process, because a process
holding every model at once cannot attribute its peak to any one of them. Two numbers:

* tensor peak: the most bytes held by live tensors at any moment (weights, grads, optimizer
  state, activations, temporaries). On CUDA this is ``torch.cuda.max_memory_allocated``. On CPU
  torch keeps no allocator statistics, so the child runs under ``torch.profiler`` with
  ``profile_memory=True`` and replays its allocation and free events in time order; the two are
  the same quantity.
* RSS growth (CPU only): the kernel's resident-set high-water mark (VmHWM, reset through
  /proc/self/clear_refs) minus the resident set at the start. It adds allocator slack and pages
  freed but not yet returned, and misses freed memory that was reused, so it is a cross-check,
  not the headline number.
"""
from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import torch

from arch_zoo.provenance import cpu_model  # the benchmark scripts put this checkout on sys.path

CHILD_MARKER = "BENCH_CHILD_RESULT "


# ------------------------------------------------------------------------------------ machine

def pick_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available to this torch build")
    return torch.device(name)


def machine_info(device: torch.device) -> Dict[str, object]:
    info: Dict[str, object] = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "device": str(device),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def describe_machine(info: Mapping[str, object]) -> str:
    text = (f"machine: {info['cpu']} ({info['cpu_count']} logical CPUs), torch {info['torch']}, "
            f"{info['threads']} threads, python {info['python']}, device {info['device']}")
    return text + (f" ({info['gpu']})" if "gpu" in info else "")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------------- timing

@dataclass
class Timing:
    """Per-call seconds of one function: wall clock, and CPU time of the whole process (all threads).
    On a shared machine, wall time also counts waiting for a core; CPU time mostly does not, so a
    wall ratio that disagrees with the CPU ratio points at noise. On CUDA, CPU time is host time only."""

    wall: List[float] = field(default_factory=list)
    cpu: List[float] = field(default_factory=list)


def round_robin(fns: Mapping[str, Callable[[], None]], device: torch.device, warmup: int, rounds: int,
                per_turn: int = 1, log: Optional[Callable[[str], None]] = None) -> Dict[str, Timing]:
    """Time each function: ``warmup`` untimed calls each, then ``rounds`` rounds in which every
    function is called ``per_turn`` times in a row, the order rotating by one each round."""
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
        sync(device)
    times = {name: Timing() for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            for _ in range(per_turn):
                sync(device)
                wall, cpu = time.perf_counter(), time.process_time()
                fns[name]()
                sync(device)
                times[name].wall.append(time.perf_counter() - wall)
                times[name].cpu.append(time.process_time() - cpu)
        if log is not None:
            log(f"  round {r + 1}/{rounds}: " + ", ".join(f"{n} {times[n].wall[-1] * 1e3:.0f} ms" for n in names))
    return times


def summarize(seconds: Sequence[float]) -> Dict[str, float]:
    ordered = sorted(seconds)
    q = statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) >= 2 else [ordered[0]] * 3
    return {"median_s": statistics.median(ordered), "min_s": ordered[0], "q1_s": q[0], "q3_s": q[2],
            "n": len(ordered)}


# ------------------------------------------------------------------------------------- memory

def _proc_status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        match = re.search(rf"^{field}:\s+(\d+)\s+kB", f.read(), re.M)
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {field}")
    return int(match.group(1)) * 1024


def _profiler_tensor_peak(prof) -> Optional[int]:
    """Peak live tensor bytes from a profiler run with profile_memory=True (private API; None if absent)."""
    try:
        from torch._C._profiler import _EventType

        stack = list(prof.profiler.kineto_results.experimental_event_tree())
    except (AttributeError, ImportError):
        return None
    allocs = []
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation:
            allocs.append((node.start_time_ns, node.extra_fields.alloc_size))  # negative for frees
        stack.extend(node.children)
    live = peak = 0
    for _, size in sorted(allocs, key=lambda a: a[0]):
        live += size
        peak = max(peak, live)
    return peak


class PeakMemory:
    """Peak memory of what runs between ``start()`` and ``stop()``, in a process of its own (see the
    module docstring for what the numbers mean)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.method = ("tensor peak: torch.cuda.max_memory_allocated" if device.type == "cuda" else
                       "tensor peak: torch.profiler allocation events replayed in order")

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
            return
        with open("/proc/self/clear_refs", "w") as f:  # resets VmHWM to the current RSS
            f.write("5")
        self.base = _proc_status_kb("VmRSS")
        self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
        self.prof.__enter__()

    def stop(self) -> Dict[str, Optional[int]]:
        """``peak_bytes`` (tensor peak) and, on CPU, ``rss_peak_bytes`` (RSS growth)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return {"peak_bytes": torch.cuda.max_memory_allocated(self.device) - self.base}
        rss = _proc_status_kb("VmHWM") - self.base
        self.prof.__exit__(None, None, None)
        return {"peak_bytes": _profiler_tensor_peak(self.prof), "rss_peak_bytes": rss}


def emit_child_result(result: Mapping[str, object]) -> None:
    """The last line a child writes; ``run_child`` finds it among whatever else was printed."""
    print(CHILD_MARKER + json.dumps(result), flush=True)


def _child_result(argv: Sequence[str], returncode: int, stdout: str, stderr: str) -> Dict[str, object]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(CHILD_MARKER):
            return json.loads(line[len(CHILD_MARKER):])
    tail = (stderr or stdout).strip().splitlines()[-5:]
    raise RuntimeError(f"child {' '.join(argv)} exited {returncode} without a result: " + " | ".join(tail))


def run_children(argvs: Sequence[Sequence[str]], parallel: int = 1, timeout: float = 600
                 ) -> List[object]:
    """Run each ``python argv...`` in a fresh process, ``parallel`` at a time, and return what each
    passed to ``emit_child_result`` (or the RuntimeError saying why it did not). Only for
    measurements that other processes cannot disturb, such as a process's own peak memory."""
    results: List[object] = [None] * len(argvs)
    pending = list(enumerate(argvs))
    running: List[tuple] = []
    while pending or running:
        while pending and len(running) < max(1, parallel):
            i, argv = pending.pop(0)
            out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # pipes could fill and block
            running.append((i, argv, subprocess.Popen([sys.executable, *argv], stdout=out, stderr=err, text=True),
                            out, err))
        i, argv, proc, out, err = running.pop(0)
        try:
            proc.wait(timeout=timeout)
            out.seek(0), err.seek(0)
            results[i] = _child_result(argv, proc.returncode, out.read(), err.read())
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            results[i] = RuntimeError(f"child {' '.join(argv)} ran past {timeout:.0f} s")
        except RuntimeError as exc:
            results[i] = exc
        finally:
            out.close(), err.close()
    return results


# ------------------------------------------------------------------------------------ reports

def mib(n_bytes: Optional[float]) -> str:
    return "n/a" if n_bytes is None else f"{n_bytes / 2 ** 20:.1f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain fixed-width table: first column left-aligned, the rest right-aligned."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] + [""] * (len(headers) - len(row)) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]])


def save_json(path: str, data: Mapping[str, object]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
