"""Every sweep spec the repository ships (sweeps/, sweeps/studies/) plans: `--dry-run` exits 0 and
lists its runs, so a study that `make studies` runs cannot break unnoticed."""
from pathlib import Path

import pytest

from arch_zoo.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted([*(ROOT / "sweeps").glob("*.yaml"), *(ROOT / "sweeps" / "studies").glob("*.yaml")])


def test_the_shipped_specs_are_found():
    assert {p.stem for p in SPECS} >= {"quickstart", "scan", "heads_tuned", "heads_tuned_halving"}


@pytest.mark.parametrize("path", SPECS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_shipped_spec_plans(path, tmp_path, capsys, monkeypatch):
    from arch_zoo.sweeps import probe

    # the estimate's arithmetic is tests/sweeps/test_dry_run_estimate.py's; timing every study's models here
    # would make this test minutes long
    monkeypatch.setattr(probe, "step_seconds", lambda cfg, data, timed=probe.TIMED_STEPS: 0.01)
    monkeypatch.setattr(probe, "overhead", lambda cfg, per_step, steps=probe.CALIBRATION_STEPS: probe.Overhead())
    assert main(["sweep", str(path), "--dry-run", "--estimate", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "nothing was trained (--dry-run)" in out and not (tmp_path / "out").exists()
    assert "estimated wall time: " in out
