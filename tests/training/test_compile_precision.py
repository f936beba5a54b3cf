"""README "Training": `train.compile: true` trains and evaluates through torch.compile with the losses
of the eager run; `train.precision: bf16-mixed` tracks the fp32 run's loss within 5% at every logged
step; summary.json records compiled / compile_mode / fallback reason, float32_matmul_precision,
fused_adamw and the SDPA kernels; checkpoints of compiled runs load into eager models and resume
across compile on and off."""
import csv
import json
import os
import signal

import pytest
import pytorch_lightning as pl
import torch

from arch_zoo import restore
from arch_zoo.components.placements import PLACEMENTS
from arch_zoo.experiment import load
from arch_zoo.training import run_one
from arch_zoo.training.accel import inductor_cache_dir
from arch_zoo.training.run import RunInterrupted


def config(position="rope", placement="pre", steps=4, **train):
    return load({"name": "t", "seed": 0,
                 "model": {"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32,
                           "max_seq_len": 16, "position": position, "norm_placement": placement},
                 "task": {"name": "char_lm", "max_chars": 4000, "seq_len": 16},
                 "train": {"progress_bar": False, "log_every": 1, "max_steps": steps, "batch_size": 4,
                           "val_every": steps, "val_batches": 1, "exact_match_samples": 0, **train}})


def losses(run_dir):
    with (run_dir / "metrics.csv").open(newline="") as f:
        return [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]


def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


NOT_ONE_GRAPH: set = set()  # every position scheme compiles as one graph


def _compare_compiled(tmp_path, position, placement):
    eager = tmp_path / "eager"
    compiled = tmp_path / "compiled"
    run_one(config(position, placement), eager, quiet=True)
    run_one(config(position, placement, compile=True), compiled, quiet=True)
    want, got = losses(eager), losses(compiled)
    assert len(want) == 4
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert summary(compiled)["final"]["val/loss"] == pytest.approx(summary(eager)["final"]["val/loss"], rel=1e-4)
    s = summary(compiled)
    assert s["compiled"] is True and s["compile_mode"] == "default"
    # one graph where it holds; where it does not, the run fell back and says why
    assert s["compile_fullgraph"] is (position not in NOT_ONE_GRAPH), s["compile_fallback_reason"]
    assert (s["compile_fallback_reason"] is None) is s["compile_fullgraph"]
    assert summary(eager)["compiled"] is False
    # compiled code kept apart per CPU vector ISA (tests/training/test_compile_cache.py)
    assert s["compile_cache_dir"] == inductor_cache_dir() and summary(eager)["compile_cache_dir"] is None
    return compiled


# inductor takes about a minute per scheme on 2 CPU cores: the normal suite compiles rope, `make test-slow`
# every position scheme x norm placement
SLOW = pytest.mark.slow


@pytest.mark.compiles
@pytest.mark.parametrize("position, placement", [
    ("rope", "pre"),
    *[pytest.param(p, pl_, marks=SLOW) for p in ("alibi", "learned", "none", "rope", "sinusoidal", "t5_bias")
      for pl_ in ("pre", "post") if (p, pl_) != ("rope", "pre")],
    *[pytest.param("rope", pl_, marks=SLOW) for pl_ in PLACEMENTS.choices() if pl_ not in ("pre", "post")]])
def test_compiled_training_matches_eager(tmp_path, position, placement):
    """Claim: "`train.compile: true` trains to the eager run's losses (within 1e-4) for every position
    scheme and norm placement, as one graph"."""
    _compare_compiled(tmp_path, position, placement)


class _TermAt(pl.Callback):
    """SIGTERM to this process after ``step`` optimizer steps: the run checkpoints and stops as it would under Slurm."""

    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("first, then", [(True, False), pytest.param(False, True, marks=SLOW)])
def test_a_run_resumes_across_compile_on_and_off(tmp_path, first, then):
    """Claim: "checkpoints hold the eager model's keys (no `_orig_mod.`): `restore` loads a compiled run's,
    and an interrupted run resumes with `train.compile` switched on or off"."""
    whole = tmp_path / "whole"
    run_one(config(steps=6), whole, quiet=True)
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        run_one(config(steps=6, compile=first), out, callbacks=[_TermAt(3)], quiet=True)
    state = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    assert not any("_orig_mod" in k for k in state)
    assert restore(out).model.training is False  # an eager model loads it
    result = run_one(config(steps=6, compile=then), out, quiet=True)
    assert result.status == "completed", result
    assert summary(out)["resumed_from_step"] == 3 and summary(out)["compiled"] is then
    assert losses(out) == pytest.approx(losses(whole), rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("position", ["alibi", "learned", "none", "rope", "sinusoidal", "t5_bias"])
def test_bf16_mixed_tracks_fp32_within_5_percent(tmp_path, position):
    """Claim: "`bf16-mixed` works on CPU and GPU for every component; its loss stays within 5% (relative)
    of the fp32 run's at every logged step" (a tiny model, 8 steps, from the same seed)."""
    fp32, bf16 = tmp_path / "fp32", tmp_path / "bf16"
    run_one(config(position, steps=8), fp32, quiet=True)
    run_one(config(position, steps=8, precision="bf16-mixed"), bf16, quiet=True)
    want, got = losses(fp32), losses(bf16)
    assert len(got) == 8 and got != want  # bf16 did round somewhere
    assert got == pytest.approx(want, rel=0.05)
    assert summary(bf16)["precision"] == "bf16-mixed"


def test_summary_records_the_cpu_speed_settings(tmp_path):
    """Claim: summary.json records the SDPA kernels, fused AdamW and the matmul precision; on CPU AdamW
    is not fused and TF32 is not switched on."""
    run_one(config(steps=1), tmp_path, quiet=True)
    s = summary(tmp_path)
    assert s["fused_adamw"] is False and s["compiled"] is False
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    assert all(k.startswith("model.") for k in state)  # the model once, under its one name
    assert s["float32_matmul_precision"] == "highest"
    assert s["sdpa_kernels"]["math (cpu)"] is True and "flash (cpu)" in s["sdpa_kernels"]


@pytest.mark.parametrize("override, words", [
    ("train.precision=bf17-mixed", ["train.precision", "bf16-mixed", "32-true"]),
    ("train.compile_mode=fast", ["train.compile_mode", "max-autotune"]),
])
def test_bad_speed_settings_are_one_line_exit_2(tmp_path, override, words):
    import subprocess
    import sys

    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: {kind: decoder, d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32, max_seq_len: 16}\n"
                   "task: {name: char_lm, max_chars: 4000, seq_len: 16}\n")
    proc = subprocess.run([sys.executable, "-m", "arch_zoo.cli", "train", str(cfg), "--out", str(tmp_path / "r"),
                           override], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and all(w in proc.stderr for w in words), proc.stderr


def test_compile_without_a_cpp_compiler_is_one_line_exit_2(tmp_path):
    """Claim: "`train.compile=true` without the compiler inductor needs is one line and exit 2"."""
    import subprocess
    import sys

    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: {kind: decoder, d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32, max_seq_len: 16}\n"
                   "task: {name: char_lm, max_chars: 4000, seq_len: 16}\n")
    env = {**os.environ, "CXX": "no-such-compiler-here", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "arch_zoo.cli", "train", str(cfg), "--out", str(tmp_path / "r"),
                           "train.compile=true", "train.accelerator=cpu"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "no-such-compiler-here" in proc.stderr, proc.stderr
