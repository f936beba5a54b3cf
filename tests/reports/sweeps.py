"""Synthetic run stores with known metrics, written file by file in the layout `arch-zoo sweep` uses."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

SEEDS = (0, 1, 2, 3)
# final val/loss per variant and seed: what the statistics are checked against
LOSS = {
    "sinusoidal": [2.10, 2.14, 2.08, 2.12],
    "rope": [2.01, 2.06, 1.99, 2.03],
    "alibi": [2.05, 2.02, 2.09, 2.07],
}
ACC = {
    "sinusoidal": [0.40, 0.42, 0.41, 0.39],
    "rope": [0.45, 0.44, 0.47, 0.46],
    "alibi": [0.43, 0.42, 0.44, 0.41],
}
STATUS = {("rope", 2): ("failed", "CUDA out of memory"), ("alibi", 3): ("diverged", "loss is nan at step 20")}


def config(position: str, seed: int, **extra) -> Dict[str, Any]:
    cfg = {"name": "pos", "seed": seed,
           "model": {"kind": "decoder", "d_model": 32, "position": {"name": position}, "norm": {"name": "layernorm"}},
           "task": {"name": "char_lm", "seq_len": 128},
           "train": {"max_steps": 30, "progress_bar": False}}
    for key, value in extra.items():  # "model.norm": "rmsnorm"
        *head, last = key.split(".")
        node = cfg
        for h in head:
            node = node.setdefault(h, {})
        node[last] = {"name": value} if isinstance(node.get(last), dict) else value
    return cfg


def write_run(run_dir: Path, *, status: str, settings: Dict[str, Any], seed: int, variant: str,
              final: Optional[Dict[str, float]] = None, reason: Optional[str] = None, sweep: str = "pos",
              is_baseline: bool = False, cfg: Optional[Dict[str, Any]] = None, params: int = 1000,
              curve_steps=(10, 20, 30), tune: Optional[Dict[str, Any]] = None) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({
        "sweep": sweep, "run_id": run_dir.name, "variant": variant, "seed": seed, "settings": settings,
        "is_baseline": is_baseline, "params": params, "matched": {}, **({"tune": tune} if tune else {})}))
    (run_dir / "status.json").write_text(json.dumps({"status": status, "reason": reason}))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg or {"seed": seed}))
    final = final or {}
    if status in ("completed", "diverged"):
        (run_dir / "summary.json").write_text(json.dumps({
            "status": status, "final": final, "best": {k: {"value": v, "step": 30} for k, v in final.items()},
            "parameters": params, "flops_per_token": 6.0 * params, "train_tokens_per_s": 5000.0 + seed,
            "peak_memory_mb": 300.0, "wall_time_s": 12.0, "diverged_at": 20 if status == "diverged" else None,
            "step": 30}))
    write_metrics(run_dir, final, curve_steps)


def write_metrics(run_dir: Path, final: Dict[str, float], curve_steps) -> None:
    """metrics.csv as Lightning's CSVLogger writes it: a row per log call; a validation that follows
    step k is logged at k - 1 (Lightning counts the step after validating)."""
    fields = ["epoch", "step", "train/loss", "lr", *sorted(final)]
    with (run_dir / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for i, step in enumerate(curve_steps):
            scale = 1.0 + 0.5 * (len(curve_steps) - 1 - i) / max(1, len(curve_steps) - 1)
            values = {k: v * (scale if "loss" in k else 1 / scale) for k, v in final.items()}
            writer.writerow({"epoch": 0, "step": step, "train/loss": 3.0 - i * 0.2, "lr": 1e-3})
            writer.writerow({"epoch": 0, "step": step - 1, **{k: v for k, v in values.items() if k.startswith("val")}})
            writer.writerow({"epoch": 0, "step": step, **{k: v for k, v in values.items() if not k.startswith("val")}})


def write_sweep(root: Path, variants: Optional[Dict[str, List[float]]] = None, *, name: str = "pos",
                status: Optional[Dict] = None, baseline: Optional[Dict[str, Any]] = None,
                metric: Optional[Dict[str, str]] = None, pending: List[tuple] = (),
                labels: Optional[Dict[str, str]] = None, extra: Optional[Dict[str, float]] = None,
                seeds=SEEDS) -> Path:
    """A one-axis sweep over model.position; ``status`` overrides (variant, seed) → (status, reason);
    ``pending`` (variant, seed) pairs are planned in index.csv with no run dir yet; ``labels``
    gives a variant another setting value (e.g. hostile text); ``extra`` adds final metrics to every run."""
    variants = LOSS if variants is None else variants
    status = STATUS if status is None else status
    labels = labels or {}
    root.mkdir(parents=True, exist_ok=True)
    spec = {"name": name, "base": "configs/experiments/char_lm.yaml", "grid": {"model.position": list(variants)},
            "seeds": list(seeds), "baseline": baseline if baseline is not None else {"model.position": "sinusoidal"},
            "metric": metric or {"name": "val/loss", "goal": "min"}}
    (root / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    index = []
    for v, losses in variants.items():
        value = labels.get(v, v)
        for i, (seed, loss) in enumerate(zip(seeds, losses)):
            run_id = f"{_slug(value)}-s{seed}"
            st, reason = status.get((v, seed), ("completed", None))
            if (v, seed) in pending:
                st, reason = "pending", None
            index.append({"run_id": run_id, "variant": f"position={value}", "seed": seed, "status": st,
                          "reason": reason or "", "model.position": value})
            if st == "pending":
                continue
            final = {"val/loss": loss, "val/token_accuracy": ACC.get(v, [0.5] * 4)[i], "val@256/loss": loss + 0.3,
                     "val@512/loss": loss + 0.9, "test/loss": loss + 0.01, **(extra or {})}  # unfinished: curves
            if st == "diverged":
                final["val/loss"] = float("nan")
            write_run(root / "runs" / run_id, status=st, reason=reason, settings={"model.position": value}, seed=seed,
                      variant=f"position={value}", final=final, sweep=name, cfg=config(value, seed),
                      is_baseline=value == (baseline or {}).get("model.position", "sinusoidal"),
                      curve_steps=(10, 20, 30) if st != "running" else (10,))
    with (root / "index.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["run_id", "variant", "seed", "status", "reason", "model.position"])
        writer.writeheader()
        writer.writerows(index)
    return root


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)[:40]


# A tuned sweep (tune: train.lr over two values, successive halving at step 10): stage 1 on seed 9,
# then each position at its chosen lr on seeds 0-2. (position, lr) -> stage 1's final val/loss, or
# (rung step, val/loss there) for the value pruned there.
TUNING = {("rope", 0.001): (10, 2.9), ("rope", 0.01): 2.0, ("alibi", 0.001): 2.1, ("alibi", 0.01): (10, 3.0)}
CHOSEN = {"rope": 0.01, "alibi": 0.001}
TUNED_LOSS = {"rope": LOSS["sinusoidal"][:3], "alibi": LOSS["rope"][:3]}  # stage 2: alibi ranks first, rope is planned first
TUNE_RULE = {"key": "train.lr", "values": [0.001, 0.01], "select": "val/loss", "goal": "min",
             "halving": {"eta": 2, "min_steps": 10}}


def write_tuned_sweep(root: Path, name: str = "tuned") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    spec = {"name": name, "base": "configs/experiments/char_lm.yaml", "grid": {"model.position": list(CHOSEN)},
            "tune": {"key": "train.lr", "values": TUNE_RULE["values"], "seeds": [9], "halving": TUNE_RULE["halving"]},
            "seeds": [0, 1, 2], "baseline": {"model.position": "rope"}, "metric": {"name": "val/loss", "goal": "min"}}
    (root / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    runs = [("tune", position, lr, 9, outcome) for (position, lr), outcome in TUNING.items()]
    runs += [("eval", position, lr, seed, TUNED_LOSS[position][seed]) for position, lr in CHOSEN.items()
             for seed in (0, 1, 2)]
    index = []
    for stage, position, lr, seed, outcome in runs:
        run_id = f"position-{position}__lr-{lr}-s{seed}"
        settings = {"model.position": position, "train.lr": lr}
        variant = f"position={position},lr={lr}"
        tune = {"stage": stage, "value": lr, "variant": f"position={position}", **TUNE_RULE}
        pruned = isinstance(outcome, tuple)
        status = "pruned" if pruned else "completed"
        loss = outcome[1] if pruned else outcome
        run_dir = root / "runs" / run_id
        write_run(run_dir, status=status, settings=settings, seed=seed, variant=variant, sweep=name,
                  final={"val/loss": loss, "test/loss": loss + 0.01}, cfg=config(position, seed, **{"train.lr": lr}),
                  curve_steps=(10,) if pruned else (10, 20, 30), tune=tune)
        if pruned:
            step = outcome[0]
            (run_dir / "status.json").write_text(json.dumps({
                "status": "pruned", "reason": f"pruned at step {step}: val/loss ranked 2 of 2 at step {step}",
                "step": step, "pruned_at": step, "rungs": {str(step): {"val/loss": loss}}}))
        index.append({"run_id": run_id, "variant": variant, "seed": seed, "status": status,
                      "reason": "", "model.position": position, "train.lr": lr})
    with (root / "index.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(index[0]))
        writer.writeheader()
        writer.writerows(index)
    return root


def write_null_sweep(root: Path, baseline: Optional[Dict[str, Any]] = None) -> Path:
    """A sweep over model.qk_norm: [null, rmsnorm] on seeds 0-2, named as `arch-zoo sweep` names them
    (null in run ids and variants, as in YAML); no baseline in the spec unless given."""
    root.mkdir(parents=True, exist_ok=True)
    spec = {"name": "qk", "base": "configs/experiments/char_lm.yaml", "grid": {"model.qk_norm": [None, "rmsnorm"]},
            "seeds": [0, 1, 2], "metric": {"name": "val/loss", "goal": "min"}, **({"baseline": baseline} if baseline else {})}
    (root / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    index = []
    for value, losses in ((None, LOSS["sinusoidal"]), ("rmsnorm", LOSS["rope"])):
        name = "null" if value is None else value
        for seed in (0, 1, 2):
            run_id = f"qk_norm-{name}-s{seed}"
            cfg = config("rope", seed)
            cfg["model"]["qk_norm"] = None if value is None else {"name": value, "eps": 1e-6}
            write_run(root / "runs" / run_id, status="completed", settings={"model.qk_norm": value}, seed=seed,
                      variant=f"qk_norm={name}", final={"val/loss": losses[seed]}, sweep="qk", cfg=cfg)
            index.append({"run_id": run_id, "variant": f"qk_norm={name}", "seed": seed, "status": "completed",
                          "reason": "", "model.qk_norm": name})
    with (root / "index.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(index[0]))
        writer.writeheader()
        writer.writerows(index)
    return root
