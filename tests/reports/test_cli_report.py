"""`arch-zoo report` and `arch-zoo compare`: what they write and print, and bad input → one line, exit 2."""
import re

import pytest

from arch_zoo.cli import main
from arch_zoo.reports import terminal_table
from tests.reports.sweeps import write_sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return write_sweep(tmp_path_factory.mktemp("s") / "pos",
                       status={("rope", 2): ("failed", "CUDA out of memory"), ("alibi", 1): ("running", None)})


def test_report_writes_every_format_under_reports_name(sweep, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(sweep), "--format", "md,csv,tex,parquet"]) == 0
    out = capsys.readouterr().out
    written = sorted(p.name for p in (tmp_path / "reports" / "pos").iterdir())
    assert written == ["report.md", "runs.csv", "runs.parquet", "table.tex", "variants.csv", "variants.parquet"]
    assert out.startswith("pos: variants ranked by val/loss (min)")
    assert "reports/pos/" in out.splitlines()[-1]
    # the partial sweep says what is missing
    assert "running: position=alibi seed 1" in out and "failed: position=rope seed 2 (CUDA out of memory)" in out
    assert "3/4 (1 failed)" in out and "3/4 (1 running)" in out


def test_report_metric_and_baseline_options(sweep, tmp_path, capsys):
    assert main(["report", str(sweep), "--out", str(tmp_path / "r"), "--format", "csv",
                 "--metric", "val/token_accuracy", "--baseline", "position=rope"]) == 0
    out = capsys.readouterr().out
    assert "ranked by val/token_accuracy (max)" in out
    assert "model.position=rope" in out and "baseline" in out
    assert (tmp_path / "r" / "variants.csv").exists() and not (tmp_path / "r" / "report.md").exists()


def test_terminal_table_for_the_sweep_command(sweep):
    text = terminal_table(sweep)
    lines = text.splitlines()
    assert lines[0] == "pos: variants ranked by val/loss (min)"
    ranked = [line.split()[1] for line in lines[3:6]]
    assert ranked == ["rope", "alibi", "sinusoidal"]  # by mean final val/loss, lowest first
    assert "baseline" in lines[5] and "Δ vs baseline" in lines[1]


def test_compare_sweeps_and_run_dirs(sweep, tmp_path, capsys):
    other = write_sweep(tmp_path / "other", {"rope": [1.5, 1.6, 1.55, 1.52]}, status={}, name="other",
                        baseline={"model.position": "rope"})
    loose = other / "runs" / "rope-s0"
    assert main(["compare", str(sweep), str(other), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pos+other: variants ranked by val/loss (min)")
    assert "position=rope" in out and "7/8 (1 failed)" in out  # the same setting from both sweeps pools
    assert (tmp_path / "cmp" / "report.html").exists()
    assert main(["compare", str(sweep / "runs" / "rope-s0"), str(loose), "--metric", "val/loss"]) == 0
    assert "2/2" in capsys.readouterr().out


def _bad_inputs(sweep, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    return {
        "not a sweep": (["report", str(empty)], r"is not a sweep directory .* nor a run directory"),
        "missing dir": (["report", str(tmp_path / "nope")], r"nope does not exist"),
        "unknown metric": (["report", str(sweep), "--metric", "val/los"],
                           r"metric: 'val/los' was logged by no run \(did you mean 'val/loss'\?\); logged metrics: "
                           r"test/loss, val/loss, val/token_accuracy, val@256/loss, val@512/loss$"),
        "baseline value": (["report", str(sweep), "--baseline", "model.position=nope"],
                           r"baseline: model.position=nope matches no variant; variants: position=sinusoidal; "
                           r"position=rope; position=alibi"),
        "baseline key": (["report", str(sweep), "--baseline", "norm=rmsnorm"],
                         r"'norm' is not a varied setting; varied settings: model.position"),
        "baseline form": (["report", str(sweep), "--baseline", "rope"], r"'rope' is not KEY=VALUE"),
        "format": (["report", str(sweep), "--format", "md,xlsx"], r"unknown format 'xlsx'; choices: md, csv"),
        "compare": (["compare", str(sweep), str(empty), "--metric", "val/loss"], r"empty is not a sweep directory"),
        "compare metric": (["compare", str(sweep), "--metric", "bleu"], r"'bleu' was logged by no run"),
    }


@pytest.mark.parametrize("case", ["not a sweep", "missing dir", "unknown metric", "baseline value", "baseline key",
                                  "baseline form", "format", "compare", "compare metric"])
def test_bad_input_is_one_line_exit_2(case, sweep, tmp_path, capsys):
    argv, pattern = _bad_inputs(sweep, tmp_path)[case]
    assert main(argv + ["--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("arch-zoo: error: "), captured.err
    assert re.search(pattern, captured.err), captured.err
    assert not (tmp_path / "out").exists()  # nothing written on bad input


def test_reports_import_without_torch():
    """`arch-zoo report` on a laptop without the training stack loaded: no torch, Lightning or wandb."""
    import subprocess
    import sys

    code = ("import sys, arch_zoo.reports, arch_zoo.reports.plots, arch_zoo.reports.html\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'pytorch_lightning', 'wandb'}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
