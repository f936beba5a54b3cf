"""A sweep shows each run its workers have in hand as it trains (sweeps/live.py), from the progress
record the run keeps in its run dir; a record left by an earlier attempt is not shown as this one's."""
import json
import re
import time

from arch_zoo import progress
from arch_zoo.progress import LiveLines, progress_line
from arch_zoo.rundir import PROGRESS
from arch_zoo.sweeps import run_sweep
from arch_zoo.sweeps import local
from arch_zoo.sweeps.live import SweepProgress
from arch_zoo.sweeps.worker import Task

from .conftest import BASE, write_spec

STEPS = 100


def test_a_sweep_shows_its_runs_in_progress_between_the_lines_of_those_that_ended(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress, "FIRST_S", 0.0)  # every tick's lines (not a terminal: plain lines)
    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    monkeypatch.setattr(local, "TICK_S", 0.05)
    base = {**BASE, "train": {**BASE["train"], "max_steps": STEPS, "val_every": STEPS}}
    spec = write_spec(tmp_path / "specs", {"name": "live", "grid": {"model.position": ["rope", "alibi"]}}, base)
    outcome = run_sweep(spec, tmp_path / "out", workers=1, progress=True)
    out = capsys.readouterr().out
    assert "\x1b" not in out
    lines = out.splitlines()
    for i, position in enumerate(["rope", "alibi"]):
        label = f"position={position} s0"
        end = next(n for n, line in enumerate(lines) if re.match(rf"\[\d/2\] {re.escape(label)}: completed", line))
        live = [n for n, line in enumerate(lines) if line.startswith(f"{label}  step ")]
        assert live and max(live) < end  # shown while it trained, not after its end
        for n in live:
            step, target = map(int, re.match(rf"{re.escape(label)}  step (\d+)/(\d+)", lines[n]).groups())
            assert 1 <= step <= target == STEPS
    run = outcome.plan.runs[0]
    record = json.loads((outcome.store.run_dir(run.run_id) / PROGRESS).read_text())
    assert record["step"] == STEPS


def test_a_record_from_before_the_run_was_handed_out_is_not_shown(tmp_path):
    """A resumed run's (or a halving run's next rung's) run dir holds the record its last attempt left."""
    shown = []

    class Lines(LiveLines):
        def show(self, runs):
            shown.append({k: progress_line(label, r) for k, (label, r) in runs.items()})

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    old = {"step": 40, "max_steps": 100, "loss": 2.5, "tokens_per_s": 900.0, "eta_s": 60.0, "updated": time.time() - 5}
    (run_dir / PROGRESS).write_text(json.dumps(old))
    live = SweepProgress(Lines(terminal=False), label=lambda run_id: f"label of {run_id}")
    task = Task("r1", str(run_dir), None, str(tmp_path))
    live.tick([task])
    assert shown[-1] == {}
    new = {**old, "step": 41, "updated": time.time()}
    (run_dir / PROGRESS).write_text(json.dumps(new))
    live.tick([task])
    assert shown[-1] == {"r1": "label of r1  step 41/100  loss 2.5000  900 tok/s  ETA 1:00"}
    live.tick([])  # handed back or ended: gone
    assert shown[-1] == {}


def test_on_a_terminal_the_sweep_redraws_its_runs_in_place_and_leaves_only_their_end_lines(tmp_path, monkeypatch):
    from tests.test_progress import _pty_stream, screen, screen_of

    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(local, "TICK_S", 0.05)
    stream, got, reader = _pty_stream()
    monkeypatch.setattr("sys.stdout", stream)
    base = {**BASE, "train": {**BASE["train"], "max_steps": STEPS, "val_every": STEPS}}
    spec = write_spec(tmp_path / "specs", {"name": "live", "grid": {"model.position": ["rope", "alibi"]}}, base)
    run_sweep(spec, tmp_path / "out", workers=1, progress=True)
    shown = screen_of(stream, got)
    stream.close()
    reader.join(timeout=5)
    raw = b"".join(got).decode()
    drawn = [line for line in re.split(r"\r?\n|\x1b\[\d*[FJ]", raw) if re.match(r"position=\w+ s0  step \d+/", line)]
    assert {line.split()[0] for line in drawn} == {"position=rope", "position=alibi"}  # each run, as it trained
    assert "\x1b[1F\x1b[J" in raw  # redrawn in place
    assert not any("  step " in line for line in shown)  # once the sweep ends, only the lines for good stay
    ends = [line for line in re.split(r"\r?\n|\x1b\[\d*[FJ]", raw) if re.match(r"\[\d/2\]", line)]
    assert len(ends) == 2 and [line for line in shown if re.match(r"\[\d/2\]", line)] == ends
    assert screen(raw) == shown
