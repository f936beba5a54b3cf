"""Synthetic ladder stores: every run's final val/loss drawn from a known curve L(C) = E + A C^-alpha,
written in the layout `arch-zoo sweep` gives a ladder (run.json's ``scale`` and ``budget``)."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import yaml

from .sweeps import config, write_run

COMPUTE = (1e12, 4e12, 1.6e13, 6.4e13)  # training FLOPs per rung
PARAMS = (2e4, 4e4, 8e4, 1.6e5)  # non-embedding parameters per rung
STEPS = 30


def write_ladder(root: Path, curves: Dict[str, Tuple[float, float, float]], seeds: Sequence[int] = (0, 1, 2),
                 noise: float = 0.0, compute: Sequence[float] = COMPUTE, baseline: str = "relu",
                 rng: Optional[np.random.Generator] = None, losses: Optional[Dict[tuple, float]] = None,
                 budget: str = "tokens_per_param", offsets: Optional[Dict[str, Sequence[float]]] = None) -> Path:
    """One variant per curve (model.ffn = its name) at every rung, each seed's loss the curve's value
    times exp(N(0, noise)) drawn from ``rng`` (exact without one), or times (1 + offset) for the seed's
    entry of ``offsets[variant]`` (offsets that sum to 0 keep each rung's mean on the curve while the
    seeds differ); ``losses`` overrides (variant, rung, seed)."""
    root.mkdir(parents=True, exist_ok=True)
    spec = {"name": root.name, "base": "configs/experiments/char_lm.yaml", "grid": {"model.ffn": list(curves)},
            "seeds": list(seeds), "baseline": {"model.ffn": baseline},
            "scale": {"sizes": [{"d_model": 16 * 2 ** i} for i in range(len(compute))]},
            "metric": {"name": "val/loss", "goal": "min"}}
    (root / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    index = []
    for rung, c in enumerate(compute):
        size = f"d{16 * 2 ** rung}"
        for seed in seeds:
            for name, (E, A, alpha) in curves.items():
                loss = E + A * c ** -alpha
                if rng is not None:
                    loss *= float(np.exp(rng.normal(0.0, noise)))
                if offsets and name in offsets:
                    loss *= 1.0 + offsets[name][list(seeds).index(seed)]
                loss = (losses or {}).get((name, rung, seed), loss)
                run_id = f"ffn-{name}__size-{size}-s{seed}"
                settings = {"model.ffn": name, "scale.size": size}
                variant = f"ffn={name},size={size}"
                d = root / "runs" / run_id
                write_run(d, status="completed", settings=settings, seed=seed, variant=variant,
                          final={"val/loss": loss}, sweep=root.name, is_baseline=name == baseline,
                          cfg=config("rope", seed, **{"model.ffn": name, "model.d_model": 16 * 2 ** rung}))
                record = json.loads((d / "run.json").read_text())
                record["budget"] = {"match": "tokens", "steps": STEPS, "tokens": 1000, "params": 1, "flops": c}
                record["scale"] = {"rung": rung, "size": size, "keys": {"d_model": 16 * 2 ** rung}, "budget": budget,
                                   "params": int(PARAMS[rung] * 1.2), "non_embedding_params": int(PARAMS[rung]),
                                   "tokens_per_param": 20.0 if budget == "tokens_per_param" else None,
                                   "flops_budget": None, "lr": None}
                (d / "run.json").write_text(json.dumps(record))
                index.append({"run_id": run_id, "variant": variant, "seed": seed, "status": "completed", "reason": "",
                              "model.ffn": name, "scale.size": size})
    with (root / "index.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(index[0]))
        writer.writeheader()
        writer.writerows(index)
    return root


def write_isoflop(root: Path, frontier: Dict[str, Tuple[float, float, float]], budgets: Sequence[float],
                  penalty: Sequence[float] = (0.05, 0.0, 0.08), seeds: Sequence[int] = (0, 1, 2),
                  offsets: Optional[Dict[str, Sequence[float]]] = None) -> Path:
    """An IsoFLOP ladder: at every budget three sizes, the middle one on the variant's curve (the frontier)
    and the others ``penalty`` above it; each seed's loss times (1 + its offset)."""
    root.mkdir(parents=True, exist_ok=True)
    sizes = [f"d{16 * 2 ** i}" for i in range(len(penalty))]
    spec = {"name": root.name, "base": "configs/experiments/char_lm.yaml", "grid": {"model.ffn": list(frontier)},
            "seeds": list(seeds), "baseline": {"model.ffn": list(frontier)[0]},
            "scale": {"sizes": [{"d_model": 16 * 2 ** i} for i in range(len(sizes))], "budget": {"flops": list(budgets)}}}
    (root / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    index = []
    for rung, size in enumerate(sizes):
        for c in budgets:
            for seed in seeds:
                for name, (E, A, alpha) in frontier.items():
                    loss = (E + A * c ** -alpha + penalty[rung]) * (1.0 + (offsets or {}).get(name, [0.0] * 9)[seed])
                    run_id = f"ffn-{name}__size-{size}__flops-{c:.0e}-s{seed}"
                    settings = {"model.ffn": name, "scale.size": size, "scale.flops": c}
                    variant = f"ffn={name},size={size},flops={c:g}"
                    d = root / "runs" / run_id
                    write_run(d, status="completed", settings=settings, seed=seed, variant=variant,
                              final={"val/loss": loss}, sweep=root.name, is_baseline=name == list(frontier)[0],
                              cfg=config("rope", seed, **{"model.ffn": name, "model.d_model": 16 * 2 ** rung,
                                                          "train.max_steps": int(c // 1e9)}))
                    record = json.loads((d / "run.json").read_text())
                    record["budget"] = {"match": "tokens", "steps": STEPS, "tokens": 1000, "params": 1, "flops": c}
                    record["scale"] = {"rung": rung, "size": size, "keys": {"d_model": 16 * 2 ** rung}, "budget": "flops",
                                       "params": int(PARAMS[rung]), "non_embedding_params": int(PARAMS[rung]),
                                       "tokens_per_param": None, "flops_budget": c, "lr": None}
                    (d / "run.json").write_text(json.dumps(record))
                    index.append({"run_id": run_id, "variant": variant, "seed": seed, "status": "completed",
                                  "reason": "", "model.ffn": name, "scale.size": size, "scale.flops": c})
    with (root / "index.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(index[0]))
        writer.writeheader()
        writer.writerows(index)
    return root
