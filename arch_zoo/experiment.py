"""An experiment, loaded: the edge above config, data and recipes where a whole experiment is read.

config reads YAML and checks what it owns (the model, ``train``'s own numbers); the families an
experiment adds on top (tasks, tokenizers, optimizers, schedules) are imported here as code, and the
task's and the recipe's checks of a whole config run here, after config's, in that order (which
mistake is named first). So config imports nothing that builds on it, and everything that reads an
experiment (``train``, ``sweep``, ``describe``, a run directory's ``config.yaml``) comes through
``load``. What needs only a model (``build_model``, ``config.loading.model_config``) stays in config.

``all_registries`` lists every family, the model's and the experiment's: ``arch-zoo components``,
``describe``, the invariant grids and plugin interfaces read it."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Mapping, Sequence, Union

from .config import plugins as user_plugins
from .config.catalog import MODEL_FAMILIES
from .config.loading import load_dict
from .config.parse import from_dict
from .config.schema import ExperimentConfig
from .config.validation import validate as validate_config
from .data import pretrained  # noqa: F401  (registers the 'pretrained' tokenizer beside char, byte, bpe)
from .data.tasks import TASKS, validate_task
from .data.tokenizers import TOKENIZERS
from .recipes import OPTIMIZERS, SCHEDULES, check_recipe
from .registry import Registry

EXPERIMENT_FAMILIES = (TASKS, TOKENIZERS, OPTIMIZERS, SCHEDULES)
CHECKS = (check_recipe, validate_task)  # train, then task: the order their mistakes are named in


def all_registries() -> Dict[str, Registry]:
    return {r.family: r for r in (*MODEL_FAMILIES, *EXPERIMENT_FAMILIES)}


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` checked by config (its model resolved), then by its recipe and its task."""
    cfg = validate_config(cfg)
    for check in CHECKS:
        check(cfg)
    return cfg


def load(source: Union[str, Path, Mapping], overrides: Sequence[str] = ()) -> ExperimentConfig:
    """A YAML file (or ``preset:NAME``, or a mapping) with OmegaConf dotlist overrides
    (``model.position=rope``) as a validated ``ExperimentConfig``. Every error is a ``ConfigError``
    naming the dotted key, the bad value and the choices."""
    data = load_dict(source, overrides)
    user_plugins.load_plugins(user_plugins.checked(data.get("plugins")))  # before validation names their components
    return validate(from_dict(ExperimentConfig, data))
