"""``arch-zoo dashboard``: export what is missing, start the real TensorBoard or MLflow server on
127.0.0.1, print its URL, and stop it (and everything it started) on Ctrl-C."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, List, Optional

from ..errors import ConfigError, choice_error
from ..reports.runstore import is_run_dir, is_sweep_dir
from .export import export, finished_runs

HOST = "127.0.0.1"
DEFAULT_PORTS = {"tensorboard": 6006, "mlflow": 5000}
READY_S = 120  # MLflow migrates a new SQLite store on first start


def port_free(port: int) -> bool:
    """No server listens on ``port``. SO_REUSEADDR, as TensorBoard's and MLflow's servers bind: a port whose
    last connection lingers in TIME_WAIT (up to a minute after a server that closed first) is free to them."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def choose_port(tool: str, port: Optional[int]) -> int:
    """The asked port, which must be free; else the tool's usual one, else any free one."""
    if port is not None:
        if not 0 < port < 65536:
            raise ConfigError("--port", f"must be 1-65535, got {port}")
        if not port_free(port):
            raise ConfigError("--port", f"port {port} on {HOST} is in use; choose another, or leave --port out "
                                        "for a free one")
        return port
    return DEFAULT_PORTS[tool] if port_free(DEFAULT_PORTS[tool]) else free_port()


def server_command(tool: str, sweep_dir: Path, port: int) -> List[str]:
    if tool == "tensorboard":
        return [sys.executable, "-m", "tensorboard.main", "--logdir", str(sweep_dir / "tensorboard"),
                "--host", HOST, "--port", str(port), "--reload_interval", "5"]
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{sweep_dir / 'mlflow.db'}",
            "--artifacts-destination", str(sweep_dir / "mlartifacts"), "--host", HOST, "--port", str(port),
            "--workers", "1"]


def wait_ready(proc: subprocess.Popen, url: str, log: Path, timeout: float = READY_S) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:] or ["no output"]
            raise ConfigError("", f"the dashboard server exited with code {proc.returncode}: {tail[0]} "
                                  f"(full log: {log})")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status < 500:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    stop(proc)
    raise ConfigError("", f"the dashboard server did not answer at {url} within {timeout:.0f} s (log: {log})")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (MLflow runs its app in worker processes)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def start(tool: str, sweep_dir: Path, port: int) -> tuple:
    """(process, url) of a running server; the caller stops it with ``stop``."""
    sweep_dir = sweep_dir.resolve()
    log = sweep_dir / f".{tool}-server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(server_command(tool, sweep_dir, port), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://{HOST}:{port}/"
    try:
        wait_ready(proc, url, log)
    except BaseException:
        stop(proc)
        raise
    return proc, url


def _interrupt(signum, frame) -> None:
    """SIGTERM and SIGHUP stop the server as Ctrl-C does, rather than leaving it holding the port."""
    raise KeyboardInterrupt


def dashboard(sweep_dir: Path, tool: str, port: Optional[int], say: Callable[[str], None] = print) -> int:
    if tool not in DEFAULT_PORTS:
        raise choice_error("--tool", "dashboard", tool, sorted(DEFAULT_PORTS))
    if not (is_sweep_dir(sweep_dir) or is_run_dir(sweep_dir)):
        raise ConfigError("", f"{sweep_dir} is not a sweep directory (no sweep.yaml, index.csv or runs/) nor a run "
                              "directory (no status.json)")
    port = choose_port(tool, port)
    runs, _ = finished_runs([sweep_dir])
    root = runs[0].root if runs else sweep_dir.resolve()
    save_dir = str(root / "tensorboard")
    result = export([sweep_dir], tool, tracking_uri=f"sqlite:///{root.resolve() / 'mlflow.db'}", save_dir=save_dir,
                    flags=("--tool", "--tool"))
    for line in result.lines():
        say(line)
    # kill and a closed terminal stop it as Ctrl-C does, from before the server starts: a signal that came
    # between the "at URL" line and the handlers once left the server running and the command exiting 130
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    proc = None
    try:
        proc, url = start(tool, root, port)  # stops its own server when interrupted while it waits for it
        say(f"{tool} at {url}  (Ctrl-C stops it)")
        while proc.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        if proc is not None:
            stop(proc)
        say(f"{tool} stopped")
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    raise ConfigError("", f"the {tool} server exited on its own with code {proc.returncode} "
                          f"(log: {root / f'.{tool}-server.log'})")
