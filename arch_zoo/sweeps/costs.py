"""What a run spends: tokens per optimizer step and analytic training FLOPs (plan.py, scale_plan.py)."""
from __future__ import annotations

from ..config import ExperimentConfig


def tokens_per_step(cfg: ExperimentConfig, tokens_per_example: float) -> float:
    """Training tokens per optimizer step (real tokens, source and target alike, on average over the
    train split; per process times the device count)."""
    t = cfg.train
    devices = len(t.devices) if isinstance(t.devices, (list, tuple)) else t.devices if isinstance(t.devices, int) else 1
    return t.batch_size * t.accumulate_grad_batches * max(1, devices) * tokens_per_example


def training_flops(steps: int, tokens: int, flops_per_token: float) -> float:
    """Analytic training FLOPs: forward + backward is about 3x the forward (Kaplan et al. 2020)."""
    return 3.0 * flops_per_token * tokens * steps
