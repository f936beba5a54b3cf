"""Learning-rate schedules (``train.schedule``): a multiplier on every group's learning rate after
``step`` optimizer steps, a pure function of the step, so a resumed run continues it exactly.

Each starts with ``train.warmup_steps`` of linear warmup. A schedule is one class, registered with
its options; ``__call__(step)`` is the multiplier, ``check`` refuses settings it cannot run."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Literal, Optional

from ..config import TrainConfig
from ..errors import ConfigError
from ..registry import NoOptions, Registry

SCHEDULES = Registry("schedules", "learning-rate schedule")


class Schedule:
    def __init__(self, options, train: TrainConfig):
        self.options = options
        self.warmup = train.warmup_steps
        self.max_steps = train.max_steps
        self.floor = train.min_lr_ratio

    @staticmethod
    def check(options, train: TrainConfig, key: str) -> None:
        """Raise ConfigError for a train config this schedule cannot run (``key``: train.schedule)."""

    @staticmethod
    def warning(options, train: TrainConfig, key: str) -> Optional[str]:
        """A setting this schedule runs, but not as its name promises (said at the start of training
        and by ``sweep --dry-run``); None when there is nothing to say."""
        return None

    def __call__(self, step: int) -> float:
        raise NotImplementedError


@SCHEDULES.register("constant", NoOptions, "warmup, then train.lr")
class Constant(Schedule):
    def __call__(self, step: int) -> float:
        s, w = step + 1, self.warmup
        return s / w if w and s <= w else 1.0


@SCHEDULES.register("cosine", NoOptions, "warmup, then a half cosine to lr * train.min_lr_ratio at max_steps")
class Cosine(Schedule):
    def __call__(self, step: int) -> float:
        s, w = step + 1, self.warmup
        if w and s <= w:
            return s / w
        progress = min(1.0, (s - w) / max(1, self.max_steps - w))
        return self.floor + (1 - self.floor) * 0.5 * (1 + math.cos(math.pi * progress))


@SCHEDULES.register("noam", NoOptions, "warmup, then 1/sqrt(step) decay (Vaswani et al. 2017), peaking at train.lr")
class Noam(Schedule):
    """Vaswani et al.'s d_model^-0.5 * min(s^-0.5, s * w^-1.5) normalised to peak at 1 (set train.lr
    to d_model^-0.5 * warmup^-0.5 for the paper's value)."""

    @staticmethod
    def check(options, train: TrainConfig, key: str) -> None:
        if train.warmup_steps == 0:
            raise ConfigError(f"{key.rpartition('.')[0] or 'train'}.warmup_steps", "the noam schedule needs warmup_steps > 0")

    def __call__(self, step: int) -> float:
        s, w = step + 1, self.warmup
        return min(s / w, math.sqrt(w / s))


@dataclass(frozen=True)
class WSDOptions:
    decay_fraction: float = 0.2  # of train.max_steps, at the end (Hägele et al. 2024: 20%)
    decay_shape: Literal["linear", "1-sqrt"] = "1-sqrt"  # 1-sqrt: Hägele et al.'s best
    # WSD-S (recipes/wsds.py): budgets as fractions of max_steps, each a decay branched from the stable
    # phase and recorded as a run of that length; the run itself is the budget at 1.0
    decays: Optional[List[float]] = None
    # or as training tokens (a key of its own, so 1 token and the whole run never read alike): each is
    # converted to the steps that train it where every step trains the same tokens (recipes/wsds.py)
    decay_tokens: Optional[List[int]] = None

    def __post_init__(self):
        if not 0.0 < self.decay_fraction <= 1.0:
            raise ConfigError("decay_fraction", f"must be in (0, 1], got {self.decay_fraction}")
        if self.decays is not None:
            outside = [d for d in self.decays if not 0.0 < d <= 1.0]
            if outside or not self.decays:
                raise ConfigError("decays", f"fractions of max_steps in (0, 1], got {list(self.decays)}")
            _increasing("decays", self.decays)
        if self.decay_tokens is not None:
            if self.decays is not None:
                raise ConfigError("decay_tokens", "give the budgets as decays (fractions of max_steps) or as "
                                  "decay_tokens (training tokens), not both")
            if not self.decay_tokens or any(t <= 0 for t in self.decay_tokens):
                raise ConfigError("decay_tokens", f"training token counts > 0, got {list(self.decay_tokens)}")
            _increasing("decay_tokens", self.decay_tokens)


def _increasing(key: str, budgets: List[float]) -> None:
    if any(b <= a for a, b in zip(budgets, budgets[1:])):
        raise ConfigError(key, f"must be in increasing order, got {list(budgets)}")


@SCHEDULES.register("wsd", WSDOptions, "warmup-stable-decay (MiniCPM; Hägele et al. 2024): warmup, train.lr, then "
                    "a linear or 1-sqrt decay to lr * train.min_lr_ratio over the last decay_fraction of steps")
class WarmupStableDecay(Schedule):
    """The decay spans the last round(decay_fraction * max_steps) steps (at least one), starting no
    earlier than the end of warmup; at step s of it (d steps in all) the multiplier is floor + (1 - floor) * (1 - s/d)
    (linear) or (1 - sqrt(s/d)) (1-sqrt), so the last step trains at the floor, as cosine's does."""

    def __init__(self, options: WSDOptions, train: TrainConfig):
        super().__init__(options, train)
        self.decay_start = max(self.warmup, self.max_steps - self.decay_steps(options, train))

    @staticmethod
    def decay_steps(options: WSDOptions, train: TrainConfig) -> int:
        return max(1, round(options.decay_fraction * train.max_steps))

    @staticmethod
    def warning(options: WSDOptions, train: TrainConfig, key: str) -> Optional[str]:
        decay = WarmupStableDecay.decay_steps(options, train)
        if train.warmup_steps + decay <= train.max_steps:
            return None
        section = key.rpartition(".")[0] or "train"
        return (f"{key}: wsd's warmup ({section}.warmup_steps={train.warmup_steps}) plus its decay "
                f"({decay} steps, decay_fraction={options.decay_fraction:g}) exceed {section}.max_steps="
                f"{train.max_steps}: there is no stable phase and the decay is cut to "
                f"{max(0, train.max_steps - train.warmup_steps)} steps; raise max_steps or lower warmup_steps or "
                f"decay_fraction")

    def __call__(self, step: int) -> float:
        s, w = step + 1, self.warmup
        if w and s <= w:
            return s / w
        if s <= self.decay_start:
            return 1.0
        progress = min(1.0, (s - self.decay_start) / max(1, self.max_steps - self.decay_start))
        left = 1 - progress if self.options.decay_shape == "linear" else 1 - math.sqrt(progress)
        return self.floor + (1 - self.floor) * left
