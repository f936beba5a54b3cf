"""--export-wandb writes a wandb sweep config that reads back as the same sweep and whose command
trains each point the way the sweep would."""
import os
import stat
import subprocess
import sys

import yaml

from arch_zoo.cli import build_parser, main
from arch_zoo.coerce import to_dict
from arch_zoo.experiment import load
from arch_zoo.sweeps import expand, load_spec, make_plan

from .conftest import write_spec

SPEC = {"name": "wb", "grid": {"model.position": ["rope", "alibi"], "train.lr": [1.0e-3, 3.0e-3]},
        "overrides": {"model.d_ff": 48, "train.max_steps": 12}, "seeds": [0, 1],
        "metric": {"name": "val/loss", "goal": "min"}}


def agent_args(params: dict) -> list:
    """What the agent puts in ${args_no_hyphens}: key=value with Python's str() of each value."""
    return [f"{k}={v}" for k, v in params.items()]


def test_export_round_trips_and_its_command_trains_the_same_config(tmp_path, capsys):
    path, out = write_spec(tmp_path, SPEC), tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--export-wandb"]) == 0
    exported = out / "wb" / "wandb_sweep.yaml"
    assert str(exported) in capsys.readouterr().out
    data = yaml.safe_load(exported.read_text())
    assert data["method"] == "grid" and data["metric"] == {"name": "val/loss", "goal": "minimize"}
    assert data["parameters"]["seed"] == {"values": [0, 1]}
    assert data["command"][-1] == "${args_no_hyphens}" and "arch-zoo train" in data["command"][3]
    assert not (out / "wb" / "runs").exists()  # exporting trains nothing

    original, back = load_spec(path), load_spec(exported)
    assert [v.settings for v in expand(back)] == [v.settings for v in expand(original)]
    assert back.seeds == original.seeds and back.base == original.base and back.metric == original.metric

    plan = make_plan(original)
    run = plan.runs[-1]  # alibi, lr 3e-3, seed 1
    cmd = data["command"]
    args = cmd[cmd.index("-c") + 3:-1] + agent_args({**run.settings, "seed": run.seed})
    parsed, extra = build_parser().parse_known_args(["train", *args, "--quiet", "--out", "x"])
    cfg = to_dict(load(parsed.config, list(parsed.overrides) + extra))
    want = to_dict(run.config)
    assert cfg["logging"]["wandb"]["enabled"] and cfg["logging"]["wandb"]["group"] == "wb"
    cfg.pop("logging"), want.pop("logging")
    assert cfg == want  # the agent's run is the sweep's run


def _exported_command(tmp_path, monkeypatch):
    """Exported from one directory, with a relative spec path and a relative --out."""
    here = tmp_path / "exported_from"
    write_spec(here, SPEC)
    monkeypatch.chdir(here)
    assert main(["sweep", "spec.yaml", "--out", "out", "--export-wandb"]) == 0
    return yaml.safe_load((here / "out" / "wb" / "wandb_sweep.yaml").read_text())["command"], here / "out" / "wb"


def _agent(cmd, cwd, env, program):
    """What a wandb agent runs for one point: the command with its macros filled, from ``cwd``."""
    argv = [a for a in cmd if a not in ("${env}", "${args_no_hyphens}")] + ["model.position=alibi", "seed=1"]
    env = {**os.environ, **env, "PATH": f"{program.parent}:{os.environ['PATH']}", "WANDB_RUN_ID": "abc123"}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)


def test_the_exported_shell_command_passes_every_argument_through(tmp_path, monkeypatch):
    """README: the export's paths are absolute and its runs land in the sweep's store, from any cwd."""
    cmd, store = _exported_command(tmp_path, monkeypatch)
    fake = tmp_path / "bin" / "arch-zoo"  # stands in for the real command: prints what it was given
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = _agent(cmd, elsewhere, {}, fake)
    assert result.returncode == 0, result.stderr
    got = result.stdout.splitlines()
    assert got[0] == "train" and got[1] == str(tmp_path / "exported_from" / "base.yaml")
    assert "model.position=alibi" in got and "seed=1" in got and "model.d_ff=48" in got
    assert got[got.index("--out") + 1] == str(store.resolve() / "runs" / "abc123")  # one directory per wandb run


def test_an_agent_run_from_another_directory_trains_into_the_sweeps_store(tmp_path, monkeypatch):
    """The agent's entry point (`arch-zoo train`, run by `sh -c`) resolves the exported paths from a
    directory unrelated to the export's, and `arch-zoo report` reads the run from the store."""
    cmd, store = _exported_command(tmp_path, monkeypatch)
    program = tmp_path / "bin" / "arch-zoo"  # the real entry point, with this checkout's arch_zoo
    program.parent.mkdir()
    program.write_text(f"#!/bin/sh\nexec {sys.executable} -m arch_zoo \"$@\"\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = _agent(cmd, elsewhere, {"WANDB_MODE": "disabled", "PYTHONPATH": os.pathsep.join(sys.path)}, program)
    assert result.returncode == 0, result.stderr
    run_dir = store / "runs" / "abc123"
    cfg = load(run_dir / "config.yaml")
    assert (cfg.model.position.name, cfg.seed, cfg.model.d_ff, cfg.logging.wandb.group) == ("alibi", 1, 48, "wb")
    assert not (elsewhere / "runs").exists() and list(elsewhere.iterdir()) == []  # nothing lands in the cwd
    assert main(["report", str(store), "--out", str(tmp_path / "report"), "--format", "csv"]) == 0


def test_zip_and_match_params_cannot_be_exported(tmp_path, capsys):
    path = write_spec(tmp_path, {"zip": {"model.n_heads": [1, 2], "model.head_dim": [8, 8]}})
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--export-wandb"]) == 2
    assert "zip: wandb sweeps vary every parameter independently" in capsys.readouterr().err
