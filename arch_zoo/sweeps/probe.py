"""A short timed probe for ``arch-zoo sweep --dry-run``: a few optimizer steps of each distinct model and
task shape on a real training batch, on the device its config would train on, and one short run through
the real training path to measure what the bare steps leave out, so the dry run can say about how long
the sweep takes before anything is trained.

The estimate of a run (``Timing.seconds``) is its start-up plus (the probe's median seconds per step +
the training loop's overhead per step) x its steps, plus its validations priced at a third of a training
step per evaluation batch (a forward without backward or update). Start-up and the loop's overhead come
from a short run of each distinct model and task shape through ``run_one`` (``overhead``), in a temporary
directory removed after; nothing else is written. Each shape's own: a mixer whose real training path
costs more than its bare step (or a model slower to build) would be priced at another's."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional

from ..coerce import to_dict

WARMUP_STEPS, TIMED_STEPS = 1, 5
CALIBRATION_STEPS = 6  # the short real run's steps: the first pays the warm-up, the rest give the loop's pace
EVAL_FRACTION = 1 / 3  # an evaluation batch against a training step: forward only
UNTIMED = ("max_steps", "warmup_steps", "val_every", "lr", "log_every", "min_lr_ratio", "schedule")  # no step time


@dataclass(frozen=True)
class Overhead:
    startup: float = 0.0  # seconds per run outside its steps and validations (trainer, checkpoints, summary)
    per_step: float = 0.0  # seconds the training loop adds to each step over the probe's bare step
    failed: Optional[str] = None  # why the short run measured nothing
    skipped: bool = False  # not measured: the dry run was not asked to (--estimate), so Lightning stays unloaded


@dataclass(frozen=True)
class Timing:
    """What the probe measured for one run: its step time and what a validation costs in steps."""

    per_step: float
    eval_steps: float  # one validation in training steps: EVAL_FRACTION x batches x eval/train batch x val splits
    max_steps: int
    val_every: int
    overhead: Overhead = Overhead()  # its own shape's start-up and loop overhead

    def validations(self, steps: int) -> int:
        return steps // self.val_every + (1 if steps % self.val_every else 0)

    def seconds(self, steps: Optional[int] = None, launches: int = 1, validations: Optional[int] = None) -> float:
        """Wall seconds of ``steps`` (default: the run's own) trained over ``launches`` starts (a halved run
        resumes at each rung it is promoted past) with ``validations`` (default: every val_every)."""
        overhead, steps = self.overhead, self.max_steps if steps is None else steps
        evals = self.validations(steps) if validations is None else validations
        return (launches * overhead.startup + steps * (self.per_step + overhead.per_step)
                + evals * self.eval_steps * self.per_step)


@dataclass
class Probe:
    timings: Dict[str, Timing]  # by run id
    threads: int  # the torch threads the steps were timed on
    shapes: int  # distinct model and task shapes probed

    def seconds(self, run_id: str) -> float:
        return self.timings[run_id].seconds()

    @property
    def overhead(self) -> Overhead:
        """The shapes' overheads in one: the largest start-up and loop overhead, the first failure."""
        each = list({id(t.overhead): t.overhead for t in self.timings.values()}.values()) or [Overhead(skipped=True)]
        failed = next((o.failed for o in each if o.failed is not None), None)
        return Overhead(max(o.startup for o in each), max(o.per_step for o in each), failed,
                        all(o.skipped for o in each))


def step_seconds(cfg, data, timed: int = TIMED_STEPS) -> float:
    """Wall seconds per optimizer step of ``cfg`` on one batch of ``data``'s training split (the median
    of ``timed`` steps after a warm-up step)."""
    import torch

    from ..data.tasks.base import collate
    from ..models import build_model
    from ..models.build import embedding_rows
    from ..recipes import build_optimizer
    from ..training import objectives

    t = cfg.train
    device = "cuda" if t.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available() else "cpu"
    with torch.random.fork_rng(devices=[]):  # the probe must not move anyone's random state
        torch.manual_seed(cfg.seed)
        model = build_model(cfg, embedding_rows(cfg.model, data.tokenizer)).to(device).train()
        optimizer = build_optimizer(model, t).optimizer
        objective = objectives.objective(data.objective)
        train = data.splits["train"]
        batch = collate([train[i % len(train)] for i in range(t.batch_size)], pad_id=data.tokenizer.pad_id)
        batch = {k: v.to(device) for k, v in batch.items()}

        def step() -> None:
            for _ in range(t.accumulate_grad_batches):
                logits, labels = objective.forward(model, batch)
                objectives.loss_fn(logits, labels).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        for _ in range(WARMUP_STEPS):
            step()
        times = []
        for _ in range(timed):  # the median: one step slowed by a neighbour's burst says little
            began = time.perf_counter()
            step()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - began)
        return statistics.median(times)


def overhead(cfg, per_step: float, steps: int = CALIBRATION_STEPS) -> Overhead:
    """What a real run adds to the probe's bare steps, from ``steps`` steps of ``cfg`` through ``run_one``
    (Lightning's loop, the data loader, logging, checkpoints) with no live logger: the loop's pace past the
    first step over ``per_step``, and everything outside the steps and validations as start-up."""
    import tempfile

    import pytorch_lightning as pl
    import torch

    from ..config.schema import LoggingConfig
    from ..training.run import run_one

    class Clock(pl.Callback):
        def __init__(self):
            self.ends, self.val, self._v = [], 0.0, 0.0

        def on_train_batch_end(self, *args):
            self.ends.append(time.perf_counter())

        def on_validation_epoch_start(self, *args):
            self._v = time.perf_counter()

        def on_validation_epoch_end(self, *args):
            self.val += time.perf_counter() - self._v

    short = dataclasses.replace(cfg, logging=LoggingConfig(), train=dataclasses.replace(  # (validation: timed apart)
        cfg.train, max_steps=steps, val_every=steps, val_batches=1, progress_bar=False))
    clock = Clock()
    with tempfile.TemporaryDirectory(prefix="arch-zoo-probe-") as tmp, torch.random.fork_rng(devices=[]), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        began = time.perf_counter()
        result = run_one(short, tmp, [clock], quiet=True)
        total = time.perf_counter() - began
    acc = cfg.train.accumulate_grad_batches
    if result.status != "completed" or len(clock.ends) < 2 * acc:
        return Overhead(failed=result.reason or result.status)
    ends = clock.ends[acc - 1::acc]  # each optimizer step's end
    pace = statistics.median(b - a for a, b in zip(ends, ends[1:]))  # steps 2..N, the loop's gaps included
    return Overhead(max(0.0, total - clock.val - steps * pace), max(0.0, pace - per_step))


def probe_plan(plan, threads: int = 1, calibrate: bool = True) -> Probe:
    """Each run of ``plan`` timed: each distinct model and task shape (the seed, lr and schedule aside)
    probed once, and its start-up and loop overhead measured once (``calibrate``), each distinct task's data
    prepared once, on ``threads`` torch threads (a local worker's share of the cores: what each run will
    get), never more than this process uses."""
    import torch

    before = torch.get_num_threads()
    used = max(1, min(threads, before))
    torch.set_num_threads(used)
    try:
        return _probe(plan, used, calibrate)
    finally:
        torch.set_num_threads(before)


def _probe(plan, threads: int, calibrate: bool = True) -> Probe:
    from ..training.run import prepare

    data: Dict[str, Any] = {}
    per_step: Dict[str, float] = {}
    loops: Dict[str, Overhead] = {}
    out: Dict[str, Timing] = {}
    for run in plan.runs:
        cfg = run.config
        task_key = json.dumps([to_dict(cfg.task), cfg.model.kind, cfg.model.max_seq_len], sort_keys=True, default=str)
        if task_key not in data:
            data[task_key] = prepare(cfg, quiet=True)
        train = {k: v for k, v in to_dict(cfg.train).items() if k not in UNTIMED}
        model_key = json.dumps([to_dict(cfg.model), train, task_key], sort_keys=True, default=str)
        if model_key not in per_step:
            per_step[model_key] = step_seconds(cfg, data[task_key])
            loops[model_key] = overhead(cfg, per_step[model_key]) if calibrate else Overhead(skipped=True)
        out[run.run_id] = _timing(cfg, data[task_key], per_step[model_key], loops[model_key])
    return Probe(out, threads, len(per_step))


def _timing(cfg, data, per_step: float, loop: Overhead) -> Timing:
    t = cfg.train
    eval_batch = t.eval_batch_size or t.batch_size
    batches = t.val_batches if t.val_batches is not None else math.ceil(len(data.splits["val"]) / eval_batch)
    splits = sum(1 for k in data.splits if k == "val" or k.startswith("val@"))  # each eval length: a pass
    return Timing(per_step, splits * batches * EVAL_FRACTION * eval_batch / t.batch_size, t.max_steps, t.val_every,
                  loop)
