"""Every variant is evaluated on what the others are, or says why not: an eval length past what a
variant's positions represent is one line at --dry-run and at start (key, length, limit), and the
report marks the missing cell and gives the reason."""
from arch_zoo.cli import main
from arch_zoo.experiment import load
from arch_zoo.reports import load_runs, summarize
from arch_zoo.reports.tables import display
from arch_zoo.training import run_one

from .conftest import BASE, write_spec

LEARNED = {**BASE, "model": {**BASE["model"], "max_seq_len": 64},
           "task": {**BASE["task"], "eval_lengths": [128]},
           "train": {**BASE["train"], "max_steps": 4, "val_every": 4}}
LINE = ("warning: task.eval_lengths: 128 is past what position 'learned' represents (at most 64 positions, "
        "model.max_seq_len 64); val@128 is not evaluated (for position=learned)")


def test_dry_run_and_start_say_it_in_one_line_and_the_report_marks_the_cell(spec_dir, tmp_path, capsys):
    spec = {"name": "len", "grid": {"model.position": ["learned", "rope"]}, "seeds": [0, 1]}
    path = write_spec(spec_dir, spec, LEARNED)
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("val@128 is not evaluated") == 1 and LINE in out.splitlines()
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--workers", "1"]) == 0
    started = capsys.readouterr().out
    assert LINE in started.splitlines()
    table = summarize(load_runs(tmp_path / "o" / "len"))
    shown = display(table).set_index("position")
    assert shown.loc["learned", "val@128/loss"] == "not evaluated"
    assert shown.loc["rope", "val@128/loss"] not in ("", "not evaluated")
    assert any(n.startswith("position=learned: not evaluated (so no mean) at val@128: task.eval_lengths: 128")
               for n in table.attrs["notes"])


def test_a_run_says_it_at_start(tmp_path, capsys):
    cfg = load({**LEARNED, "model": {**LEARNED["model"], "position": "learned"}})
    result = run_one(cfg, tmp_path / "run")
    assert result.status == "completed" and "val@128/loss" not in result.metrics
    err = capsys.readouterr().err
    assert ("arch-zoo: warning: task.eval_lengths: 128 is past what position 'learned' represents (at most 64 "
            "positions, model.max_seq_len 64); val@128 is not evaluated") in err
