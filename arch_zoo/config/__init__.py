"""The experiment config, one package with one job per module.

- ``schema``: the typed dataclasses (a leaf; component fields name their registry family), its value
  types (``ComponentSpec``) and plain-data conversions in ``arch_zoo.coerce``, beside the registry;
- ``kinds``: what each model kind has (stacks, cross-attention, ...), read instead of the kind's name;
- ``parse``: plain data -> dataclasses, component fields through their registries;
- ``catalog``: the model's component families, listed (``arch_zoo.experiment`` adds an experiment's);
- ``plugins``: users' own component modules, imported before validation;
- ``validation``: checks across keys and against the registries;
- ``layers``: ``model.layers`` resolved once into per-layer model configs (a ``ResolvedModel``, which
  ``build_model`` builds);
- ``loading``: the only place YAML is read: read, merge overrides, a model of it, save.

Importing the package gives the schema only, so any layer can name it cheaply;
``from arch_zoo.experiment import load`` reads and validates an experiment's YAML file (its task and
recipe checked by the packages that own them, above config)."""
from ..coerce import ComponentSpec, first_difference, to_dict  # noqa: F401
from .schema import (  # noqa: F401
    ExperimentConfig,
    LoggingConfig,
    MLflowConfig,
    ModelConfig,
    TensorBoardConfig,
    TrainConfig,
    WandbConfig,
)
