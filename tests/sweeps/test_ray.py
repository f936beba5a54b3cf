"""The Ray launcher on a local cluster: ray.init(num_cpus=2), each run a Ray task."""
import json
import os
import signal

import pytest
import yaml

from arch_zoo.sweeps import load_spec, run_sweep
from arch_zoo.sweeps.ray_launcher import resources

from .conftest import BASE, write_spec

ray = pytest.importorskip("ray", reason="ray is an optional extra: pip install 'arch-zoo[ray]'")


PLUGIN = ("from arch_zoo.components.positions import POSITIONS, Alibi, AlibiOptions\n"
          "POSITIONS.register('alibi_plugin', AlibiOptions)(type('AlibiPlugin', (Alibi,), {}))\n")


def test_ray_launcher_runs_every_run_as_a_ray_task(tmp_path):
    """Ray workers import the base config's plugins too (README, plugins: "Ray workers import it"); a size
    ladder (``scale:``) runs on Ray as it does locally, each run at its rung's size."""
    from arch_zoo.config import plugins
    from arch_zoo.components.positions import POSITIONS

    (tmp_path / "plugin.py").write_text(PLUGIN)
    spec = {"name": "r", "grid": {"model.position": ["alibi_plugin"]}, "seeds": [0],
            "scale": {"sizes": [{"d_model": 16}, {"d_model": 24}], "fit": False}}
    path, out = write_spec(tmp_path, spec, base={**BASE, "plugins": ["plugin.py"]}), tmp_path / "out"
    lines = []
    try:
        handlers = []  # SIGTERM's once the runs are out: the sweep's (stop them, record, exit 143), not ray.init's
        outcome = run_sweep(load_spec(path), out, launcher="ray", ray_init={"num_cpus": 2}, log=lines.append,
                            on_launch=lambda: handlers.append(signal.getsignal(signal.SIGTERM)))
        assert [s["status"] for s in outcome.statuses().values()] == ["completed"] * 2, lines
        widths = sorted((r.config.model.position.name, r.config.model.d_model) for r in outcome.plan.runs)
        configs = [yaml.safe_load((outcome.store.run_dir(r.run_id) / "config.yaml").read_text()) for r in outcome.plan.runs]
        saved = sorted((c["model"]["position"]["name"], c["model"]["d_model"]) for c in configs)
        assert widths == saved == [("alibi_plugin", 16), ("alibi_plugin", 24)]
        assert [h.__module__ for h in handlers] == ["arch_zoo.training.interrupts"], handlers
        pids = {json.loads((outcome.store.run_dir(r) / "status.json").read_text())["pid"] for r in outcome.results}
        assert os.getpid() not in pids  # trained in Ray worker processes, not here
        assert all(r.outcome == "trained" and r.seconds > 0 for r in outcome.results.values())
        assert not ray.is_initialized()  # the launcher shuts down the cluster it started
    finally:
        if ray.is_initialized():
            ray.shutdown()
        POSITIONS.unregister("alibi_plugin")  # later tests in this process see the built-ins only
        plugins._loaded.pop(str((tmp_path / "plugin.py").resolve()), None)


def test_resource_request_follows_the_config():
    from arch_zoo.experiment import load

    cpu = load({**BASE, "train": {**BASE["train"], "num_workers": 2}})
    assert resources(cpu, {"CPU": 8}) == {"num_cpus": 3, "num_gpus": 0.0}
    assert resources(cpu, {"CPU": 8, "GPU": 2})["num_gpus"] == 1.0  # accelerator auto, on a GPU cluster
    gpu = load({**BASE, "train": {**BASE["train"], "accelerator": "gpu", "devices": 2}})
    assert resources(gpu, {"CPU": 8})["num_gpus"] == 2.0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head():
    """A real Ray cluster, as a user starts one: `ray start --head` on a free port with its own temp
    dir, once per module; stopped (its process group, which this fixture started) in teardown."""
    import shutil
    import signal
    import socket
    import subprocess
    import sys
    import tempfile
    import time
    from pathlib import Path

    port, temp = _free_port(), tempfile.mkdtemp(prefix="rz", dir="/tmp")  # short: Ray's socket paths
    exe = Path(sys.executable).with_name("ray")
    # a ~/.ray/auth_token left on the machine turns token auth on for `ray start` only: keep the
    # cluster and the CLI on one explicit mode
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    head = subprocess.Popen([str(exe), "start", "--head", f"--port={port}",
                             f"--temp-dir={temp}", "--num-cpus=2", "--include-dashboard=false",
                             "--disable-usage-stats", "--block"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert head.poll() is None, "ray start --head exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "ray start --head did not listen within 180 s"
                time.sleep(0.5)
        yield f"127.0.0.1:{port}", Path(temp), env
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(10)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow  # starts its own `ray start --head` cluster; failed once on the loaded machine: make test-slow
def test_cli_sweep_on_a_running_ray_cluster(tmp_path, ray_head):
    """README: "`arch-zoo sweep SPEC --launcher ray --ray-address HOST:PORT` sends each run to an
    existing Ray cluster (one started with `ray start --head`)": through the CLI, every run trains
    in a worker process of that cluster, and the sweep leaves the cluster running."""
    import subprocess

    from .conftest import cli

    address, temp, env = ray_head
    spec = {"name": "rc", "grid": {"model.position": ["rope", "alibi"]}, "seeds": [0]}
    path, out = write_spec(tmp_path, spec), tmp_path / "out"
    proc = subprocess.run(cli("sweep", path, "--out", out, "--launcher", "ray", "--ray-address", address),
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    statuses = [json.loads(p.read_text()) for p in (out / "rc" / "runs").glob("*/status.json")]
    assert [s["status"] for s in statuses] == ["completed"] * 2
    logs = {p.name for p in temp.glob("session_*/logs/worker-*.out")}
    for s in statuses:  # Ray names each worker's log after its pid: the runs trained in that cluster's workers
        assert any(name.endswith(f"-{s['pid']}.out") for name in logs), (s["pid"], sorted(logs)[:5])
    host, port = address.rsplit(":", 1)
    import socket

    socket.create_connection((host, int(port)), timeout=5).close()  # the CLI left the cluster running
