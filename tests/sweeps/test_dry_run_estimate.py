"""`sweep --dry-run` prints an estimated wall time for every kind of sweep (plain, tuned, halved, suites),
from one probe: each distinct model/task shape timed once, plus the start-up and per-step overhead of the
real training path measured once. The arithmetic is checked with the probe's times injected; the probe
itself times real steps (tests/sweeps/test_scale.py)."""
import math

import pytest

from arch_zoo.cli import main
from arch_zoo.config.validation import layer_models
from arch_zoo.sweeps import load_spec, make_plan, probe
from arch_zoo.sweeps.estimate import duration
from arch_zoo.sweeps.probe import Overhead

from .conftest import BASE, write_spec
from .test_suite import BASE as SUITE_BASE, SUITE

STEP, STARTUP, LOOP = 0.25, 2.0, 0.01


@pytest.fixture
def probed(monkeypatch):
    """Injected step times (by model width, so shapes are told apart) and overhead; counts the probes."""
    calls = []

    def step_seconds(cfg, data, timed=probe.TIMED_STEPS):
        calls.append(cfg)
        return STEP * cfg.model.d_model / 16

    monkeypatch.setattr(probe, "step_seconds", step_seconds)
    monkeypatch.setattr(probe, "overhead", lambda cfg, per_step, steps=probe.CALIBRATION_STEPS: Overhead(STARTUP, LOOP))
    return calls


def _run_seconds(cfg, steps=None, launches=1, evals=None):
    """By hand: start-up, steps at (step + loop overhead), and every validation's batches at a third of a step
    (the tiny bases have a val split and no val@L)."""
    t = cfg.train
    step = STEP * cfg.model.d_model / 16
    steps = t.max_steps if steps is None else steps
    evals = math.ceil(steps / t.val_every) if evals is None else evals
    eval_batch = t.eval_batch_size or t.batch_size
    return launches * STARTUP + steps * (step + LOOP) + evals * t.val_batches * eval_batch / t.batch_size / 3 * step


def _dry(spec_dir, tmp_path, capsys, spec, base=BASE, workers=None):
    path = write_spec(spec_dir, spec, base)
    extra = ["--workers", str(workers)] if workers else []
    assert main(["sweep", str(path), "--dry-run", "--estimate", "--out", str(tmp_path / "out"), *extra]) == 0
    out = capsys.readouterr().out
    assert not (tmp_path / "out").exists()
    return make_plan(load_spec(path)), out


def test_a_plain_grid_prints_its_estimate_one_after_another_and_over_workers(spec_dir, tmp_path, capsys, probed):
    spec = {"grid": {"model.d_model": [16, 32], "train.lr": [1e-3, 3e-3]}, "seeds": [0, 1]}
    plan, out = _dry(spec_dir, tmp_path, capsys, spec, workers=3)
    total = sum(_run_seconds(r.config) for r in plan.runs)
    assert len(plan.runs) == 8 and len(probed) == 2  # lr and seed share a probe: one per width
    assert f"estimated wall time: {duration(total)} for 8 runs one after another; with --workers 3, about " \
           f"{duration(total / 3)}\n" in out
    assert "for each of 2 model/task shapes" in out and f"{STARTUP:.1f} s start-up per run and 10.0 ms per step of " \
        "training-loop overhead at most, each shape's own from a 6-step run through the real training path" in out
    assert "left out: worker processes' start-up" in out


def test_a_tuned_sweep_prices_stage_two_before_stage_one_chose(spec_dir, tmp_path, capsys, probed):
    spec = {"grid": {"model.d_model": [16, 32]}, "seeds": [0, 1, 2],
            "tune": {"key": "train.lr", "values": [1e-3, 1e-2], "seeds": [100]}}
    plan, out = _dry(spec_dir, tmp_path, capsys, spec)
    one = sum(_run_seconds(r.config) for r in plan.runs)
    two = 3 * sum(_run_seconds(r.config) for r in plan.runs if r.config.train.lr == 1e-3)  # first value, 3 seeds
    assert len(plan.runs) == 4 and len(probed) == 2
    assert f"estimated wall time: {duration(one + two)} for 10 runs one after another\n" in out
    assert (f"stage 1: {duration(one)} for 4 runs; stage 2: {duration(two)} for 6 runs, an estimate before stage 1 "
            "chose: each variant at its first train.lr value, at stage 2's steps") in out


def test_a_halved_stage_one_is_priced_as_far_as_its_rungs_go(spec_dir, tmp_path, capsys, probed):
    base = {**BASE, "train": {**BASE["train"], "max_steps": 30, "val_every": 10}}
    spec = {"seeds": [0], "tune": {"key": "train.lr", "values": [1e-3, 3e-3, 1e-2], "seeds": [100, 101],
                                   "halving": {"eta": 3, "min_steps": 10}}}
    plan, out = _dry(spec_dir, tmp_path, capsys, spec, base)
    cfg = plan.runs[0].config
    # rungs 10 and 30: 3 values train 10 steps (one validation each), 1 goes on to 30 (two more), 4 launches
    one = 2 * _run_seconds(cfg, steps=3 * 10 + 20, launches=4, evals=3 + 2)
    two = _run_seconds(cfg)
    assert f"estimated wall time: {duration(one + two)} for 7 runs one after another" in out
    assert f"stage 1: {duration(one)} for 6 runs (successive halving" in out


def test_a_suite_prices_each_entry_on_its_own_task(spec_dir, tmp_path, capsys, probed):
    spec = {"grid": {"model.position": ["rope", "sinusoidal"]}, "seeds": [0], "suite": SUITE}
    plan, out = _dry(spec_dir, tmp_path, capsys, spec, SUITE_BASE, workers=2)
    total = sum(_run_seconds(r.config) for r in plan.runs)
    assert {r.config.train.max_steps for r in plan.runs} == {3, 4}  # an entry's own steps
    assert len(probed) == 2 * 3  # 2 positions x 3 entries (their tasks differ)
    assert f"estimated wall time: {duration(total)} for 6 runs one after another; with --workers 2, about " \
           f"{duration(total / 2)}" in out


def test_the_overhead_is_measured_through_the_real_training_path(spec_dir):
    cfg = make_plan(load_spec(write_spec(spec_dir, {"seeds": [0]}))).runs[0].config
    o = probe.overhead(cfg, 0.0, steps=3)
    assert o.failed is None and o.startup > 0 and o.per_step > 0  # a zero probe step: the loop's whole pace


def test_each_variant_is_probed_and_calibrated_with_its_own_mixers(spec_dir, tmp_path, capsys, monkeypatch):
    """An attention and a Gated DeltaNet variant: each one's bare step and its run through the real training path
    (start-up, the loop's pace) are its own, so a mixer slower in the real loop than in a bare step (or slower
    to start) is priced at its own cost, not at the first run's (issue 55: 71 s estimated, 190 s measured)."""
    steps, loops = {"attention": 0.1, "gated_deltanet": 0.4}, {"attention": (2.0, 0.01), "gated_deltanet": (9.0, 0.3)}
    probed, calibrated = [], []

    def mixers(cfg):
        return tuple(layer.mixer.name for layer in layer_models(cfg.model, "decoder", cfg.model.n_layers))

    def step_seconds(cfg, data, timed=probe.TIMED_STEPS):
        probed.append(mixers(cfg))
        return steps[cfg.model.mixer.name]

    def overhead(cfg, per_step, steps=probe.CALIBRATION_STEPS):
        calibrated.append(mixers(cfg))
        return Overhead(*loops[cfg.model.mixer.name])

    monkeypatch.setattr(probe, "step_seconds", step_seconds)
    monkeypatch.setattr(probe, "overhead", overhead)
    spec = {"grid": {"model.mixer": ["attention", "gated_deltanet"]}, "seeds": [0, 1]}
    plan, out = _dry(spec_dir, tmp_path, capsys, spec, {**BASE, "model": {**BASE["model"], "position": "none"}})
    own = [("attention",), ("gated_deltanet",)]
    assert probed == own and calibrated == own  # once per shape, each with its own mixer
    t = plan.runs[0].config.train
    evals = math.ceil(t.max_steps / t.val_every) * t.val_batches * (t.eval_batch_size or t.batch_size) / t.batch_size / 3
    by_hand = sum(loops[m][0] + t.max_steps * (steps[m] + loops[m][1]) + evals * steps[m]
                  for m in ("attention", "gated_deltanet") for _ in range(2))
    assert f"estimated wall time: {duration(by_hand)} for 4 runs one after another" in out
