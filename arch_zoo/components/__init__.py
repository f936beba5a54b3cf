"""Swappable Transformer parts, one file and one registry per family.

Registration is the decorator's job; this file is the one place that imports every built-in
family module, so importing any component (or ``arch_zoo.models``) registers them all: no module
imports another only for its registrations. Plugins register the same way when ``plugins:``
imports them (``arch_zoo.config.plugins``)."""
from . import (attention, attention_patterns, feedforward, heads, init, masks, mixers, moe, norms,  # noqa: F401
               placements, positions)
from . import yarn  # noqa: F401
