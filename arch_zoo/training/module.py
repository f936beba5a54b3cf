"""The LightningModule: one for every model kind; the task's objective picks the loss."""
from __future__ import annotations

import math
import random
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from itertools import islice
from typing import Dict, List, Optional

import numpy as np
import pytorch_lightning as pl
import torch

from ..components.attention_diagnostics import AttentionRecorder
from ..config import ExperimentConfig
from ..config.loading import to_yaml
from ..data.tasks.base import TaskData
from ..models import build_model
from ..models.build import embedding_rows
from . import objectives
from .accel import compiled_forward
from .eval_decoding import EvalDecoding
from ..recipes import build_optimizer, build_scheduler, shown_groups


SAMPLES = 5  # held-out greedy decodings kept in summary.json (and shown in reports): the first
# SAMPLES test examples, then up to SAMPLES of the failures among the rest (errors are what a reader wants to see)


class ArchZooModule(pl.LightningModule):
    def __init__(self, cfg: ExperimentConfig, data: TaskData):
        super().__init__()
        self.cfg, self.objective = cfg, objectives.objective(data.objective)
        self.tokenizer = data.tokenizer
        self.model = build_model(cfg, embedding_rows(cfg.model, data.tokenizer))
        self.compiled = compiled_forward(self.model, cfg.train)  # None when eager; a plain object: never in state_dict
        self.eval_splits = data.eval_splits
        self.chars_per_token = {k: float(v) for k, v in (data.info.get("chars_per_token") or {}).items()}
        # a plain tensor, not a buffer: checkpoints keep the model's state only (and load as before)
        self.token_bytes = torch.as_tensor(data.token_bytes) if data.token_bytes is not None else None
        n = cfg.train.exact_match_samples if "exact_match" in data.metrics else 0
        self.generation = {stage: list(islice((e for e in data.splits[stage] if e.prompt_ids is not None), n))
                           for stage in ("val", "test")}  # (lazily: a corpus split is read from its store)
        self.decoding = EvalDecoding(cfg.train, self.generation)  # eager or compiled, and its cost (summary.json)
        # group_by_length: a batch's mean loss is scaled by its share of target tokens, so that every token
        # weighs what it would in a random batch (unscaled, a batch of 3-token outputs would give each of its
        # tokens 16x the weight of one in a batch of 48-token outputs)
        self.tokens_per_batch = (_target_tokens_per_batch(data, cfg.train.batch_size)
                                 if cfg.train.group_by_length >= 2 else None)
        self.test_metrics: Dict[str, float] = {}
        self.samples: List[Dict[str, object]] = []  # greedy decodings of the first test examples
        self._sums: Dict[str, Dict[str, float]] = {}
        self.history: List[Dict[str, float]] = []  # one row of metrics per validation
        self.optimizer_groups: List[Dict[str, object]] = []  # each group with parameters: part, lr, decay, names, column
        self._lr_group = 0  # a group at train.lr times the schedule: the one logged as `lr` (as before lr/<group>)
        self._lr_columns: List[tuple] = []  # (param group index, its metrics.csv column)
        self.diverged_at: Optional[int] = None
        self._attention: Dict[str, AttentionRecorder] = {}  # train.attention_diagnostics: per split, this evaluation's

    # ----------------------------------------------------------------------------- training
    def training_step(self, batch, batch_idx):
        every = self.cfg.train.attention_diagnostics_every  # (+1: the steps whose row Lightning writes)
        with self._recording(batch, "train") if every and (self.global_step + 1) % every == 0 else nullcontext() as model:
            logits, labels = self.objective.forward(model or self.compiled or self.model, batch)
        if every and "train" in self._attention:
            for k, v in self._attention.pop("train").results().items():
                self.log(f"train/{k}", v, prog_bar=False, batch_size=labels.shape[0])
        loss = objectives.loss_fn(logits, labels, self.cfg.train.label_smoothing)
        self.log("train/loss", loss, prog_bar=True, batch_size=labels.shape[0])  # the task's alone: comparable
        if self.token_bytes is not None and self.objective.language_model:  # this batch's summed loss over its bytes
            scored = (labels != objectives.IGNORE).sum()
            covered = objectives.target_bytes(labels, self.token_bytes).clamp(min=1)
            self.log("train/bpb", loss.detach() * scored / covered / math.log(2), prog_bar=False,
                     batch_size=labels.shape[0])
        if self.cfg.train.z_loss:  # weighted as the task loss is, per scored position
            z = self.cfg.train.z_loss * objectives.z_loss(logits, labels)
            self.log("train/z_loss", z, prog_bar=False, batch_size=labels.shape[0])
            loss = loss + z
        if self.tokens_per_batch:
            loss = loss * ((labels != objectives.IGNORE).sum() / self.tokens_per_batch)
        aux = self.objective.aux_loss(self.model, batch)
        if aux is not None:  # mixture-of-experts: the weighted load-balancing loss trains the routers
            self.log("train/aux_loss", aux, prog_bar=False, batch_size=labels.shape[0])
            loss = loss + aux
        groups = self.trainer.optimizers[0].param_groups
        self.log("lr", groups[self._lr_group]["lr"], prog_bar=False)
        for i, column in self._lr_columns:
            self.log(column, groups[i]["lr"], prog_bar=False)
        return loss

    def configure_optimizers(self):
        optimizer, groups, self._lr_group = build_optimizer(self.model, self.cfg.train)
        shown = shown_groups(groups)
        self.optimizer_groups, self._lr_columns = [g for _, g in shown], [(i, g["lr_column"]) for i, g in shown]
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": build_scheduler(optimizer, self.cfg.train), "interval": "step"}}

    # ---------------------------------------------------------------------------- evaluation
    def _split(self, dataloader_idx: int, stage: str) -> str:
        return self.eval_splits[dataloader_idx] if stage == "val" else "test"

    @contextmanager
    def _recording(self, batch, split: str):
        """The attention diagnostics of the forward run inside, added to ``split``'s; it runs the eager
        model (a compiled graph would not call the recorder)."""
        recorder = self._attention.setdefault(split, AttentionRecorder(self.model))
        with recorder.recording(self.objective.stack_masks(batch)):
            yield self.model

    def _accumulate(self, batch, split: str) -> None:
        diagnose = self.cfg.train.attention_diagnostics
        with self._recording(batch, split) if diagnose else nullcontext() as model:
            logits, labels = self.objective.forward(model or self.compiled or self.model, batch)
        sums = self._sums.setdefault(split, defaultdict(float))
        for k, v in self.objective.metric_sums(logits, labels, self.token_bytes).items():
            sums[k] += v

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self._accumulate(batch, self._split(dataloader_idx, "val"))

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self._accumulate(batch, "test")

    def _finish_eval(self, stage: str) -> Dict[str, float]:
        metrics: Dict[str, float] = {}
        for split, sums in self._sums.items():
            cpt = self.chars_per_token.get(split.split("@")[0] if stage == "val" else "test", 0.0)
            for k, v in self.objective.finish(sums, cpt).items():
                metrics[f"{split}/{k}"] = v
        for split, recorder in self._attention.items():
            metrics.update({f"{split}/{k}": v for k, v in recorder.results().items()})
        self._sums, self._attention = {}, {}
        examples = self.generation[stage]
        if examples:
            tok = self.tokenizer
            targets = [e.target_ids for e in examples]
            outputs = self.decoding.run(self.model, lambda compile: objectives.greedy_outputs(
                self.model, [e.prompt_ids for e in examples], targets, self.objective,
                tok.bos_id, tok.eos_id, tok.pad_id, self.cfg.train.eval_batch_size or self.cfg.train.batch_size,
                compile=compile, tokenizer_size=tok.vocab_size))
            metrics[f"{stage}/exact_match"] = objectives.exact_match(outputs, targets)
            if stage == "test":
                decoded = [{"prompt": tok.decode(e.prompt_ids), "target": tok.decode(e.target_ids),
                            "greedy": tok.decode(hyp), "exact": ended and hyp == list(e.target_ids)}
                           for e, (hyp, ended) in zip(examples, outputs)]
                self.samples = decoded[:SAMPLES] + [d for d in decoded[SAMPLES:] if not d["exact"]][:SAMPLES]
        return metrics

    def on_validation_epoch_end(self):
        if self.trainer.sanity_checking:
            self._sums, self._attention = {}, {}
            return
        metrics = self._finish_eval("val")
        self.log_dict(metrics, prog_bar=False, sync_dist=False)
        # Lightning validates inside a step, before it counts it, and would log this at global_step - 1;
        # a logged "step" is the step its loggers use, so every logger, metrics.csv included, says
        # global_step, as status.json, summary.json and the console do (rundir.METRICS_STEPS)
        self.log("step", float(self.global_step), prog_bar=False, sync_dist=False)
        self.history.append({"step": self.global_step, **metrics})

    def on_test_epoch_end(self):
        self.test_metrics = self._finish_eval("test")
        self.log_dict(self.test_metrics)

    # ------------------------------------------------------------------ exact resumption
    def on_train_start(self):
        # the rate the schedule gives at the step resumed from, not the one the checkpoint's optimizer
        # last held: a WSD-S branch resumes its run's stable phase into its own decay (training/branches.py);
        # LambdaLR's own formula, so any other run gets the value it holds already
        for config in self.trainer.lr_scheduler_configs:
            s = config.scheduler
            if isinstance(s, torch.optim.lr_scheduler.LambdaLR):
                for group, base, f in zip(s.optimizer.param_groups, s.base_lrs, s.lr_lambdas):
                    group["lr"] = base * f(s.last_epoch)
                s._last_lr = [group["lr"] for group in s.optimizer.param_groups]

    def on_save_checkpoint(self, checkpoint):
        checkpoint.setdefault("arch_zoo", {}).update({  # callbacks add theirs first (RunCheckpoint: metrics_rows)
            "rng": {"torch": torch.get_rng_state(), "numpy": _numpy_state(), "python": random.getstate(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
            "history": self.history,
            "config": to_yaml(self.cfg),  # a checkpoint alone rebuilds its model
        })

    def on_load_checkpoint(self, checkpoint):
        state = checkpoint.get("arch_zoo", {})
        rng = state.get("rng")
        if rng:
            torch.set_rng_state(rng["torch"])
            kind, keys, *rest = rng["numpy"]
            np.random.set_state((kind, keys.numpy().astype(np.uint32), *rest))
            random.setstate(rng["python"])
            if rng["cuda"] is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(rng["cuda"])
        self.history = list(state.get("history", []))


MEAN_TOKENS_FROM = 100_000  # examples read for the mean; a corpus store can hold billions of windows


def _target_tokens_per_batch(data: TaskData, batch_size: int) -> Optional[float]:
    """Mean number of predicted (non-ignored) tokens in a training batch; None for one label per example.
    Exact for up to MEAN_TOKENS_FROM examples, else over that many evenly spaced ones."""
    train = data.splits["train"]
    n = len(train)
    if not n or isinstance(train[0].labels, int):
        return None
    skip = objectives.objective(data.objective).label_offset  # (lm predicts labels[1:])
    picked = range(n) if n <= MEAN_TOKENS_FROM else (i * n // MEAN_TOKENS_FROM for i in range(MEAN_TOKENS_FROM))
    counts = [sum(1 for y in train[i].labels[skip:] if y != objectives.IGNORE) for i in picked]
    return batch_size * sum(counts) / len(counts)


def _numpy_state():
    """numpy's global RNG state with its key array as a tensor: checkpoints load with weights_only=True."""
    kind, keys, *rest = np.random.get_state()
    return (kind, torch.from_numpy(keys.astype(np.int64)), *rest)
