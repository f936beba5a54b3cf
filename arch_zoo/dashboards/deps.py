"""The dashboards' libraries are optional extras: a missing one is a one-line user error that says
what to install, never an ImportError traceback."""
from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import ConfigError

EXTRAS = {"mlflow": "mlflow", "tensorboard": "tensorboard", "wandb": "wandb"}


def require(tool: str, key: str) -> ModuleType:
    """Import ``tool``'s library, or raise a ConfigError naming ``key`` and the pip command."""
    try:
        return importlib.import_module(tool)
    except ImportError:
        raise ConfigError(key, f"{tool} is not installed; install it with: pip install 'arch-zoo[{EXTRAS[tool]}]'") \
            from None
