"""The component families a model config names, imported in one place: enough to parse and validate
a ``ModelConfig``, so the model path (``arch_zoo.models``) loads no task, tokenizer or recipe.
``catalog`` lists their registries; ``arch_zoo.experiment`` adds an experiment's families."""
from __future__ import annotations

from ..components import (attention, attention_patterns, feedforward, heads, init, moe, norms,  # noqa: F401
                          parametrization, placements, positions)
