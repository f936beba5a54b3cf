"""YaRN (Peng et al. 2023): RoPE stretched past the context it was trained at (gpt-oss, DeepSeek-V3).

Each rotated pair's frequency is blended between the original one (high frequencies, which turn
many times within the original context, are kept: extrapolation) and the original divided by
``factor`` (low frequencies, which do not complete a turn there, are interpolated). The blend is a
linear ramp over the pair index, between the dims at which a frequency completes ``beta_fast`` and
``beta_slow`` turns within ``original_max_seq_len`` positions. cos and sin are then both multiplied
by an attention factor (0.1 ln(factor) + 1 unless set), which scales q.k by its square: the softmax
is sharpened as the context stretches.

The frequencies follow Hugging Face's ``_compute_yarn_parameters`` (``rope_type: yarn``), its
``truncate`` (integer ramp ends) and ``mscale`` / ``mscale_all_dim`` (DeepSeek's attention factor)
included, so imported models compute what HF's do."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from ..errors import ConfigError
from .positions import POSITIONS, PositionContext, RopeOptions, Rotary


@dataclass(frozen=True)
class YarnOptions(RopeOptions):
    factor: float = 32.0  # how many times longer than original_max_seq_len the context may grow
    original_max_seq_len: int = 4096  # the context the frequencies were trained at
    beta_fast: float = 32.0  # pairs turning more often than this within the original context keep their frequency
    beta_slow: float = 1.0  # pairs turning less often than this are divided by factor; a ramp between
    truncate: bool = True  # round the ramp's ends to whole dims (HF's default; gpt-oss: false)
    attention_factor: Optional[float] = None  # cos and sin scale; null: 0.1 ln(factor) + 1, or from mscale
    mscale: Optional[float] = None  # with mscale_all_dim, the attention factor is m(mscale) / m(mscale_all_dim),
    mscale_all_dim: Optional[float] = None  # m(s) = 0.1 s ln(factor) + 1 (DeepSeek's)

    def __post_init__(self):
        super().__post_init__()
        if self.factor < 1.0:
            raise ConfigError("factor", f"must be >= 1, got {self.factor}")
        if self.original_max_seq_len < 1:
            raise ConfigError("original_max_seq_len", f"must be positive, got {self.original_max_seq_len}")
        for name in ("beta_fast", "beta_slow", "attention_factor"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(name, f"must be positive, got {value}")


def _mscale(factor: float, scale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * scale * math.log(factor) + 1.0


def yarn_attention_factor(options: YarnOptions) -> float:
    if options.attention_factor is not None:
        return options.attention_factor
    if options.mscale and options.mscale_all_dim:
        return _mscale(options.factor, options.mscale) / _mscale(options.factor, options.mscale_all_dim)
    return _mscale(options.factor)


def yarn_inv_freq(options: YarnOptions, rot: int) -> torch.Tensor:
    """(rot / 2,) float64 frequencies, one per rotated pair."""
    base, original = options.base, options.original_max_seq_len

    def dim_of(turns: float) -> float:  # the (fractional) dim at which a frequency turns ``turns`` times
        return rot * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_of(options.beta_fast), dim_of(options.beta_slow)
    if options.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rot - 1)
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    ramp = ((torch.arange(rot // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extrapolated = 1.0 / options.base ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    return extrapolated / options.factor * ramp + extrapolated * (1 - ramp)


@POSITIONS.register("yarn", YarnOptions, "RoPE extended with YaRN (Peng et al. 2023; gpt-oss): low frequencies "
                                         "interpolated by factor, high ones kept, a ramp between; cos and sin "
                                         "scaled by the attention factor")
class Yarn(Rotary):
    # in the grid's 5-13 tokens: a ramp inside head_dim 8, and every frequency moved
    example_options = {"factor": 4.0, "original_max_seq_len": 16, "beta_fast": 4.0, "beta_slow": 0.5}

    def __init__(self, options: YarnOptions, ctx: PositionContext):
        super().__init__(options, ctx)
        self.register_buffer("inv_freq", yarn_inv_freq(options, self.rot).float(), persistent=False)
        self.attention_factor = yarn_attention_factor(options)

    def _cos_sin(self, pos):
        cos, sin = super()._cos_sin(pos)
        return cos * self.attention_factor, sin * self.attention_factor
