"""`arch-zoo train` shows its progress as it trains (step / max, loss, tokens/s, ETA): redrawn in place
on a terminal (a pty here), plain lines elsewhere; the numbers are those the run records."""
import csv
import json
import re

import pytest
import yaml

from arch_zoo import progress
from arch_zoo.cli import main
from tests.sweeps.conftest import BASE
from tests.test_progress import _pty_stream, screen, screen_of

STEPS = 10
LINE = re.compile(r"^tiny  step (\d+)/(\d+)(?:  loss ([\d.]+))?(?:  ([\d,]+) tok/s)?(?:  ETA (\S+))?$")


@pytest.fixture
def config(tmp_path):
    base = {**BASE, "train": {**BASE["train"], "max_steps": STEPS, "progress_bar": True}}
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


def recorded(run_dir):
    """(steps, the last training loss metrics.csv logged, tokens/s) as the run recorded them."""
    summary = json.loads((run_dir / "summary.json").read_text())
    with (run_dir / "metrics.csv").open() as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    return summary["step"], losses[-1], summary["train_tokens_per_s"]


def expected_last_line(run_dir) -> str:
    steps, loss, rate = recorded(run_dir)
    return f"tiny  step {steps}/{STEPS}  loss {loss:.4f}  {rate:,.0f} tok/s  ETA 0:00"


def test_train_prints_plain_progress_lines_when_stdout_is_no_terminal(config, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress, "FIRST_S", 0.0)  # a line for every record: a tiny run is over in seconds
    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    run_dir = tmp_path / "run"
    assert main(["train", str(config), "--out", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out  # a log gets lines, not a redrawn bar
    lines = [line for line in out.splitlines() if line.startswith("tiny  step")]
    assert lines and all(LINE.match(line) for line in lines)
    steps = [int(LINE.match(line).group(1)) for line in lines]
    assert steps == sorted(steps) and steps[0] >= 1
    assert lines[-1] == expected_last_line(run_dir)
    record = json.loads((run_dir / "progress.json").read_text())
    assert (record["step"], record["max_steps"]) == (STEPS, STEPS)


def test_train_redraws_one_progress_line_in_place_on_a_terminal(config, tmp_path, monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    stream, got, reader = _pty_stream()
    monkeypatch.setattr("sys.stdout", stream)
    run_dir = tmp_path / "run"
    assert main(["train", str(config), "--out", str(run_dir)]) == 0
    shown = screen_of(stream, got)
    stream.close()
    reader.join(timeout=5)
    raw = b"".join(got).decode()
    drawn = [line for line in re.split(r"\r?\n|\x1b\[\d*[FJ]", raw) if line.startswith("tiny  step")]
    assert drawn and drawn[-1] == expected_last_line(run_dir)
    assert raw.count("\x1b[1F\x1b[J") == len(drawn)  # each line erased before the next: one line stands at a time
    assert not any(line.startswith("tiny  step") for line in shown)  # gone once the summary comes
    assert any(line.startswith(f"run {run_dir}") and "status: completed" in line for line in shown)
    assert screen(raw) == shown
