"""Builds the Lightning Trainer for a run, fits (resuming from last.ckpt), evaluates, summarises."""
from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytorch_lightning as pl

from .. import rundir
from ..config import ExperimentConfig, TrainConfig
from ..config.plugins import records as plugin_records
from ..data.lengths import split_lengths
from ..data.tasks.base import TaskData
from ..metrics import best_metrics, goal_of
from ..models.flops import FlopCounter, state_bytes_per_token
from ..models.mfu import mfu_for_run
from ..models.summary import active_parameters, count_parameters, parameter_breakdown
from ..progress import LiveLines
from ..provenance import git_commit
from ..trained.init_from import InitialWeights
from pytorch_lightning.utilities.exceptions import SIGTERMException

from .accel import compile_info, sdpa_kernels, set_matmul_precision
from .branches import FORKED, ForkAt
from .callbacks import (BestCheckpoint, DivergenceGuard, ProgressRecord, RunCheckpoint, StopAt, ThroughputMeter,
                        peak_memory)
from .datamodule import TaskDataModule
from .loggers import build_loggers, define_summaries, finish_loggers, sync_hint
from .module import ArchZooModule
from .objectives import objective

_NOISY = ("does not have many workers", "Checkpoint directory", "Experiment logs directory", "exists and is not empty",
          "The number of training batches", "LightningDataModule.transfer_batch_to_device",
          "You defined a `validation_step` but have no `val_dataloader`", "Trying to infer the `batch_size`",
          "is an invalid version and will not be supported", "your dataloader is not resumable")


def _quiet_lightning(quiet: bool) -> None:
    for text in _NOISY:
        warnings.filterwarnings("ignore", message=f".*{text}.*")
    # recent torch deprecates LeafSpec, which Lightning's _pytree still builds on every batch
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning)
    level = logging.ERROR if quiet else logging.WARNING
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric"):
        logging.getLogger(name).setLevel(level)


def train(cfg: ExperimentConfig, data: TaskData, run_dir: Path, callbacks: List[Any], quiet: bool,
          writer: bool, attempt: rundir.Attempt, stop_at: Optional[int] = None,
          best: Optional[Tuple[str, str]] = None, fork_at: Optional[int] = None,
          init: Optional[InitialWeights] = None) -> Dict[str, Any]:
    """The run's summary; with ``stop_at`` below ``train.max_steps``, a paused run's instead:
    ``{"status": "paused", "step", "rung": the validation metrics there}`` (no test, no summary.json).
    ``best`` (a validation metric and its goal, min or max): also keep checkpoints/best.ckpt by it.
    ``fork_at`` (a WSD-S branch's fork, branches.py): checkpoint at that step and return
    ``{"status": "forked", "step"}``. ``init`` (``train.init_from``'s weights): the model starts from
    them unless the run resumes."""
    _quiet_lightning(quiet)
    t = cfg.train
    started = time.time()
    resume = rundir.resume_state(run_dir)
    resume_from = resume["step"] if resume else None
    attempt.begin(resume_from)
    stop_at = stop_at if stop_at is not None and stop_at < t.max_steps else None
    if stop_at is not None and resume_from is not None and resume_from >= stop_at:  # killed before its status
        return _paused(rundir.checkpoint_history(run_dir), resume_from)
    matmul_precision = set_matmul_precision(t)

    fork = ForkAt(fork_at) if fork_at is not None else None
    fit = _build(cfg, data, run_dir, [*callbacks, *([fork] if fork else [])], quiet, writer, attempt, stop_at, best,
                 resume, init)
    ckpt_path = str(run_dir / rundir.CHECKPOINT) if resume_from is not None else None
    try:
        fit.trainer.fit(fit.module, datamodule=fit.dm, ckpt_path=ckpt_path)
    except SIGTERMException:
        if fork is None or not fork.forked:
            raise
        return {"status": FORKED, "step": int(fit.trainer.global_step)}
    finally:
        if fit.console is not None:
            fit.console.close()

    diverged = fit.module.diverged_at is not None
    if stop_at is not None and not diverged and fit.trainer.global_step < t.max_steps:
        # last.ckpt is the one RunCheckpoint saved after the stop's validation, mid-epoch; saving
        # again now would record the epoch as over, and a promoted run would resume at its end
        _close_loggers(cfg, fit.loggers, None, "success")  # no final metrics yet: a promoted run logs on
        return _paused(fit.module.history, fit.trainer.global_step)
    if not diverged:
        _evaluate(fit)
    summary = _summary(cfg, data, fit, resume_from, started, matmul_precision)
    hint = sync_hint(fit.loggers) if writer else None
    if hint:
        summary["wandb_sync"] = hint
    _close_loggers(cfg, fit.loggers, summary, "success" if not diverged else "failed")
    return summary


@dataclass
class _Fit:
    """What ``train`` builds for a run and reads back after fitting it."""
    module: ArchZooModule
    dm: TaskDataModule
    trainer: pl.Trainer
    loggers: List[Any]
    meter: ThroughputMeter
    checkpoint: RunCheckpoint
    keep_best: List[BestCheckpoint]
    console: Optional[LiveLines]  # `arch-zoo train`'s progress line (None: quiet, or a sweep's worker)


def _build(cfg: ExperimentConfig, data: TaskData, run_dir: Path, callbacks: List[Any], quiet: bool, writer: bool,
           attempt: rundir.Attempt, stop_at: Optional[int], best: Optional[Tuple[str, str]],
           resume: Optional[Dict[str, Any]], init: Optional[InitialWeights] = None) -> _Fit:
    """The seeded module, its data, the loggers (continuing a resumed run's rows) and the Trainer with
    the run's own checkpointing, throughput, divergence and stop callbacks."""
    t = cfg.train
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    module = ArchZooModule(cfg, data)
    if init is not None and resume is None:  # a resume's checkpoint holds this run's own weights
        init.load_into(module.model)
    dm = TaskDataModule(data, t, cfg.seed)
    meter, guard = ThroughputMeter(FlopCounter(module.model)), DivergenceGuard()
    ckpt = run_dir / rundir.CHECKPOINT
    checkpoint = RunCheckpoint(ckpt, on_saved=lambda step: attempt.update(step))
    keep_best = [BestCheckpoint(ckpt.parent, *best)] if best else []  # before RunCheckpoint: see its docstring
    loggers = build_loggers(cfg, run_dir, run_dir.name, keep_rows=resume["metrics_rows"] if resume else None,
                            kept_early=bool(resume and resume["validation_early"]))
    console = LiveLines() if t.progress_bar and not quiet and writer else None
    show = (lambda record: console.show({run_dir: (cfg.name, record)})) if console is not None else None
    progress = ProgressRecord(run_dir / rundir.PROGRESS, meter, stop_at or t.max_steps, show)
    trainer = _trainer(t, run_dir, loggers, [*keep_best, checkpoint, meter, progress, guard,
                                             *([StopAt(stop_at)] if stop_at is not None else []), *callbacks])
    dm.consumed = lambda: trainer.global_step * t.accumulate_grad_batches
    names = [f"{s}/{m}" for s in data.eval_splits for m in ("loss", "accuracy", "token_accuracy", "bpc", "bpb")]
    if writer:
        define_summaries(loggers, names + ["val/exact_match", "train/loss", "train/bpb"], goal_of)
    return _Fit(module, dm, trainer, loggers, meter, checkpoint, keep_best, console)


def _evaluate(fit: _Fit) -> None:
    """A run that trained to its end: checkpointed, validated at its last step (unless a validation
    fell there) and tested."""
    trainer, module = fit.trainer, fit.module
    fit.checkpoint.save(trainer)  # before the final evaluation, which a rerun redoes if it is cut short
    if not module.history or module.history[-1]["step"] != trainer.global_step:
        trainer.validate(module, datamodule=fit.dm, verbose=False)
        for b in fit.keep_best:
            b.consider(trainer)
    trainer.test(module, datamodule=fit.dm, verbose=False)


def _trainer(t: TrainConfig, run_dir: Path, loggers: List[Any], callbacks: List[Any]) -> pl.Trainer:
    """Lightning's Trainer for ``train``'s settings: one epoch of max_steps, validation every
    val_every optimizer steps, no sanity check, the run's own checkpointing and progress (``callbacks``;
    Lightning's bar would flood a log that is no terminal with its redraws)."""
    return pl.Trainer(
        max_steps=t.max_steps, max_epochs=1, accelerator=t.accelerator, devices=t.devices, strategy=t.strategy,
        num_nodes=t.num_nodes,
        precision=t.precision, gradient_clip_val=t.grad_clip, accumulate_grad_batches=t.accumulate_grad_batches,
        val_check_interval=t.val_every * t.accumulate_grad_batches, check_val_every_n_epoch=None,
        limit_val_batches=t.val_batches, limit_test_batches=t.val_batches, log_every_n_steps=t.log_every,
        num_sanity_val_steps=0, use_distributed_sampler=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=True, logger=loggers, callbacks=callbacks,
        default_root_dir=str(run_dir),
    )


def _summary(cfg: ExperimentConfig, data: TaskData, fit: _Fit, resume_from: Optional[int], started: float,
             matmul_precision: str) -> Dict[str, Any]:
    """summary.json of a run that ended (completed or diverged): its metrics, size, speed and provenance."""
    t, module, trainer, meter, keep_best = cfg.train, fit.module, fit.trainer, fit.meter, fit.keep_best
    diverged = module.diverged_at is not None
    final = dict(module.history[-1]) if module.history else {}
    final.pop("step", None)
    final.update(module.test_metrics)
    model = module.model
    return {
        "name": cfg.name,
        "status": "diverged" if diverged else "completed",
        "reason": f"non-finite training loss at step {module.diverged_at}" if diverged else None,
        "diverged_at": module.diverged_at,
        "step": int(trainer.global_step),
        "resumed_from_step": resume_from,
        "final": final,
        "best": best_metrics(module.history, goal_of),
        **({"best_checkpoint": keep_best[0].record()} if keep_best else {}),  # by the sweep's metric and goal
        "goals": {k: goal_of(k) for k in final if goal_of(k)},  # how reports rank them
        "units": {k: module.objective.unit(k) for k in final if module.objective.unit(k)},  # and in what unit
        "samples": module.samples,
        "parameters": count_parameters(model),
        "active_parameters": active_parameters(model),  # per token: less than parameters with mixture-of-experts
        "parameters_by_part": {k: v for k, v in parameter_breakdown(model).items()},
        **counted_flops(meter.counter, data),
        "state_bytes_per_token": state_bytes_per_token(model, cfg.model),  # decoding state, float32, at max_seq_len
        "train_tokens_per_s": meter.tokens_per_second,
        # this process's FLOP/s over one device's peak: per-device MFU, also under data parallelism
        **mfu_for_run(meter.train_flops_per_second, module.device, t.precision),
        **peak_memory(module.device),
        "wall_time_s": time.time() - started,
        "device": str(module.device),
        # how many processes trained it: tokens/s and MFU above are this process's (one device's)
        "strategy": type(trainer.strategy).__name__, "devices": trainer.num_devices, "num_nodes": trainer.num_nodes,
        "precision": t.precision,
        **compile_info(module.compiled),
        "exact_match_decoding": module.decoding.info(module.model),  # the path exact match decoded through
        "float32_matmul_precision": matmul_precision,
        "fused_adamw": bool(trainer.optimizers and trainer.optimizers[0].defaults.get("fused")),
        "optimizer": {"name": t.optimizer.name, "groups": module.optimizer_groups},  # Muon's split: which part has what
        "sdpa_kernels": sdpa_kernels(module.device),
        "task": data.info,
        "versions": rundir.versions(),
        "git_commit": git_commit(),
        "plugins": plugin_records(cfg.plugins),  # module, file and sha256 of the code behind plugin components
        "finished": rundir.now(),
    }


def counted_flops(counter: FlopCounter, data: TaskData) -> Dict[str, Any]:
    """Forward FLOPs per token at the lengths trained (the train split's, every example at its own
    length) and at each evaluation split's, with the lengths they were counted at."""
    train = split_lengths(data.splits["train"])
    at = train.record("train", objective(data.objective).decoder_inputs)
    at["mfu"] = "the training batches timed, each row at its own length"
    evaluated = {}
    for split in [*data.eval_splits, "test"]:
        lengths = split_lengths(data.splits[split]) if data.splits.get(split) else None
        if lengths is not None and lengths.counts:
            evaluated[split] = counter.per_token(lengths.counts)["total"]
    return {"flops_per_token": counter.per_token(train.counts)["total"], "flops_counted_at": at,
            "eval_flops_per_token": evaluated}


def _close_loggers(cfg: ExperimentConfig, loggers: List[Any], summary: Optional[Dict[str, Any]], status: str) -> None:
    finish_loggers(loggers, summary, status)
    if cfg.logging.wandb.enabled:
        import wandb

        wandb.finish()


def _paused(history: List[Dict[str, float]], step: int) -> Dict[str, Any]:
    rung = dict(history[-1]) if history and history[-1].get("step") == step else {}
    rung.pop("step", None)
    return {"status": rundir.PAUSED, "step": int(step), "rung": rung}
