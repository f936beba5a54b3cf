"""`arch-zoo sweep SPEC key=value ...`: command-line overrides are part of the spec."""
import pytest
import yaml

from arch_zoo.cli import main
from arch_zoo.errors import ConfigError
from arch_zoo.sweeps import load_spec, make_plan

from .conftest import write_spec

SPEC = {"name": "o", "grid": {"model.position": ["rope", "alibi"]}, "seeds": [0],
        "overrides": {"train.max_steps": 5, "model.d_ff": 48}}


def test_command_line_overrides_apply_after_the_spec_s_own(spec_dir):
    """README (Sweeps): "`arch-zoo sweep SPEC key=value ...` applies the overrides to every run, after
    the spec's own `overrides`"."""
    path = write_spec(spec_dir, SPEC)
    plain, changed = make_plan(load_spec(path)), make_plan(load_spec(path, ["train.max_steps=2", "model.n_layers=2"]))
    assert [r.config.train.max_steps for r in plain.runs] == [5, 5]
    assert [(r.config.train.max_steps, r.config.model.n_layers, r.config.model.d_ff) for r in changed.runs] == [
        (2, 2, 48), (2, 2, 48)]
    assert [r.config.model.position.name for r in changed.runs] == ["rope", "alibi"]
    assert changed.spec.raw["command_line_overrides"] == ["train.max_steps=2", "model.n_layers=2"]


def test_an_override_cannot_fix_a_varied_key_or_the_spec_s_seeds(spec_dir):
    path = write_spec(spec_dir, SPEC)
    with pytest.raises(ConfigError, match=r"^model\.position: is varied by the spec's grid"):
        load_spec(path, ["model.position=rope"])
    with pytest.raises(ConfigError, match=r"^seed: the spec's 'seeds' list sets it"):
        load_spec(path, ["seed=3"])
    with pytest.raises(ConfigError, match=r"^train\.max_steps: expected an integer, got 'many'"):
        make_plan(load_spec(path, ["train.max_steps=many"]))


def test_sweep_cli_takes_overrides_records_them_and_refuses_to_mix_other_ones(spec_dir, tmp_path, capsys):
    """README (Sweeps): "rerunning into the same store with other overrides is refused, naming the run
    and the difference"; --dry-run prints the overrides."""
    path, out = write_spec(spec_dir, {**SPEC, "grid": {"model.position": ["rope"]}}), tmp_path / "out"
    assert main(["sweep", str(path), "--dry-run", "--out", str(out), "train.max_steps=2"]) == 0
    dry = capsys.readouterr().out
    assert dry.startswith("command-line overrides (every run): train.max_steps=2\n") and "\n1 run;" in dry
    assert main(["sweep", str(path), "train.max_steps=2", "--out", str(out)]) == 0
    run_dir = next((out / "o" / "runs").iterdir())
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["max_steps"] == 2
    assert yaml.safe_load((out / "o" / "sweep.yaml").read_text())["command_line_overrides"] == ["train.max_steps=2"]
    capsys.readouterr()
    for other in (["train.max_steps=3"], []):  # other overrides, or none: the spec changed
        assert main(["sweep", str(path), "--out", str(out), *other]) == 2
        err = capsys.readouterr().err
        assert f"run {run_dir.name}: " in err and "different config" in err and "train.max_steps" in err
    assert main(["sweep", str(path), "train.max_steps=2", "--out", str(out)]) == 0  # the same: nothing to train
    assert "0 to run" in capsys.readouterr().out
