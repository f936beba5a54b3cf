import subprocess
import sys
from pathlib import Path

import pytest

from arch_zoo.cli import main
from tests.test_config import ERRORS

ROOT = Path(__file__).resolve().parents[1]


def test_components_lists_every_registered_choice(capsys):
    from arch_zoo.experiment import all_registries

    assert main(["components"]) == 0
    out = capsys.readouterr().out
    for registry in all_registries().values():
        for name in registry.choices():
            assert f"  {name} " in out


def test_describe_parameter_total_matches_the_model(capsys):
    from arch_zoo.experiment import load
    from arch_zoo.models import build_model

    assert main(["describe", "preset:decoder-small", "model.position=learned", "--vocab-size", "100"]) == 0
    out = capsys.readouterr().out
    model = build_model(load("preset:decoder-small", ["model.position=learned"]), 100)
    total = sum(p.numel() for p in model.parameters())  # tied weights appear once in .parameters()
    assert f"parameters  {total:,} total" in out
    assert "learned" in out


@pytest.mark.parametrize("data,pattern", ERRORS, ids=[p.split(":")[0].replace("\\", "") for _, p in ERRORS])
def test_cli_config_errors_exit_2_with_one_line(data, pattern, tmp_path, capsys):
    import re

    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["describe", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("arch-zoo: error: ")
    assert re.search(pattern, err)


def test_installed_console_script_reports_user_errors_without_traceback():
    exe = Path(sys.executable).with_name("arch-zoo")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "arch_zoo"]
    proc = subprocess.run(cmd + ["describe", "preset:decoder-small", "model.norm=batchnorm"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("arch-zoo: error: model.norm: unknown norm 'batchnorm'; "
                                   "choices: layernorm, rmsnorm, zero_centred_rmsnorm")


def test_unknown_command_exits_2(capsys):
    assert main(["fly"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_a_sweep_whose_only_problem_is_a_diverged_run_exits_1(tmp_path, capsys):
    """README (Sweeps): "A failed run does not stop the sweep; the exit status is 1 with a one-line
    summary" -- diverged runs included: their numbers are not results to compare."""
    from tests.sweeps.conftest import write_spec

    path = write_spec(tmp_path, {"name": "d", "grid": {"train.lr": [1.0e-3, 1.0e6]},
                                 "overrides": {"train.grad_clip": None}})
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("arch-zoo: 1 of 2 runs did not complete: lr=1000000.0 s0: diverged "
                                               "(non-finite training loss at step"), err
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 1  # rerun: nothing trains, same verdict


def test_report_provenance_counts_are_pluralised():
    """Issue: the report's provenance said `1 runs trained`, `1 local workers`."""
    import pandas as pd

    from arch_zoo.reports.provenance import provenance_lines

    runs = pd.DataFrame({"wall_time_s": [12.0]})
    runs.attrs["invocations"] = [{"command": "arch-zoo sweep s.yaml", "runs_trained": 1, "workers": 1,
                                  "launcher": "local", "outcome": "finished", "wall_s": 3.0},
                                 {"command": "arch-zoo sweep s.yaml", "runs_trained": 2, "workers": 2,
                                  "launcher": "local", "outcome": "finished", "wall_s": 3.0}]
    lines = provenance_lines(runs)
    assert "1 run trained (finished), 1 local worker;" in lines[0]
    assert "2 runs trained (finished), 2 local workers;" in lines[1]
    assert "over 1 run (" in lines[2]


def test_sweep_dry_run_counts_one_run_in_the_singular(tmp_path, capsys):
    """Issue: counts printed as `1 runs`."""
    from tests.sweeps.conftest import write_spec

    path = write_spec(tmp_path, {"name": "one", "seeds": [0]})
    assert main(["sweep", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    assert "\n1 run; * marks the baseline" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()
