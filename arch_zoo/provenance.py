"""Where a result came from: the arch_zoo commit, the machine, the command. Standard library only,
so sweeps and reports can record it without importing torch."""
from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence


def git_commit() -> Optional[str]:
    """The arch_zoo checkout's commit (with '+dirty' if it has local changes), if it is one."""
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        if not sha:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> Optional[float]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return None


def gpus() -> List[str]:
    """GPU names from nvidia-smi when there is one; torch is not imported for this."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def machine() -> str:
    """One line: 'AMD EPYC 7B13, 2 logical CPUs, 24 GiB RAM, no GPU, Linux x86_64, python 3.11.7'."""
    mem = memory_gib()
    gpu = gpus()
    parts = [cpu_model(), f"{os.cpu_count()} logical CPUs"]
    if mem is not None:
        parts.append(f"{mem:.0f} GiB RAM")
    parts.append(", ".join(gpu) if gpu else "no GPU")
    parts.append(f"{platform.system()} {platform.machine()}, python {platform.python_version()}")
    return ", ".join(parts)


def command_line(argv: Optional[Sequence[str]] = None, program: str = "arch-zoo") -> str:
    """The command as a user would retype it: ``arch-zoo sweep sweeps/x.yaml --workers 2``."""
    args = list(sys.argv[1:] if argv is None else argv)
    return shlex.join([program, *args])
