"""Muon (Jordan et al. 2024) through ``torch.optim.Muon`` on the hidden matrices, AdamW on the rest.

Muon orthogonalises each 2-D update, which suits hidden matrices only; embeddings, the output head,
norm gains and biases train with AdamW at their own learning rate and betas, as the reference recipes
do (modded-nanogpt, Moonlight). Which parameter is which comes from ``parameter_roles`` (every
``nn.Linear`` weight but the head's readout is a hidden matrix): the same split a parametrization uses.
``Combined`` steps both as one torch optimizer, so Lightning, the schedule and checkpoints see one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Literal, Optional, Sequence

import torch
from torch import nn

from ..components.parametrization import HIDDEN, parameter_roles
from ..errors import ConfigError
from .optimizers import OPTIMIZERS, Built, OptimizerRecipe, param_groups, parametrization_of, record, unit_lr_group


class Combined(torch.optim.Optimizer):
    """Optimizers over disjoint parameters stepped as one: one ``param_groups`` list (the parts' own
    group dicts, so a schedule's lr reaches them), one ``state`` the parts share, one state_dict."""

    def __init__(self, parts: Sequence[torch.optim.Optimizer]):
        self.parts = list(parts)
        super().__init__([g for part in self.parts for g in part.param_groups], {})
        self._share()

    def _share(self) -> None:
        start = 0
        for part in self.parts:
            n = len(part.param_groups)
            part.param_groups = self.param_groups[start:start + n]
            part.state = self.state
            start += n

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)  # replaces param_groups and state with new objects
        self._share()

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for part in self.parts:
            part.step()
        return loss


@dataclass(frozen=True)
class MuonOptions:
    momentum: float = 0.95  # Muon's own (train.momentum is SGD's)
    nesterov: bool = True
    ns_steps: int = 5  # Newton-Schulz iterations
    eps: float = 1e-7
    # the step's scale by matrix shape: original (null) sqrt(max(1, rows/cols)); match_rms_adamw
    # 0.2 sqrt(max(rows, cols)), the update RMS of AdamW (Moonlight), so AdamW's lr and decay carry over
    adjust_lr_fn: Optional[Literal["original", "match_rms_adamw"]] = None
    adamw_lr: Optional[float] = None  # the AdamW part's lr; null: train.lr
    adamw_betas: Optional[List[float]] = None  # null: train.betas
    adamw_eps: float = 1e-8

    def __post_init__(self):
        if not 0 <= self.momentum < 1:  # at 1 the buffer never takes a gradient: every step would be zero
            raise ConfigError("momentum", f"must be in [0, 1), got {self.momentum}")
        if not 1 <= self.ns_steps < 100:
            raise ConfigError("ns_steps", f"must be in [1, 100), got {self.ns_steps}")
        for name in ("eps", "adamw_eps", "adamw_lr"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(name, f"must be positive, got {value}")
        if self.adamw_betas is not None and (len(self.adamw_betas) != 2 or not all(0 <= b < 1 for b in self.adamw_betas)):
            raise ConfigError("adamw_betas", f"expected two numbers in [0, 1), got {self.adamw_betas}")


@OPTIMIZERS.register("muon", MuonOptions, "Muon (torch.optim.Muon) on hidden matrices at train.lr; AdamW "
                     "(adamw_lr, adamw_betas) on embeddings, head, norms and biases")
class Muon(OptimizerRecipe):
    update = "adam"  # the AdamW part's

    @property
    def matrix_update(self) -> str:
        """match_rms_adamw gives the update AdamW's entry RMS but not its spectral norm (an orthogonal
        update is spread over every direction, Adam's follows the gradient's few), so it has its own
        width rule (parametrization.UPDATES)."""
        return "orthogonal_rms" if self.options.adjust_lr_fn == "match_rms_adamw" else "orthogonal"

    def updates(self):
        return (self.matrix_update, "adam")

    def __call__(self, model: nn.Module, name: str = "muon") -> Built:
        o, t = self.options, self.train
        parametrization = parametrization_of(model)
        named = list(parameter_roles(model))
        matrices = [n for n in named if n[2] == HIDDEN and n[1].dim() == 2]
        if not matrices:
            raise ConfigError("train.optimizer", "muon needs 2-D hidden matrices (nn.Linear weights outside the "
                              "head's readout) and this model has none; choose adamw, adam or sgd")
        rest = [n for n in named if not (n[2] == HIDDEN and n[1].dim() == 2)]
        muon_groups, muon_names = param_groups(matrices, parametrization, self.matrix_update, t.lr,
                                               t.weight_decay, decay_all=True)
        muon_groups = [g for g, n in zip(muon_groups, muon_names) if g["params"]]  # only the decayed ones exist
        muon_names = [n for n in muon_names if n]
        adamw_lr = o.adamw_lr if o.adamw_lr is not None else t.lr
        adamw_groups, adamw_names = param_groups(rest, parametrization, "adam", adamw_lr, t.weight_decay)
        muon = torch.optim.Muon(muon_groups, lr=t.lr, weight_decay=t.weight_decay, momentum=o.momentum,
                                nesterov=o.nesterov, eps=o.eps, ns_steps=o.ns_steps, adjust_lr_fn=o.adjust_lr_fn)
        betas = tuple(o.adamw_betas if o.adamw_betas is not None else t.betas)
        adamw = torch.optim.AdamW(adamw_groups, lr=adamw_lr, betas=betas, eps=o.adamw_eps)
        optimizer = Combined([muon, adamw])
        groups = record(optimizer, muon_names, "muon") + record(optimizer, adamw_names, "adamw", len(muon_names))
        return Built(optimizer, groups, unit_lr_group(optimizer, t.lr))

