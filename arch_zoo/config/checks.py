"""Checks of a whole experiment config that the families beside the config own: the recipe's
(``train``) and the task's (``task``). Each registers itself when its package is imported, which
``catalog`` does before any experiment is read, so validation imports neither and the model path
(``arch_zoo.models``) loads no task, tokenizer or recipe.

A check takes the validated ``ExperimentConfig`` and raises ``ConfigError`` naming the key."""
from __future__ import annotations

from typing import Callable, Dict, List

from .schema import ExperimentConfig

Check = Callable[[ExperimentConfig], None]
ORDER = ("train", "task")  # the order they run in (which mistake is named first); others after, by key
_CHECKS: Dict[str, Check] = {}


def experiment_check(key: str) -> Callable[[Check], Check]:
    """Register the decorated function as the check of the config section ``key``."""
    def register(check: Check) -> Check:
        _CHECKS[key] = check
        return check

    return register


def experiment_checks() -> List[Check]:
    return [_CHECKS[k] for k in sorted(_CHECKS, key=lambda k: (ORDER.index(k) if k in ORDER else len(ORDER), k))]
