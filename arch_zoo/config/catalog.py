"""The model's component families, listed: the registries a ``ModelConfig`` is parsed by.

Config lists these alone: the families an experiment adds (tasks, tokenizers, optimizers, schedules)
live in packages that build on config, and ``arch_zoo.experiment.all_registries`` adds them (what
``arch-zoo components``, ``describe`` and the test grid list)."""
from __future__ import annotations

from ..components import (attention, attention_patterns, feedforward, heads, init, mixers, norms, parametrization,
                          placements, positions)
from . import model_families  # noqa: F401  (every family a model names, moe's registration too)

MODEL_FAMILIES = (positions.POSITIONS, norms.NORMS, placements.PLACEMENTS, mixers.MIXERS, attention_patterns.ATTENTION,
                  attention.KERNELS, feedforward.FEEDFORWARD, init.INITS, parametrization.PARAMETRIZATIONS, heads.HEADS)

