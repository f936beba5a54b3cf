"""A short timed probe for ``arch-zoo sweep --dry-run`` on a ladder: a few optimizer steps of each
distinct model on a real training batch, on the device its config would train on, so the dry run can
say about how long each rung takes before anything is trained.

The estimate of a run is (median seconds per step) x (its steps), plus its validations priced at a third of
a training step per evaluation batch (a forward without backward or update); process start-up and
data preparation are left out. Nothing here writes anything."""
from __future__ import annotations

import json
import math
import statistics
import time
from typing import Any, Dict, Tuple

from ..coerce import to_dict

WARMUP_STEPS, TIMED_STEPS = 1, 5
EVAL_FRACTION = 1 / 3  # an evaluation batch against a training step: forward only
UNTIMED = ("max_steps", "warmup_steps", "val_every", "lr", "log_every", "min_lr_ratio", "schedule")  # no step time


def step_seconds(cfg, data, timed: int = TIMED_STEPS) -> float:
    """Wall seconds per optimizer step of ``cfg`` on one batch of ``data``'s training split (the median
    of ``timed`` steps after a warm-up step)."""
    import torch

    from ..data.tasks.base import collate
    from ..models import build_model
    from ..recipes import build_optimizer
    from ..training import objectives

    t = cfg.train
    device = "cuda" if t.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available() else "cpu"
    with torch.random.fork_rng(devices=[]):  # the probe must not move anyone's random state
        torch.manual_seed(cfg.seed)
        model = build_model(cfg.model, data.tokenizer.vocab_size).to(device).train()
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


def run_seconds(cfg, data, per_step: float) -> float:
    """A run's estimated wall time from its step time: training plus its validations."""
    t = cfg.train
    evals = t.max_steps // t.val_every + (1 if t.max_steps % t.val_every else 0)
    eval_batch = t.eval_batch_size or t.batch_size
    batches = t.val_batches if t.val_batches is not None else math.ceil(len(data.splits["val"]) / eval_batch)
    return per_step * (t.max_steps + evals * batches * EVAL_FRACTION * eval_batch / t.batch_size)


def probe_plan(plan, threads: int = 1) -> Tuple[Dict[str, float], int]:
    """Estimated wall seconds of each run of ``plan`` (by run id): each distinct model (the seed
    aside) probed once, each distinct task's data prepared once, on ``threads`` torch threads (a
    local worker's share of the cores: what each run will get), never more than this process uses.
    Returns the estimates and the threads they were timed on."""
    import torch

    before = torch.get_num_threads()
    used = max(1, min(threads, before))
    torch.set_num_threads(used)
    try:
        return _probe(plan), used
    finally:
        torch.set_num_threads(before)


def _probe(plan) -> Dict[str, float]:
    from ..training.run import prepare

    data: Dict[str, Any] = {}
    per_step: Dict[str, float] = {}
    out: Dict[str, float] = {}
    for run in plan.runs:
        cfg = run.config
        task_key = json.dumps([to_dict(cfg.task), cfg.model.kind, cfg.model.max_seq_len], sort_keys=True, default=str)
        if task_key not in data:
            data[task_key] = prepare(cfg)
        train = {k: v for k, v in to_dict(cfg.train).items() if k not in UNTIMED}
        model_key = json.dumps([to_dict(cfg.model), train, task_key], sort_keys=True, default=str)
        if model_key not in per_step:
            per_step[model_key] = step_seconds(cfg, data[task_key])
        out[run.run_id] = run_seconds(cfg, data[task_key], per_step[model_key])
    return out
