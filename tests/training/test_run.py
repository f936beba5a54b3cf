"""End-to-end training runs. They must show that learning happens, not only that code runs."""
import csv
import json
import math
import time
from collections import Counter

import pytest

from arch_zoo.experiment import load
from arch_zoo.rundir import CHECKPOINT
from arch_zoo.training import run_one

TINY_DECODER = {"kind": "decoder", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "max_seq_len": 32,
                "position": "rope"}
QUIET = {"progress_bar": False, "log_every": 5}


def cfg(model=None, task=None, train=None, **top):
    data = {"name": "t", "seed": 0, "model": model or dict(TINY_DECODER),
            "task": task or {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
            "train": {**QUIET, "max_steps": 20, "batch_size": 8, "val_every": 10, "val_batches": 2, **(train or {})}}
    data.update(top)
    return load(data)


@pytest.mark.outcome
def test_copy_task_reaches_perfect_exact_match_on_held_out_sequences(tmp_path):
    """The copy task is learned: every held-out val sequence and >= 95% of test, greedily decoded.

    The shipped schedule decays the learning rate to zero (cosine); under the paper's Noam schedule,
    still at 40% of its peak at step 400, a model stopped there missed 1-6 of 128 sequences with
    repeated symbols on some CPU kernels, thread counts and seeds. Decayed, it gets every val and test
    sequence right under the default and avx2 kernels, seeds 0-4, and at 2 threads."""
    c = load("configs/experiments/copy.yaml", [
        "task.max_len=5", "task.n_symbols=8", "task.n_train=4000", "task.n_val=128", "task.n_test=128",
        "train.max_steps=400", "train.val_every=200", "train.progress_bar=false"])
    assert c.train.schedule.name == "cosine" and c.train.min_lr_ratio == 0.0  # the shipped schedule ends at zero
    result = run_one(c, tmp_path / "copy", quiet=True)
    assert result.status == "completed"
    assert result.metrics["val/exact_match"] == 1.0  # every held-out sequence, greedily
    assert result.metrics["test/exact_match"] >= 0.95
    samples = result.summary["samples"]  # the first 5 held-out greedy decodings, then up to 5 failures
    assert 5 <= len(samples) <= 10 and all(not s["exact"] for s in samples[5:])
    assert all(s["greedy"] == s["target"] for s in samples if s["exact"])
    assert sum(s["exact"] for s in samples) >= 4 and len({s["prompt"] for s in samples}) > 1


@pytest.mark.slow
@pytest.mark.outcome
def test_the_shipped_copy_experiment_copies_at_least_99_percent_of_test_sequences(tmp_path):
    """docs/studies/copy.md's claim for `arch-zoo train configs/experiments/copy.yaml` as shipped: at
    least 0.99 test exact match (254 of 256) on any thread count and CPU kernel; the runs behind the
    page got 1.0 at 1 and 2 threads, native and avx2 (1-3 min a run, so CI runs the smaller copy above)."""
    c = load("configs/experiments/copy.yaml", ["train.progress_bar=false"])
    result = run_one(c, tmp_path / "copy", quiet=True)
    assert result.metrics["val/exact_match"] >= 0.99 and result.metrics["test/exact_match"] >= 0.99


@pytest.mark.outcome
def test_char_lm_learns_well_below_the_unigram_entropy(tmp_path):
    c = cfg(task={"name": "char_lm", "max_chars": 200000, "seq_len": 64},
            model={**TINY_DECODER, "d_model": 64, "max_seq_len": 64},
            train={"max_steps": 150, "batch_size": 16, "lr": 3e-3, "val_every": 150, "val_batches": 8})
    result = run_one(c, tmp_path / "lm", quiet=True)
    from arch_zoo.data.tasks import TASKS

    data = TASKS.build(c.task, c.seed, "decoder", 64).build()
    counts = Counter(t for e in data.splits["train"] for t in e.input_ids)
    total = sum(counts.values())
    entropy = -sum(n / total * math.log(n / total) for n in counts.values())  # nats per token
    assert result.metrics["val/loss"] < entropy - 0.5, (result.metrics["val/loss"], entropy)
    assert 0 < result.metrics["val/bpc"] < entropy / math.log(2)


def test_run_dir_holds_everything_a_report_needs(tmp_path):
    out = tmp_path / "run"
    run_one(cfg(), out, quiet=True)
    for name in ("config.yaml", "status.json", "metrics.csv", "summary.json", "tokenizer.json", CHECKPOINT):
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())
    for key in ("final", "best", "parameters", "flops_per_token", "train_tokens_per_s", "peak_memory_mb",
                "wall_time_s", "status", "versions", "git_commit", "task"):
        assert key in summary, key
    assert summary["task"]["sha256"] and summary["train_tokens_per_s"] > 0
    # MFU: achieved training FLOPs/s over the device's peak (on CPU a GEMM probe, cached per machine)
    assert 0 < summary["mfu"] < 1 and summary["peak_flops"] > 0 and "CPU GEMM probe" in summary["peak_source"]
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert any(r.get("train/loss") for r in rows) and any(r.get("val/loss") for r in rows)
    assert load(out / "config.yaml") == cfg()  # the saved config is the one that ran
    again = run_one(cfg(), out, quiet=True)  # a completed run is not trained again
    assert again.skipped and again.status == "completed"


def test_same_seed_same_metrics_other_seed_other_metrics(tmp_path):
    a = run_one(cfg(), tmp_path / "a", quiet=True).metrics
    b = run_one(cfg(), tmp_path / "b", quiet=True).metrics
    c = run_one(cfg(seed=1), tmp_path / "c", quiet=True).metrics
    assert a == b
    assert a["val/loss"] != c["val/loss"]


class Crash:
    """Simulates a crash right after the checkpoint at ``step`` is written."""

    def __init__(self, step):
        import pytorch_lightning as pl

        class _Crash(pl.Callback):
            def on_train_batch_end(cb, trainer, *args):
                if trainer.global_step == step:
                    raise RuntimeError("simulated crash")

        self.callback = _Crash()


def test_resume_gives_the_same_final_metrics_as_an_uninterrupted_run(tmp_path):
    c = cfg(train={"max_steps": 30, "val_every": 10}, model={**TINY_DECODER, "dropout": 0.1})
    whole = run_one(c, tmp_path / "whole", quiet=True)
    crashed = run_one(c, tmp_path / "resumed", callbacks=[Crash(23).callback], quiet=True)
    assert crashed.status == "failed" and "simulated crash" in crashed.reason
    assert (tmp_path / "resumed" / CHECKPOINT).exists()
    resumed = run_one(c, tmp_path / "resumed", quiet=True)
    assert resumed.status == "completed" and resumed.summary["resumed_from_step"] == 20
    for k, v in whole.metrics.items():
        assert resumed.metrics[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
    steps = [int(r["step"]) for r in csv.DictReader((tmp_path / "resumed" / "metrics.csv").open())
             if r.get("train/loss")]
    assert len(steps) == len(set(steps))  # no step logged twice across the crash


def test_a_diverging_run_stops_with_status_diverged_and_its_step(tmp_path):
    c = cfg(train={"lr": 1e6, "grad_clip": None, "max_steps": 40, "optimizer": "sgd", "momentum": 0.0})
    result = run_one(c, tmp_path / "div", quiet=True)
    assert result.status == "diverged"
    assert result.summary["diverged_at"] is not None and result.summary["diverged_at"] < 40
    status = json.loads((tmp_path / "div" / "status.json").read_text())
    assert status["status"] == "diverged" and "step" in status["reason"]


def test_other_objectives_train(tmp_path):
    enc = {"kind": "encoder", "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "max_seq_len": 40}
    dyck = run_one(cfg(model={**enc, "head": {"name": "sequence_classification", "n_classes": 2}},
                       task={"name": "dyck", "max_len": 16, "n_train": 200, "n_val": 50, "n_test": 50}),
                   tmp_path / "dyck", quiet=True)
    assert 0 <= dyck.metrics["test/accuracy"] <= 1
    depth = run_one(cfg(model={**enc, "head": {"name": "token_classification", "n_classes": 9}},
                        task={"name": "dyck_depth", "max_len": 16, "n_train": 200, "n_val": 50, "n_test": 50}),
                    tmp_path / "depth", quiet=True)
    assert 0 <= depth.metrics["val/accuracy"] <= 1
    mlm = run_one(cfg(model=enc, task={"name": "mlm", "max_chars": 20000, "seq_len": 32}), tmp_path / "mlm",
                  quiet=True)
    assert mlm.metrics["val/perplexity"] > 1
    eval_lengths = run_one(cfg(task={"name": "char_lm", "max_chars": 20000, "seq_len": 16, "eval_lengths": [32]}),
                           tmp_path / "len", quiet=True)
    assert "val@32/loss" in eval_lengths.metrics


def test_wandb_offline_logs_config_and_prints_the_sync_command(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    c = cfg(logging={"wandb": {"enabled": True, "project": "p", "group": "g", "job_type": "variant-a",
                               "tags": ["position=rope"]}})
    result = run_one(c, tmp_path / "w", quiet=True)
    assert result.status == "completed", result.reason
    assert result.summary["wandb_sync"].startswith("wandb sync ")
    runs = list((tmp_path / "w" / "wandb").glob("offline-run-*"))
    assert runs, "no offline wandb run was written"
    expected = (b"model.position.name", b"train.lr", b"variant-a", b"position=rope", b"val/loss")
    deadline = time.time() + 60
    while True:  # wandb's service process may still be flushing its offline log after finish()
        record = b"".join(p.read_bytes() for p in runs[0].glob("run-*.wandb"))
        if all(e in record for e in expected) or time.time() > deadline:
            break
        time.sleep(0.5)
    for e in expected:
        assert e in record, e


def test_eval_lengths_past_a_learned_table_are_skipped_with_the_reason():
    from arch_zoo.training.run import prepare

    data = prepare(cfg(model={**TINY_DECODER, "position": "learned", "max_seq_len": 16},
                       task={"name": "char_lm", "max_chars": 20000, "seq_len": 16, "eval_lengths": [16, 32]}))
    assert data.eval_splits == ["val", "val@16"]
    assert data.info["not_evaluated"] == {"val@32": "task.eval_lengths: 32 is past what position 'learned' represents "
                                          "(at most 16 positions, model.max_seq_len 16); val@32 is not evaluated"}
    rope = prepare(cfg(task={"name": "char_lm", "max_chars": 20000, "seq_len": 16, "eval_lengths": [64]}))
    assert rope.eval_splits == ["val", "val@64"] and "not_evaluated" not in rope.info
