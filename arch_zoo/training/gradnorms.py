"""Gradient norms at initialisation, layer by layer, over model depths (Xiong et al. 2020, Fig. 3).

For each variant (e.g. ``model.norm_placement`` pre vs post), depth and seed: build the model
freshly initialised, take one training batch of the task (the same batch for every variant and
depth of a seed), backpropagate the task loss once, and record the gradient norm of every layer's
sublayer weights (token mixer, cross-attention, feed-forward). Nothing is trained and nothing is stepped.

``arch-zoo gradnorms CONFIG --depths 2 4 6 8 10 12 --vary model.norm_placement=pre,post`` writes
``gradnorms.csv`` (one row per variant, depth, seed, layer and sublayer) and two plots."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence

import pandas as pd
import torch

from ..config import ExperimentConfig
from ..experiment import load
from ..data.tasks.base import collate
from ..models import build_model
from ..models.build import embedding_rows
from . import objectives
from .run import prepare

SUBLAYERS = ("mixer", "cross_attn", "ffn")  # the layer's slots; a row's sublayer column names one
OLD_SUBLAYERS = {"self_attn": "mixer"}  # what tables written before the mixer's slot was renamed call it


@dataclass(frozen=True)
class Study:
    config: str
    overrides: Sequence[str]
    depths: Sequence[int]
    vary_key: str
    vary_values: Sequence[str]
    seeds: Sequence[int]


def _stacks(model) -> Dict[str, torch.nn.Module]:
    return {name: getattr(model, name) for name in ("encoder", "decoder") if hasattr(model, name)}


def layer_norms(model) -> List[Dict[str, object]]:
    """Gradient norm of each sublayer's weights (norm gains and biases excluded), per layer."""
    rows = []
    for stack_name, stack in _stacks(model).items():
        for i, layer in enumerate(stack.layers):
            for part in SUBLAYERS:
                residual = getattr(layer, part, None)
                if residual is None:
                    continue
                grads = [p.grad for p in residual.sublayer.parameters() if p.dim() > 1 and p.grad is not None]
                if grads:
                    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
                    rows.append({"stack": stack_name, "layer": i + 1, "sublayer": part, "grad_norm": float(norm)})
    return rows


def measure(cfg: ExperimentConfig, batch_size: int) -> List[Dict[str, object]]:
    """One backward pass of the task loss at initialisation; the rows of ``layer_norms``."""
    data = prepare(cfg)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, embedding_rows(cfg.model, data.tokenizer)).train()
    examples = data.splits["train"][:batch_size]
    batch = collate(examples, data.tokenizer.pad_id)
    logits, labels = objectives.objective(data.objective).forward(model, batch)
    objectives.loss_fn(logits, labels).backward()
    return layer_norms(model)


def run_study(study: Study, log=print) -> pd.DataFrame:
    rows = []

    def config(value: str, depth: int, seed: int) -> ExperimentConfig:
        return load(study.config, [*study.overrides, f"{study.vary_key}={value}", f"model.n_layers={depth}",
                                   f"seed={seed}"])

    for value in study.vary_values:  # every variant's mistake (a misspelt value) before any is measured
        config(value, max(study.depths), study.seeds[0])
    for value in study.vary_values:
        for depth in study.depths:
            for seed in study.seeds:
                cfg = config(value, depth, seed)
                for row in measure(cfg, cfg.train.batch_size):
                    rows.append({"variant": f"{study.vary_key.split('.')[-1]}={value}", "depth": depth, "seed": seed,
                                 **row})
            log(f"{study.vary_key}={value} depth {depth}: done ({len(study.seeds)} seeds)")
    return pd.DataFrame(rows)


def last_layer_table(frame: pd.DataFrame, sublayer: str = "ffn") -> pd.DataFrame:
    """Mean ± std over seeds of the last layer's ``sublayer`` gradient norm, per variant and depth."""
    frame = frame.replace({"sublayer": OLD_SUBLAYERS})  # a gradnorms.csv of an earlier version reads the same
    last = frame[(frame["sublayer"] == sublayer) & (frame["layer"] == frame["depth"])]
    last = last[last["stack"] == last["stack"].iloc[-1]] if len(last) else last  # the output-side stack
    stats = last.groupby(["variant", "depth"], sort=False)["grad_norm"].agg(["mean", "std", "count"]).reset_index()
    return stats
