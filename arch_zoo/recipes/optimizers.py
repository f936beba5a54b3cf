"""Optimizers (``train.optimizer``): one class and one registration each, as model components are.

A recipe turns a model into a torch optimizer. Its parameter groups come from ``param_groups``: weight
decay (``train.weight_decay``) on matrices only, never on biases, norm gains or embeddings (GPT-2/BERT
practice), and each group's learning-rate and decay multipliers from the model's parametrization,
which the recipe asks by its ``update`` kind (components.parametrization.UPDATES); no optimizer knows
any parametrization by name. A plugin subclasses ``OptimizerRecipe``, sets ``update`` and writes
``make(groups)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Sequence, Tuple

import torch
from torch import nn

from ..components.parametrization import INPUT, Parametrization, Standard, parameter_roles
from ..config import TrainConfig
from ..errors import ConfigError
from ..registry import NoOptions, Registry

OPTIMIZERS = Registry("optimizers", "optimizer")

Named = Sequence[Tuple[str, nn.Parameter, str]]  # (name, parameter, role), as parameter_roles gives them


class Built(NamedTuple):
    optimizer: torch.optim.Optimizer
    groups: List[Dict[str, Any]]  # per group: which part, its lr and decay, and its parameters' names (summary.json)
    lr_group: int  # a group at train.lr itself (times the schedule): the one logged as `lr`


def parametrization_of(model: nn.Module) -> Parametrization:
    """The model's own (arch_zoo models build one from model.parametrization); ``standard`` otherwise."""
    found = getattr(model, "parametrization", None)
    return found if found is not None else Standard(NoOptions(), getattr(model, "config", None))


def param_groups(named: Named, parametrization: Parametrization, update: str, lr: float, weight_decay: float,
                 decay_all: bool = False) -> Tuple[List[Dict[str, Any]], List[List[str]]]:
    """(groups, names per group): the decayed groups first, then the rest; within each, one group per
    (lr, decay) multiplier pair in order of first appearance, and always at least one (maybe empty),
    so a standard model has the two groups [decayed, not decayed] whatever its parameters."""
    parts: Dict[bool, Dict[Tuple[float, float], Tuple[list, list]]] = {True: {}, False: {}}
    for name, p, role in named:
        decay = decay_all or (p.dim() >= 2 and role != INPUT)
        key = (parametrization.lr_multiplier(role, update), parametrization.weight_decay_multiplier(role, update))
        params, names = parts[decay].setdefault(key, ([], []))
        params.append(p)
        names.append(name)
    groups, names = [], []
    for decay in (True, False):
        for (lr_mult, wd_mult), (params, group_names) in (parts[decay] or {(1.0, 1.0): ([], [])}).items():
            group = {"params": params, "weight_decay": weight_decay * wd_mult if decay else 0.0}
            if lr_mult != 1.0:
                group["lr"] = lr * lr_mult
            groups.append(group)
            names.append(group_names)
    return groups, names


class OptimizerRecipe:
    """Builds the torch optimizer for a model. ``update``: how its step scales with the gradient
    (one of components.parametrization.UPDATES), which decides the parametrization's learning-rate rule."""

    update = "adam"

    def __init__(self, options, train: TrainConfig):
        self.options, self.train = options, train

    @staticmethod
    def check(options, train: TrainConfig, key: str) -> None:
        """Raise ConfigError for settings it cannot train with (``key``: train.optimizer)."""

    def updates(self) -> Tuple[str, ...]:
        """Every update kind its groups use (validation asks the parametrization for a rule for each)."""
        return (self.update,)

    def make(self, groups: List[Dict[str, Any]]) -> torch.optim.Optimizer:
        raise NotImplementedError

    def __call__(self, model: nn.Module, name: str = "") -> Built:
        parametrization = parametrization_of(model)
        groups, names = param_groups(list(parameter_roles(model)), parametrization, self.update, self.train.lr, self.train.weight_decay)
        optimizer = self.make(groups)
        return Built(optimizer, record(optimizer, names, name), unit_lr_group(optimizer, self.train.lr))


def record(optimizer: torch.optim.Optimizer, names: List[List[str]], part: str, offset: int = 0) -> List[Dict[str, Any]]:
    return [{"part": part, "lr": g["lr"], "weight_decay": g["weight_decay"], "parameters": len(n),
             "numel": sum(p.numel() for p in g["params"]), "names": n}
            for g, n in zip(optimizer.param_groups[offset:], names)]


def shown_groups(groups: List[Dict[str, Any]]) -> List[Tuple[int, Dict[str, Any]]]:
    """(index in the optimizer's param_groups, record) of each group that holds parameters, the record
    naming the metrics.csv column of its lr, ``lr/<part>.<k>`` (k counts that part's groups shown).
    An optimizer keeps its empty groups (Muon's AdamW part with no matrix to decay), so checkpoints
    keep their layout; summary.json and metrics.csv show only the groups that train something."""
    out, count = [], {}
    for i, g in enumerate(groups):
        if g["parameters"]:
            k = count[g["part"]] = count.get(g["part"], -1) + 1
            out.append((i, {**g, "lr_column": f"lr/{g['part']}.{k}"}))
    return out


def unit_lr_group(optimizer: torch.optim.Optimizer, lr: float) -> int:
    return next((i for i, g in enumerate(optimizer.param_groups) if g["lr"] == lr), 0)


def _fused(groups) -> Dict[str, bool]:
    """The fused kernel is CUDA's (one launch for all params); elsewhere the default (foreach) path."""
    params = [p for g in groups for p in g["params"]]
    return {"fused": True} if params and all(p.is_cuda for p in params) else {}


@dataclass(frozen=True)
class AdamOptions:
    eps: float = 1e-8

    def __post_init__(self):
        if not self.eps > 0:
            raise ValueError(f"eps must be positive, got {self.eps}")


@OPTIMIZERS.register("adamw", AdamOptions, "AdamW (Loshchilov & Hutter 2019): train.lr, train.betas, decoupled "
                     "train.weight_decay")
class AdamW(OptimizerRecipe):
    def make(self, groups):
        return torch.optim.AdamW(groups, lr=self.train.lr, betas=tuple(self.train.betas), eps=self.options.eps,
                                 **_fused(groups))


@OPTIMIZERS.register("adam", AdamOptions, "Adam (Kingma & Ba 2015): train.lr, train.betas; weight decay as L2")
class Adam(OptimizerRecipe):
    def make(self, groups):
        return torch.optim.Adam(groups, lr=self.train.lr, betas=tuple(self.train.betas), eps=self.options.eps)


@dataclass(frozen=True)
class SGDOptions:
    nesterov: bool = False


@OPTIMIZERS.register("sgd", SGDOptions, "SGD with train.momentum; weight decay as L2")
class SGD(OptimizerRecipe):
    update = "sgd"

    def make(self, groups):
        return torch.optim.SGD(groups, lr=self.train.lr, momentum=self.train.momentum, nesterov=self.options.nesterov)

    @staticmethod
    def check(options: SGDOptions, train: TrainConfig, key: str) -> None:
        if options.nesterov and train.momentum <= 0:
            raise ConfigError(f"{key}.nesterov", f"needs train.momentum > 0, got {train.momentum}")


def build_optimizer(model: nn.Module, train: TrainConfig) -> Built:
    spec = OPTIMIZERS.parse(train.optimizer, "train.optimizer")  # a hand-built TrainConfig may hold a bare name
    return OPTIMIZERS.get(spec.name).factory(spec.options, train)(model, spec.name)


def optimizer_recipe(train: TrainConfig, key: str = "train.optimizer") -> OptimizerRecipe:
    spec = OPTIMIZERS.parse(train.optimizer, key)
    return OPTIMIZERS.get(spec.name).factory(spec.options, train)
