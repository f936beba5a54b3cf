"""The dashboards' libraries are optional extras: a missing one is a one-line user error that says
what to install, never an ImportError traceback."""
from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import ConfigError
from .mlflow_runs import check_reachable

EXTRAS = {"mlflow": "mlflow", "tensorboard": "tensorboard", "wandb": "wandb"}


def require(tool: str, key: str) -> ModuleType:
    """Import ``tool``'s library, or raise a ConfigError naming ``key`` and the pip command."""
    try:
        return importlib.import_module(tool)
    except ImportError:
        raise ConfigError(key, f"{tool} is not installed; install it with: pip install 'arch-zoo[{EXTRAS[tool]}]'") \
            from None


def check_logging(logging) -> None:
    """Before a run writes anything: the enabled loggers' libraries, and an MLflow server that answers.
    (``logging``: the config's LoggingConfig.)"""
    if logging.tensorboard.enabled:
        require("tensorboard", "logging.tensorboard")
    if logging.mlflow.enabled:
        require("mlflow", "logging.mlflow")
        if logging.mlflow.tracking_uri:
            check_reachable(logging.mlflow.tracking_uri, "logging.mlflow.tracking_uri")
