"""A planned run's WSD-S budgets given as training tokens (``train.schedule.decay_tokens``), checked
when the sweep is planned, before anything is written."""
from __future__ import annotations

from ..config import ExperimentConfig
from ..errors import ConfigError
from ..recipes.wsds import branches, decay_tokens, step_tokens


def check_decay_tokens(cfg: ExperimentConfig, sizer, blame) -> None:
    """A planned run's token budgets, refused as its training would refuse them (before anything is
    written): the task's steps must train the same tokens, and no budget may pass the run's. Each
    variant keeps the token counts as written, so under ``budget:`` matching (its own max_steps and
    tokens per step) every variant branches at the same tokens."""
    if not decay_tokens(cfg.train):
        return
    sizer.vocab_size(cfg, blame)
    data = sizer.data.get(sizer._key(cfg))
    try:
        branches(cfg.train, step_tokens(cfg, data.splits["train"] if data is not None else None))
    except ConfigError as exc:
        raise blame(exc) from None
