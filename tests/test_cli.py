import subprocess
import sys
from pathlib import Path

import pytest

from arch_zoo.cli import main
from tests.test_config import ERRORS

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "configs" / "models").glob("*.yaml"))


def test_components_lists_every_registered_choice(capsys):
    from arch_zoo.registry import all_registries

    assert main(["components"]) == 0
    out = capsys.readouterr().out
    for registry in all_registries().values():
        for name in registry.choices():
            assert f"  {name} " in out


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_describe_every_shipped_model_config(path, capsys):
    assert main(["describe", str(path)]) == 0
    out = capsys.readouterr().out
    assert "parameters" in out and "forward FLOPs" in out and "position" in out


def test_describe_parameter_total_matches_the_model(capsys):
    from arch_zoo.config import load
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
                                   "choices: layernorm, rmsnorm")


def test_unknown_command_exits_2(capsys):
    assert main(["fly"]) == 2
    assert "invalid choice" in capsys.readouterr().err
