"""The coordinate check of µP (Yang et al. 2022, Tensor Programs V, Fig. 5 and the ``mup`` package's
``coord_check``): train a config a few steps at several widths, under ``standard`` and under ``mup``,
and measure each layer output's *coordinate size*, the mean absolute entry (l1 per coordinate).
Under µP they stay flat across widths; under the standard parametrization some grow with width
(the logits first), which is why its best learning rate moves as the model widens.

Each width keeps the config's depth and head size (``n_heads = width / head_dim``) and scales a set
``d_ff`` with the width; µP's base width is the smallest width checked. Every (parametrization,
width) starts from the config's seed and trains the same batches (the task's first training batches)
at ``train.lr``, constant (no warmup or schedule: a warmup's first steps would hide the update the
check is about), with the config's optimizer, its per-group µP multipliers and ``train.grad_clip``.
After each step (and at step 0, the init) one no-grad forward of the first batch is measured:
``embedding`` (the token embedding's output), each stack layer's output (``decoder.layers.0``, ...)
and ``logits`` (the model's, after µP's output multiplier)."""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Sequence

import pandas as pd
import torch
from torch import nn

from ..errors import ConfigError

PARAMETRIZATIONS = ("standard", "mup")
LOGITS = "logits"


def layer_outputs(model: nn.Module) -> List[tuple]:
    """(name, module) whose output is measured: the token embeddings, then every stack's layers in order."""
    from ..models.blocks import Stack

    out = [("embedding", model.embed)]
    decoder_embed = getattr(model, "decoder_embed", None)
    if decoder_embed is not None and decoder_embed is not model.embed:
        out.append(("decoder_embedding", decoder_embed))
    for name, module in model.named_modules():
        if isinstance(module, Stack):
            out += [(f"{name}.layers.{i}", layer) for i, layer in enumerate(module.layers)]
    return out


def _l1(x) -> float:
    x = x[0] if isinstance(x, tuple) else getattr(x, "logits", x)
    return float(x.detach().abs().double().mean())


@contextmanager
def recording(model: nn.Module) -> Iterator[Dict[str, float]]:
    """Within the block, each forward of ``model`` fills the dict with every measured output's mean
    absolute entry (the last forward's)."""
    sizes: Dict[str, float] = {}
    handles = [m.register_forward_hook(lambda _m, _i, out, name=name: sizes.__setitem__(name, _l1(out)))
               for name, m in layer_outputs(model)]
    handles.append(model.register_forward_hook(lambda _m, _i, out: sizes.__setitem__(LOGITS, _l1(out))))
    try:
        yield sizes
    finally:
        for h in handles:
            h.remove()


def width_overrides(cfg, width: int, parametrization: str, base_width: int) -> List[str]:
    """The overrides that widen ``cfg`` to ``width`` under a parametrization, at its depth and head size."""
    from ..run_names import yaml_value

    m = cfg.model
    head_dim = m.d_model // m.n_heads
    if width % head_dim:
        raise ConfigError("--widths", f"{width} is not a multiple of the config's head size {head_dim} "
                          f"(model.d_model {m.d_model} / model.n_heads {m.n_heads}), which every width keeps")
    out = [f"model.d_model={width}", f"model.n_heads={width // head_dim}"]
    if m.d_ff is not None:
        out.append(f"model.d_ff={max(1, round(m.d_ff * width / m.d_model))}")
    param = {"name": "mup", "base_width": base_width} if parametrization == "mup" else "standard"
    return out + [f"model.parametrization={yaml_value(param)}"]


def _train(cfg, data, batches: Sequence, steps: int) -> List[Dict[str, float]]:
    """Coordinate sizes of the first batch at init and after each of ``steps`` updates."""
    from ..models import build_model
    from ..models.build import embedding_rows
    from ..recipes import build_optimizer
    from ..training import objectives

    torch.manual_seed(cfg.seed)
    model = build_model(cfg, embedding_rows(cfg.model, data.tokenizer))
    objective = objectives.objective(data.objective)
    optimizer = build_optimizer(model, cfg.train).optimizer
    rows = []

    def measure():
        model.eval()
        with torch.no_grad(), recording(model) as sizes:
            objective.forward(model, batches[0])
        rows.append(dict(sizes))
        model.train()

    measure()
    for step in range(steps):
        batch = batches[step % len(batches)]
        logits, labels = objective.forward(model, batch)
        loss = objectives.loss_fn(logits, labels, cfg.train.label_smoothing)
        aux = objective.aux_loss(model, batch)
        if aux is not None:
            loss = loss + aux
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.train.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        optimizer.step()
        measure()
    return rows


def coord_check(config, overrides: Sequence[str], widths: Sequence[int], steps: int = 4,
                parametrizations: Sequence[str] = PARAMETRIZATIONS) -> pd.DataFrame:
    """One row per (parametrization, width, step, layer): its coordinate size (``coord``)."""
    from ..experiment import load
    from ..training.datamodule import TaskDataModule
    from ..training.run import prepare

    if len(set(widths)) != len(widths) or list(widths) != sorted(widths) or len(widths) < 2:
        raise ConfigError("--widths", f"expected at least two widths, each once, smallest first; got {list(widths)}")
    if steps < 1:
        raise ConfigError("--steps", f"expected a positive number of training steps, got {steps}")
    for p in parametrizations:
        if p not in PARAMETRIZATIONS:
            raise ConfigError("--parametrizations", f"expected {' or '.join(PARAMETRIZATIONS)}, got {p!r}")
    base = load(config, list(overrides))
    data = prepare(base, quiet=True)
    loader = TaskDataModule(data, dataclasses.replace(base.train, max_steps=steps), base.seed).train_dataloader()
    batches = list(loader)[:steps]
    shapes = {(p, w): width_overrides(base, w, p, widths[0]) for p in parametrizations for w in widths}
    rows = []
    for (p, w), shape in shapes.items():  # every width checked before any trains
        cfg = load(config, list(overrides) + shape)
        for step, sizes in enumerate(_train(cfg, data, batches, steps)):
            rows += [{"parametrization": p, "width": w, "step": step, "layer": k, "coord": v} for k, v in sizes.items()]
    return pd.DataFrame(rows)


def growth(frame: pd.DataFrame) -> pd.DataFrame:
    """At the last step, per parametrization and layer: the coordinate size at each width and its
    growth, the widest width's size over the narrowest's (1 = flat)."""
    last = frame[frame["step"] == frame["step"].max()]
    table = last.pivot_table(index=["parametrization", "layer"], columns="width", values="coord", sort=False)
    widths = sorted(table.columns)
    table["growth"] = table[widths[-1]] / table[widths[0]]
    table.columns.name = None
    return table.reset_index()


def markdown(table: pd.DataFrame) -> str:
    header = [str(c) if not isinstance(c, int) else f"width {c}" for c in table.columns]
    rows = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in table.itertuples(index=False)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def plot(frame: pd.DataFrame, out_dir: Path) -> Path:
    """One panel per (parametrization, step): coordinate size against width, a line per layer (log-log)."""
    from .plots import _figure, _save, _text
    from .colors import palette

    params, steps = list(dict.fromkeys(frame["parametrization"])), sorted(frame["step"].unique())
    layers = list(dict.fromkeys(frame["layer"]))
    colors = palette(len(layers))
    fig = _figure(2.6 * len(steps), 2.4 * len(params) + 0.6)
    axes = fig.subplots(len(params), len(steps), squeeze=False, sharey="row")
    for i, p in enumerate(params):
        for j, t in enumerate(steps):
            ax = axes[i][j]
            part = frame[(frame["parametrization"] == p) & (frame["step"] == t)]
            for k, layer in enumerate(layers):
                line = part[part["layer"] == layer].sort_values("width")
                ax.plot(line["width"], line["coord"], marker="o", color=colors[k % len(colors)], label=_text(layer))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{p}, step {t}", fontsize="small")
            ax.set_xlabel("width (d_model)", fontsize="small")
            if j == 0:
                ax.set_ylabel("mean |x| per coordinate", fontsize="small")
    axes[0][-1].legend(fontsize="x-small", loc="best")
    return _save(fig, out_dir, "coord_check")


def write(frame: pd.DataFrame, out_dir: Path) -> Dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out_dir / "coord_check.csv", "md": out_dir / "coord_check.md"}
    frame.to_csv(paths["csv"], index=False)
    paths["md"].write_text(markdown(growth(frame)))
    paths["plot"] = plot(frame, out_dir)
    return paths
