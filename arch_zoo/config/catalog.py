"""Every built-in component family, in one place: importing this module fills the registries.

The model's families are components, below config, imported as code. The families an experiment
adds (tasks, tokenizers, optimizers, schedules) live in packages beside config that build on it (their
checks of a whole experiment register into ``checks``), so config does not import their code: it
names the packages that fill those registries and imports them by name, as it imports a user's
plugins. ``arch-zoo components``, ``describe`` and the test grid list the families through
``all_registries``."""
from __future__ import annotations

import importlib
from typing import Dict

from ..components import (attention, attention_patterns, feedforward, heads, init, mixers, moe, norms,  # noqa: F401
                          parametrization, placements, positions)
from ..registry import Registry, family_registry
from . import model_families  # noqa: F401  (every family a model names, moe's registration too)

# family -> the package that registers its built-ins (and the experiment check of its config section)
EXPERIMENT_FAMILIES = {"tasks": "arch_zoo.data.tasks", "tokenizers": "arch_zoo.data",
                       "optimizers": "arch_zoo.recipes", "schedules": "arch_zoo.recipes"}
MODEL_FAMILIES = (positions.POSITIONS, norms.NORMS, placements.PLACEMENTS, mixers.MIXERS, attention_patterns.ATTENTION,
                  attention.KERNELS, feedforward.FEEDFORWARD, init.INITS, parametrization.PARAMETRIZATIONS, heads.HEADS)


def load_experiment_families() -> None:
    for package in dict.fromkeys(EXPERIMENT_FAMILIES.values()):
        importlib.import_module(package)


load_experiment_families()


def all_registries() -> Dict[str, Registry]:
    regs = [*MODEL_FAMILIES, *(family_registry(f) for f in EXPERIMENT_FAMILIES)]
    return {r.family: r for r in regs}
