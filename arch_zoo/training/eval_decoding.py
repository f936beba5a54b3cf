"""Which path exact-match evaluation decodes through (``train.exact_match_decoding``), and what it cost.

``compiled`` (static cache + one compiled step per shape, generation/compiled.py) saves time on every
decode step but costs a compile per shape first; ``auto`` takes it when the run's evaluations decode
enough steps to repay that (AUTO_MIN_STEPS, from the decoding benchmark: docs/benchmarks.md) and a
compiler is there. summary.json's ``exact_match_decoding`` says what was asked, what ran and why, and
the seconds spent decoding and compiling, so a run's evaluation share can be read off it.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Dict, List, Optional

import torch

from ..compile_support import compiler_missing
from ..config import TrainConfig
from ..errors import ConfigError

# Decode steps (one token for every row of a batch) a run's evaluations must take before compiling
# pays. Measured on the loaded 2-core CPU (docs/benchmarks.md#decoding-compiled): 60-90 s to compile a
# shape with a cold inductor cache, ~5 s warm, against 3-6 ms saved a step at batch 8, so it pays
# after ~1,000 (warm) to ~15,000 (cold) steps; 5,000 lies between.
AUTO_MIN_STEPS = 5000


def decode_steps(t: TrainConfig, examples: Dict[str, list]) -> int:
    """Upper bound on the decode steps of a run's exact-match evaluations (every batch runs to its longest target)."""
    evaluations = {"val": t.max_steps // t.val_every, "test": 1}
    rows = t.eval_batch_size or t.batch_size
    total = 0
    for stage, items in examples.items():
        if items:
            longest = max(len(e.target_ids) for e in items) + 1
            total += evaluations.get(stage, 1) * math.ceil(len(items) / rows) * longest
    return total


def check_compiled_decoding(t: TrainConfig, cuda: bool) -> None:
    """`compiled` asked where no compiler is: one line before training."""
    if t.exact_match_decoding == "compiled" and (reason := compiler_missing(cuda)) is not None:
        raise ConfigError("train.exact_match_decoding", f"{reason}, or set train.exact_match_decoding=eager")


class EvalDecoding:
    def __init__(self, t: TrainConfig, examples: Dict[str, list]):
        self.asked = t.exact_match_decoding
        self.steps = decode_steps(t, examples)
        self.used: Optional[str] = None
        self.why = ""
        self.decode_s = 0.0
        self.steps_used: List[object] = []

    def _choose(self, model) -> None:
        from ..generation.compiled import check_compilable

        device = next(model.parameters()).device
        if self.asked == "eager":
            self.used, self.why = "eager", "asked"
            return
        try:
            check_compilable(model, device, use_cache=True)
        except ConfigError as exc:
            if self.asked == "compiled":
                raise ConfigError("train.exact_match_decoding", exc.message) from None
            self.used, self.why = "eager", f"auto: {exc.message}"
            return
        if self.asked == "compiled":
            self.used, self.why = "compiled", "asked"
        elif self.steps >= AUTO_MIN_STEPS:
            self.used, self.why = "compiled", f"auto: ~{self.steps} decode steps, compiling pays from {AUTO_MIN_STEPS}"
        else:
            self.used, self.why = "eager", f"auto: ~{self.steps} decode steps, compiling pays from {AUTO_MIN_STEPS}"

    def run(self, model, decode: Callable[[bool], list]) -> list:
        """``decode(compile)`` through the chosen path, timed."""
        if self.used is None:
            self._choose(model)
        start = time.perf_counter()
        try:
            return decode(self.used == "compiled")
        finally:
            self.decode_s += time.perf_counter() - start

    def info(self, model) -> Dict[str, object]:
        from ..generation.compiled import compiled_steps

        steps = compiled_steps(model)
        return {"asked": self.asked, "used": self.used, "why": self.why, "estimated_steps": self.steps,
                "decode_s": round(self.decode_s, 3),
                "compile_s": round(sum(s.compile_s or 0.0 for s in steps), 3) if steps else None,
                "compiled_shapes": [[s.cache.batch, s.cache.columns] for s in steps]}
