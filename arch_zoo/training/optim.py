"""Optimizers and learning-rate schedules (each schedule with linear warmup)."""
from __future__ import annotations

import math

import torch
from torch import nn

from ..config import TrainConfig


def param_groups(model: nn.Module, weight_decay: float):
    """Weight decay on matrices only: never on biases, norm gains or embeddings (GPT-2/BERT practice)."""
    decay, no_decay, seen = [], [], set()
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for p in model.parameters():
        if id(p) in seen or not p.requires_grad:
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 and id(p) not in embeddings else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, t: TrainConfig) -> torch.optim.Optimizer:
    groups = param_groups(model, t.weight_decay)
    if t.optimizer == "adamw":
        # the fused kernel is CUDA's (one launch for all params); elsewhere the default (foreach) path
        fused = all(p.is_cuda for g in groups for p in g["params"]) and any(g["params"] for g in groups)
        return torch.optim.AdamW(groups, lr=t.lr, betas=tuple(t.betas), **({"fused": True} if fused else {}))
    if t.optimizer == "adam":
        return torch.optim.Adam(groups, lr=t.lr, betas=tuple(t.betas))
    return torch.optim.SGD(groups, lr=t.lr, momentum=t.momentum)


def lr_multiplier(step: int, t: TrainConfig) -> float:
    """Multiplier on train.lr after ``step`` optimizer steps.

    constant: warmup then 1. cosine: warmup then a half cosine to min_lr_ratio at max_steps.
    noam: warmup then 1/sqrt decay, i.e. Vaswani et al.'s d_model^-0.5 * min(s^-0.5, s * w^-1.5)
    normalised to peak at 1 (set train.lr to d_model^-0.5 * warmup^-0.5 for the paper's value)."""
    s = step + 1
    w = t.warmup_steps
    if t.schedule == "noam":
        return min(s / w, math.sqrt(w / s))
    if w and s <= w:
        return s / w
    if t.schedule == "constant":
        return 1.0
    progress = min(1.0, (s - w) / max(1, t.max_steps - w))
    return t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, t: TrainConfig):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_multiplier(step, t))
