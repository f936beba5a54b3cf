"""What a run spends: tokens per optimizer step, the steps that spend a reference's tokens or bytes,
and analytic training FLOPs (matching.py, scale_plan.py)."""
from __future__ import annotations

from typing import Optional

from ..config import ExperimentConfig
from ..errors import ConfigError


def tokens_per_step(cfg: ExperimentConfig, tokens_per_example: float) -> float:
    """Training tokens per optimizer step (real tokens, source and target alike, on average over the
    train split; per process times the device count)."""
    return cfg.train.examples_per_step * tokens_per_example


def training_flops(steps: int, tokens: int, flops_per_token: float) -> float:
    """Analytic training FLOPs: forward + backward is about 3x the forward (Kaplan et al. 2020)."""
    return 3.0 * flops_per_token * tokens * steps


def matched_steps(target: float, per_step: float) -> int:
    """The whole number of steps whose spend (``per_step`` tokens, bytes or FLOPs each) is nearest to
    ``target``: within half a step of it, so within one batch."""
    return max(1, round(target / per_step))


def step_bytes(tokens: float, bytes_per_token: Optional[float], name: str) -> float:
    """Bytes of text one step reads; a variant whose tokens' bytes are unknown cannot match bytes."""
    if not bytes_per_token:
        raise ConfigError("budget.match", f"bytes needs each variant's bytes per token, and variant {name}'s "
                          "tokenizer cannot say how many bytes its tokens cover (a text task with a char, byte, "
                          "BPE or byte-level pretrained tokenizer can); match tokens instead")
    return tokens * bytes_per_token
