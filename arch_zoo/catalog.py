"""Every built-in component family, in one place: importing this module fills the registries.

Sits above the components and below validation and loading; ``arch-zoo components``,
``describe`` and the test grid list the families through ``all_registries``."""
from __future__ import annotations

from typing import Dict

from .components import attention, feedforward, heads, init, norms, placements, positions
from .data import tasks, tokenizers
from .registry import Registry


def all_registries() -> Dict[str, Registry]:
    regs = [positions.POSITIONS, norms.NORMS, placements.PLACEMENTS, attention.ATTENTION, feedforward.FEEDFORWARD, init.INITS,
            heads.HEADS, tasks.TASKS, tokenizers.TOKENIZERS]
    return {r.family: r for r in regs}
