"""``seeds: {start, max, step, rule, alpha, first}``: seeds added in rounds to the comparisons still
undecided (``seed_rounds.py`` plans the rounds; ``arch_zoo/sequential.py`` holds the stopping rule).
A leaf: the standard library alone, so a spec is read without scipy or torch."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, List, Mapping, Tuple

from ..errors import ConfigError, did_you_mean

RULE_NAMES = {"obrien-fleming": "O'Brien-Fleming", "pocock": "Pocock"}  # sequential.py's spending
RULES = tuple(RULE_NAMES)
KEYS = ("start", "max", "step", "rule", "alpha", "first")


@dataclass(frozen=True)
class AdaptiveSeeds:
    start: int  # every variant's first round
    max: int  # the most seeds a comparison gets
    step: int = 1  # seeds a round adds to each open comparison
    rule: str = "obrien-fleming"
    alpha: float = 0.05  # two-sided, over the whole family of comparisons
    first: int = 0  # the seeds are first, first + 1, ...

    @property
    def seeds(self) -> List[int]:
        return list(range(self.first, self.first + self.max))

    @property
    def looks(self) -> Tuple[int, ...]:
        """The seed counts at which a comparison is judged: start, start + step, ..., and max."""
        return tuple(sorted(set(range(self.start, self.max, self.step)) | {self.max}))


def parse_adaptive(value: Mapping) -> AdaptiveSeeds:
    for k in value:
        if k not in KEYS:
            raise ConfigError(f"seeds.{k}", f"unknown key{did_you_mean(str(k), KEYS)}; allowed: {', '.join(KEYS)}")
    for k in ("start", "max"):
        if k not in value:
            raise ConfigError(f"seeds.{k}", "missing: adaptive seeds need start and max, e.g. seeds: {start: 3, max: 10}")
    start, most = _count(value["start"], "seeds.start", 2), _count(value["max"], "seeds.max", 2)
    if most < start:
        raise ConfigError("seeds.max", f"is {most}, below seeds.start ({start}): max is the most seeds a comparison "
                          "may get, so it is at least start")
    step = _count(value.get("step", 1), "seeds.step", 1)
    rule = value.get("rule", RULES[0])
    if rule not in RULES:
        raise ConfigError("seeds.rule", f"expected one of {', '.join(RULES)}, got {rule!r}{did_you_mean(str(rule), RULES)}")
    alpha = value.get("alpha", 0.05)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1 or math.isnan(alpha):
        raise ConfigError("seeds.alpha", f"expected a level in (0, 1), e.g. 0.05, got {alpha!r}")
    first = value.get("first", 0)
    if isinstance(first, bool) or not isinstance(first, int):
        raise ConfigError("seeds.first", f"expected an integer (the first seed), got {first!r}")
    return AdaptiveSeeds(start, most, step, rule, float(alpha), first)


def _count(value: Any, key: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(key, f"expected an integer of at least {least}, got {value!r}")
    return value
