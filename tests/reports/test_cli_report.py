"""`arch-zoo report` and `arch-zoo compare`: what they write and print, and bad input → one line, exit 2."""
import csv
import json
import re
import shutil

import pandas as pd
import pytest
import yaml

from arch_zoo.cli import main
from arch_zoo.errors import ConfigError
from arch_zoo.reports import load_runs, terminal_table
from tests.reports.sweeps import LOSS, config, write_run, write_sweep


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
                        baseline={"model.position": "rope"}, seeds=(4, 5, 6, 7))
    loose = other / "runs" / "rope-s4"
    assert main(["compare", str(sweep), str(other), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pos+other: variants ranked by val/loss (min)")
    assert "position=rope" in out and "7/8 (1 failed)" in out  # other seeds of the same setting pool
    assert (tmp_path / "cmp" / "report.html").exists()
    assert main(["compare", str(sweep / "runs" / "rope-s0"), str(loose), "--metric", "val/loss"]) == 0
    assert "2/2" in capsys.readouterr().out


def test_compare_counts_a_run_given_twice_once(sweep, capsys):
    """README: runs are identified by config and seed; a duplicate is dropped with a note."""
    assert main(["compare", str(sweep), str(sweep / "runs" / "rope-s0")]) == 0
    out = capsys.readouterr().out
    rope = next(line for line in out.splitlines() if " rope " in f" {line} ")
    assert "3/4 (1 failed)" in rope  # not 4/5: seed 0 once
    notes = [line for line in out.splitlines() if line.startswith("dropped 1 duplicate run")]
    assert len(notes) == 1 and notes[0].endswith("rope-s0 (given twice)")


def test_two_different_runs_as_one_variant_and_seed_are_an_error(sweep, tmp_path, capsys):
    """README: two different runs with the same variant and seed are an error, not two samples."""
    store = tmp_path / "pos"
    shutil.copytree(sweep, store)
    (store / "index.csv").unlink()  # a store of run dirs without a plan: every run dir in it is read
    extra = store / "runs" / "rope-s0-again"  # e.g. a run dir copied in from another sweep
    shutil.copytree(store / "runs" / "rope-s0", extra)
    cfg = yaml.safe_load((extra / "config.yaml").read_text())
    cfg["train"]["max_steps"] = 31
    (extra / "config.yaml").write_text(yaml.safe_dump(cfg))
    meta = json.loads((extra / "run.json").read_text())
    (extra / "run.json").write_text(json.dumps({**meta, "run_id": extra.name}))
    assert main(["report", str(store), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "are different runs (train.max_steps: 30 vs 31)" in err, err
    assert "same variant 'position=rope' and seed 0" in err


def test_run_dirs_of_an_earlier_spec_are_left_out_of_the_report_with_a_note(sweep, tmp_path, capsys):
    """A value removed from an axis leaves its run dirs in the store; the sweep's index.csv (its plan
    as last run) no longer lists them, and the report neither ranks them nor counts them in Holm."""
    store = tmp_path / "pos"
    shutil.copytree(sweep, store)
    with (store / "index.csv").open() as f:
        rows = list(csv.DictReader(f))
    kept = [r for r in rows if "alibi" not in r["variant"]]
    with (store / "index.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(kept)
    assert main(["report", str(store), "--out", str(tmp_path / "r"), "--baseline", "model.position=sinusoidal"]) == 0
    out = capsys.readouterr().out
    assert "alibi" not in out.split("\n\n")[0].split("Δ = variant")[0], out
    assert "pos: 4 run dirs under runs/ not in the sweep's current plan (index.csv) left out" in out
    table = pd.read_csv(tmp_path / "r" / "variants.csv")
    rope = table[table["variant"].astype(str).str.contains("rope")].iloc[0]
    assert set(table["variant"].astype(str)) == {"position=rope", "position=sinusoidal"}
    assert rope["val/loss p_holm"] == pytest.approx(rope["val/loss p"])  # one test in the family, not two


def test_compare_groups_runs_by_task_one_table_each(sweep, tmp_path, capsys):
    """README: runs of different tasks or evaluations are never ranked together: one table per task."""
    copy_run = tmp_path / "copy_run"
    write_run(copy_run, status="completed", settings={}, seed=0, variant="", final={"val/loss": 0.01},
              cfg={**config("sinusoidal", 0), "task": {"name": "copy", "max_len": 10}})
    (copy_run / "run.json").unlink()
    assert main(["compare", str(sweep), str(copy_run), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    titles = [line for line in out.splitlines() if "variants ranked by" in line]
    assert titles == ["pos, task char_lm: variants ranked by val/loss (min)",
                      "copy_run, task copy: variants ranked by val/loss (min)"]  # named for its own runs
    char_lm = out[:out.index(titles[1])]
    assert "0.0100" not in char_lm and "3/4" in char_lm  # the copy run's loss is not ranked among char_lm's
    md = (tmp_path / "cmp" / "report.md").read_text()
    assert "## Task: char_lm" in md and "## Task: copy" in md
    assert (tmp_path / "cmp" / "char_lm" / "report.html").exists() and (tmp_path / "cmp" / "copy" / "runs.csv").exists()
    with pytest.raises(ConfigError, match="different tasks or evaluations"):
        load_runs([sweep, copy_run])


def test_a_run_from_before_a_config_field_existed_compares_with_one_from_after(tmp_path, capsys):
    """A run's config.yaml lacks the fields its arch_zoo did not have yet (here task.windows and
    task.scored, written out in full by today's runs): read at their defaults, which keep the
    behaviour it had, the two runs are one task and rank in one table."""
    from arch_zoo.config.loading import to_yaml
    from arch_zoo.experiment import load

    old_cfg = config("sinusoidal", 0)
    new_cfg = yaml.safe_load(to_yaml(load(config("rope", 0))))  # as a run saves it today: every field
    assert new_cfg["task"]["windows"] == "stream" and "windows" not in old_cfg["task"]
    write_run(tmp_path / "old", status="completed", settings={}, seed=0, variant="", final={"val/loss": 2.0},
              cfg=old_cfg)
    write_run(tmp_path / "new", status="completed", settings={}, seed=0, variant="", final={"val/loss": 1.9},
              cfg=new_cfg)
    for run in ("old", "new"):
        (tmp_path / run / "run.json").unlink()
    frame = load_runs([tmp_path / "old", tmp_path / "new"])  # raises for runs of different tasks
    assert len(frame) == 2
    assert main(["compare", str(tmp_path / "old"), str(tmp_path / "new"), "--out", str(tmp_path / "cmp")]) == 0
    titles = [line for line in capsys.readouterr().out.splitlines() if "variants ranked by" in line]
    assert len(titles) == 1
    # and task.windows differing for real still splits them
    write_run(tmp_path / "docs", status="completed", settings={}, seed=0, variant="", final={"val/loss": 1.8},
              cfg={**old_cfg, "task": {**old_cfg["task"], "windows": "documents"}})
    (tmp_path / "docs" / "run.json").unlink()
    with pytest.raises(ConfigError, match="task.windows"):
        load_runs([tmp_path / "old", tmp_path / "docs"])


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


def test_compare_of_sweeps_with_different_budgets_says_they_are_not_matched(sweep, tmp_path, capsys):
    """Each sweep matched its budget within itself; ranked together, runs of 6x fewer tokens are not
    a controlled comparison, and the note says so rather than claiming a match."""
    other = tmp_path / "short" / "pos"
    shutil.copytree(sweep, other)
    for root, tokens in ((sweep, 30 * 4096), (other, 5 * 4096)):
        for meta in (root / "runs").glob("*/run.json"):
            record = json.loads(meta.read_text())
            meta.write_text(json.dumps({**record, "budget": {"match": "tokens", "steps": 30, "tokens": tokens}}))
            if root == other:  # the same sweep name, rerun shorter (another config: not a duplicate)
                cfg = yaml.safe_load((meta.parent / "config.yaml").read_text())
                cfg["train"]["max_steps"] = 5
                (meta.parent / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["compare", str(sweep), str(other), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "budget: not matched across these inputs: completed runs trained on 20,480 to 122,880 tokens" in out
    assert "budget: matched tokens" not in out
    capsys.readouterr()
    assert main(["report", str(sweep), "--out", str(tmp_path / "one")]) == 0
    assert "budget: matched tokens (the sweep's budget.match)" in capsys.readouterr().out


def test_make_demo_says_the_few_seeds_warning_once_with_what_to_do(tmp_path, capsys, monkeypatch):
    """`make demo` runs the quickstart sweep, whose end prints the comparison table (sweeps/cli_support
    final_table: terminal_table of its store), then the Makefile's `arch-zoo report` line. On the
    quickstart's seeds, fewer than 3, the warning is said once, naming every variant and the seeds to add."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = yaml.safe_load((root / "sweeps" / "quickstart.yaml").read_text())
    recipe = (root / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    report = next(line for line in recipe.splitlines() if "arch-zoo report " in line).split("arch-zoo ", 1)[1]
    values = spec["grid"]["model.position"]
    store = write_sweep(tmp_path / "runs" / "sweeps" / "quickstart", dict(zip(values, LOSS.values())),
                        name="quickstart", seeds=tuple(spec["seeds"]), status={},
                        baseline={"model.position": spec["baseline"]["model.position"]})
    monkeypatch.chdir(tmp_path)
    printed = terminal_table(store)
    assert main(report.split()) == 0
    printed += capsys.readouterr().out
    warnings = [line for line in printed.splitlines() if "warning" in line]
    if len(spec["seeds"]) >= 3:
        assert warnings == []
        return
    assert len(warnings) == 1, printed
    assert all(f"position={v}" in warnings[0] for v in values)
    assert f"seeds: [{', '.join(map(str, range(3)))}]" in warnings[0] and "rerun the same `arch-zoo sweep`" in warnings[0]

