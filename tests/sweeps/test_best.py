"""Issue 26 §3: a sweep's runs keep a best checkpoint by the sweep's metric beside last.ckpt, the best
over the whole run even when it was resumed; `generate SWEEP --best` and `restore(SWEEP, best=True)`
load the best run of the sweep at its best checkpoint and say which; `--dry-run` of a sweep that has
run shows what is done and what stage 1 chose.

The sweep ranks by val/loss with goal max, the wrong way round on purpose: loss falls as the runs
train, so each run's best checkpoint is its first validation's, not its last, and which checkpoint
was loaded shows in the weights."""
import csv
import json
import os
import re
import shutil
import signal

import pytest
import pytorch_lightning as pl
import torch

import arch_zoo
from arch_zoo.cli import main
from arch_zoo.generation import generate
from arch_zoo.experiment import load
from arch_zoo.run_names import plain
from arch_zoo.sweeps import load_spec, run_sweep
from arch_zoo.training import run_one
from arch_zoo.training.restore import prompt_ids, restore
from arch_zoo.training.run import RunInterrupted

from .conftest import BASE, write_spec

TRAIN = {**BASE["train"], "max_steps": 10, "val_every": 5}
SPEC = {"name": "best", "grid": {"model.position": ["rope"]}, "seeds": [0],
        "metric": {"name": "val/loss", "goal": "max"},
        "tune": {"key": "train.lr", "values": [1.0e-3, 1.0e-2], "seeds": [9]}}


def validations(run_dir) -> list:
    """(global step, val/loss) of each validation, from metrics.csv."""
    with (run_dir / "metrics.csv").open() as f:
        return [(int(r["step"]), float(r["val/loss"])) for r in csv.DictReader(f) if r.get("val/loss")]


def ckpt(path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("best")
    path = write_spec(tmp / "spec", SPEC, {**BASE, "train": TRAIN})
    outcome = run_sweep(load_spec(path), tmp / "out", log=lambda line: None)
    assert [s["status"] for s in outcome.statuses().values()] == ["completed"] * 3
    return path, outcome.store.root


def test_each_run_keeps_its_best_checkpoint_by_the_sweeps_metric_beside_last(sweep):
    _, root = sweep
    for run_dir in sorted((root / "runs").iterdir()):
        step, value = max(validations(run_dir), key=lambda v: v[1])  # goal max
        kept = json.loads((run_dir / "summary.json").read_text())["best_checkpoint"]
        assert (kept["metric"], kept["goal"], kept["step"], kept["path"]) == \
            ("val/loss", "max", step, "checkpoints/best.ckpt"), run_dir.name
        assert kept["value"] == pytest.approx(value, rel=1e-6)
        best, last = ckpt(run_dir / "checkpoints" / "best.ckpt"), ckpt(run_dir / "checkpoints" / "last.ckpt")
        assert (best["global_step"], last["global_step"]) == (step, 10) and "optimizer_states" not in best
        assert any(not torch.equal(best["state_dict"][k], last["state_dict"][k]) for k in best["state_dict"])


def test_generate_and_restore_with_best_load_the_best_run_at_its_best_checkpoint(sweep, capsys):
    _, root = sweep
    scores = {d: max(v for _, v in validations(d)) for d in sorted((root / "runs").iterdir())}
    chosen = max(scores, key=scores.get)
    want = ckpt(chosen / "checkpoints" / "best.ckpt")["state_dict"]

    cfg, model, tokenizer = arch_zoo.restore(root, best=True)
    got = model.state_dict()
    assert all(torch.equal(got[k.removeprefix("model.")], v) for k, v in want.items())

    capsys.readouterr()
    assert main(["generate", str(root), "--best", "--prompt", "def", "--max-new-tokens", "12"]) == 0
    out, err = capsys.readouterr()
    cfg, model, tokenizer = restore(chosen / "checkpoints" / "best.ckpt")
    ids = prompt_ids(cfg, tokenizer, "def")
    expected = generate(model, [ids], max_new_tokens=12, eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id)
    assert out == tokenizer.decode(expected.to_lists()[0][0]) + "\n"
    assert err.startswith(f"arch-zoo: --best: the best run of 3 completed runs by val/loss (max) is {chosen.name}: "
                          f"val/loss {scores[chosen]:.4f} at step 5 (its best checkpoint)"), err


def test_export_with_best_writes_the_best_run_at_its_best_checkpoint(sweep, tmp_path, capsys):
    """``export SWEEP --best --to hf``: the directory holds the best checkpoint's weights (step 5 here),
    which differ from the same run's last.ckpt, and says which run and checkpoint it came from."""
    pytest.importorskip("transformers")
    from arch_zoo.interop import load_hf_checkpoint

    _, root = sweep
    scores = {d: max(v for _, v in validations(d)) for d in sorted((root / "runs").iterdir())}
    chosen = max(scores, key=scores.get)
    best, last = (ckpt(chosen / "checkpoints" / name)["state_dict"] for name in ("best.ckpt", "last.ckpt"))
    capsys.readouterr()
    assert main(["export", str(root), "--best", "--to", "hf", "--out", str(tmp_path / "hf")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"exported {chosen / 'checkpoints' / 'best.ckpt'} to {tmp_path / 'hf'}: written as "), out
    got = load_hf_checkpoint(tmp_path / "hf").state_dict()
    assert set(got) == {k.removeprefix("model.") for k in best}
    assert all(torch.equal(got[k.removeprefix("model.")], v) for k, v in best.items())
    assert any(not torch.equal(got[k.removeprefix("model.")], v) for k, v in last.items())
    card = (tmp_path / "hf" / "README.md").read_text()
    assert f"run: `{chosen.name}`" in card
    # the card names the exported checkpoint and why it was chosen, not only the run's final metrics
    assert (f"- weights: checkpoint `best.ckpt`, the best of {len(scores)} completed runs of the sweep by val/loss "
            f"(max): {scores[chosen]:.6g} at step 5") in card, card


def test_dry_run_of_a_sweep_that_has_run_shows_what_is_done_and_what_stage_1_chose(sweep, tmp_path, capsys):
    path, root = sweep
    finals = {}
    for d in (root / "runs").iterdir():
        run = json.loads((d / "run.json").read_text())
        if run["tune"]["stage"] == "tune":
            finals[run["tune"]["value"]] = json.loads((d / "summary.json").read_text())["final"]["val/loss"]
    lr = min(finals, key=finals.get)  # tune.select: val/loss, min

    def dry_run(out):
        capsys.readouterr()
        before = sorted((str(p), p.stat().st_mtime_ns) for p in out.rglob("*"))
        assert main(["sweep", str(path), "--dry-run", "--out", str(out)]) == 0
        assert sorted((str(p), p.stat().st_mtime_ns) for p in out.rglob("*")) == before  # nothing written
        return capsys.readouterr().out

    text = dry_run(root.parent)
    assert f"stage 1: position=rope chose train.lr={plain(lr)} (val/loss {finals[lr]:.4f})" in text, text
    rows = [line for line in text.splitlines() if line.startswith("position=rope,")]
    assert len(rows) == 3 and all("completed" in row.split() for row in rows), text
    for value, loss in finals.items():  # each stage-1 run's status and metric
        assert any(row.startswith(f"position=rope,lr={plain(value)} ") and f" {loss:.4f} " in row for row in rows)
    assert re.search(rf"^position=rope,lr={re.escape(plain(lr))} \*\s+0\s+completed", text, re.M)  # stage 2's run
    assert "chosen after stage 1" not in text
    assert f"done in {root}: 3 completed (of 3 runs)" in text and "2 runs in stage 1, 1 run in stage 2" in text

    partial = tmp_path / "out"
    shutil.copytree(root, partial / "best")
    stage_one = next(d for d in (partial / "best" / "runs").iterdir()
                     if json.loads((d / "run.json").read_text())["tune"]["stage"] == "tune")
    for name in ("status.json", "summary.json"):
        (stage_one / name).unlink()
    text = dry_run(partial)
    assert "stage 1 has 1 run to finish before stage 2 is planned" in text and "chosen after stage 1" in text, text
    assert f"done in {partial / 'best'}: " in text and "1 pending" in text


class TermAtValidation(pl.Callback):
    """A real SIGTERM to this process during the validation at ``step``."""

    def __init__(self, step):
        self.step = step

    def on_validation_batch_start(self, trainer, *args):
        if trainer.global_step == self.step:
            self.step = None
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_resumed_run_keeps_the_best_of_the_whole_run_even_from_another_directory(tmp_path):
    """Stopped at its first validation (then the best by goal max) and resumed after its run dir
    moved: the later, lower losses must not replace the best, as they would if the resumed run had
    forgotten it, or if last.ckpt had been written before the best was updated."""
    cfg = load({**BASE, "train": {**TRAIN, "max_steps": 20}})
    with pytest.raises(RunInterrupted):
        run_one(cfg, tmp_path / "a", callbacks=[TermAtValidation(5)], quiet=True, best=("val/loss", "max"))
    shutil.move(tmp_path / "a", tmp_path / "b")
    assert run_one(cfg, tmp_path / "b", quiet=True, best=("val/loss", "max")).status == "completed"
    seen = validations(tmp_path / "b")
    step, value = max(seen, key=lambda v: v[1])
    assert [s for s, _ in seen] == [5, 10, 15, 20] and step == 5  # the losses fell after the resume
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["resumed_from_step"] == 5 and summary["best_checkpoint"]["step"] == 5
    assert summary["best_checkpoint"]["value"] == pytest.approx(value, rel=1e-6)
    assert ckpt(tmp_path / "b" / "checkpoints" / "best.ckpt")["global_step"] == 5
