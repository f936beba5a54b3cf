"""Every built-in component family, in one place: importing this module fills the registries.

Sits above the components and below validation and loading; ``arch-zoo components``,
``describe`` and the test grid list the families through ``all_registries``."""
from __future__ import annotations

from typing import Dict

from .. import recipes
from ..components import (attention, attention_patterns, feedforward, heads, init, mixers, moe, norms,  # noqa: F401
                          parametrization, placements, positions)
from ..data import tasks, tokenizers
from ..registry import Registry
from . import model_families  # noqa: F401  (every family a model names, moe's registration too)


def all_registries() -> Dict[str, Registry]:
    regs = [positions.POSITIONS, norms.NORMS, placements.PLACEMENTS, mixers.MIXERS, attention_patterns.ATTENTION, attention.KERNELS, feedforward.FEEDFORWARD, init.INITS,
            parametrization.PARAMETRIZATIONS, heads.HEADS, tasks.TASKS, tokenizers.TOKENIZERS, recipes.OPTIMIZERS,
            recipes.SCHEDULES]
    return {r.family: r for r in regs}
