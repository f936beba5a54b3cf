"""The Ray launcher on a local cluster: ray.init(num_cpus=2), each run a Ray task."""
import json
import os

import pytest

from arch_zoo.sweeps import load_spec, run_sweep
from arch_zoo.sweeps.ray_launcher import resources

from .conftest import BASE, write_spec

ray = pytest.importorskip("ray", reason="ray is an optional extra: pip install 'arch-zoo[ray]'")


PLUGIN = ("from arch_zoo.components.positions import POSITIONS, Alibi, AlibiOptions\n"
          "POSITIONS.register('alibi_plugin', AlibiOptions)(type('AlibiPlugin', (Alibi,), {}))\n")


def test_ray_launcher_runs_every_run_as_a_ray_task(tmp_path):
    """Ray workers import the base config's plugins too (README, plugins: "Ray workers import it")."""
    from arch_zoo import plugins
    from arch_zoo.components.positions import POSITIONS

    (tmp_path / "plugin.py").write_text(PLUGIN)
    spec = {"name": "r", "grid": {"model.position": ["rope", "alibi_plugin"]}, "seeds": [0, 1]}
    path, out = write_spec(tmp_path, spec, base={**BASE, "plugins": ["plugin.py"]}), tmp_path / "out"
    lines = []
    try:
        outcome = run_sweep(load_spec(path), out, launcher="ray", ray_init={"num_cpus": 2}, log=lines.append)
        assert [s["status"] for s in outcome.statuses().values()] == ["completed"] * 4, lines
        pids = {json.loads((outcome.store.run_dir(r) / "status.json").read_text())["pid"] for r in outcome.results}
        assert os.getpid() not in pids  # trained in Ray worker processes, not here
        assert all(r.outcome == "trained" and r.seconds > 0 for r in outcome.results.values())
        assert not ray.is_initialized()  # the launcher shuts down the cluster it started
    finally:
        if ray.is_initialized():
            ray.shutdown()
        POSITIONS._entries.pop("alibi_plugin", None)  # later tests in this process see the built-ins only
        plugins._loaded.pop(str((tmp_path / "plugin.py").resolve()), None)


def test_resource_request_follows_the_config():
    from arch_zoo.loading import load

    cpu = load({**BASE, "train": {**BASE["train"], "num_workers": 2}})
    assert resources(cpu, {"CPU": 8}) == {"num_cpus": 3, "num_gpus": 0.0}
    assert resources(cpu, {"CPU": 8, "GPU": 2})["num_gpus"] == 1.0  # accelerator auto, on a GPU cluster
    gpu = load({**BASE, "train": {**BASE["train"], "accelerator": "gpu", "devices": 2}})
    assert resources(gpu, {"CPU": 8})["num_gpus"] == 2.0
