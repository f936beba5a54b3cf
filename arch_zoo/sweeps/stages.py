"""A tuned plan's two stages counted before stage 1 has chosen: its variants and stage 2's size, which
``--dry-run`` shows and the sweep's progress counter includes from its first run."""
from __future__ import annotations

from typing import Dict

from ..run_names import variant_name
from .plan import Plan
from .scale import transfer_lookup
from .spec import expand


def stage_two_size(plan: Plan) -> int:
    """The runs a tuned plan's stage 2 holds when every variant gets a choice: each on every seed."""
    return len(stage_variants(plan)) * len(plan.spec.seeds or [None])


def stage_variants(plan: Plan) -> Dict[str, bool]:
    """A tuned plan's variants (names without the tuned key) -> whether the baseline is among them
    (without a spec baseline, only the first value's runs are marked, so any of them counts)."""
    out: Dict[str, bool] = {}
    for r in plan.runs:
        out[r.tune["variant"]] = out.get(r.tune["variant"], False) or r.is_baseline
    scale = plan.spec.scale
    if scale is not None and scale.lr == "transfer":  # stage 1 tunes the smallest rung; stage 2 trains them all
        first = transfer_lookup(scale)
        out = {variant_name(v.settings, plan.names): out.get(variant_name(first(v.settings), plan.names), False)
               for v in expand(plan.spec)}
    return out
