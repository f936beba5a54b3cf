"""Who a run is, in the terms every dashboard groups by: the sweep (wandb group, MLflow experiment,
the TensorBoard log dir), the variant (wandb job_type, an MLflow tag, an HParams column), the seed
and the sweep's varied keys. Live loggers read it from the run dir (a sweep writes run.json before
training); exports read it from the report loader's rows, so both name a run the same way."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

import yaml
from ..rundir import CONFIG, RUN_JSON, SPEC, SUMMARY

# wandb, MLflow and TensorBoard's HParams take these types as they are; anything else becomes text
PLAIN = (bool, int, float, str)


@dataclass(frozen=True)
class RunIdentity:
    run_id: str
    run_dir: Path
    experiment: str  # the sweep's name, else the run's config name
    sweep: Optional[str] = None
    variant: Optional[str] = None
    seed: Optional[int] = None
    settings: Dict[str, Any] = field(default_factory=dict)  # the sweep's varied keys

    @property
    def root(self) -> Path:
        """Where a run's dashboards live by default: its sweep dir, else the dir holding the run."""
        parent = self.run_dir.parent
        if parent.name == "runs" and (parent.parent / SPEC).is_file():
            return parent.parent
        return parent

    def hparams(self) -> Dict[str, Any]:
        """What TensorBoard's HParams view compares: the varied keys, the seed, the variant."""
        out = {k: plain(v) for k, v in self.settings.items()}
        if self.variant is not None:
            out["variant"] = str(self.variant)
        if self.seed is not None:
            out["seed"] = int(self.seed)
        return out

    def tags(self, commit: Optional[str]) -> Dict[str, str]:
        tags = {"variant": self.variant, "seed": self.seed, "sweep": self.sweep, "commit": commit,
                "arch_zoo.run_id": self.run_id}
        return {k: str(v) for k, v in tags.items() if v is not None}


def plain(value: Any) -> Any:
    if value is None:
        return "null"
    return value if isinstance(value, PLAIN) else json.dumps(value, sort_keys=True, default=str)


def _json(path: Path) -> Dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def from_run_dir(run_dir: Path, config_name: Optional[str] = None, seed: Optional[int] = None) -> RunIdentity:
    """A live run's identity: run.json when a sweep planned it, else the run dir and its config."""
    run_dir = Path(run_dir).resolve()
    meta = _json(run_dir / RUN_JSON)
    if config_name is None or seed is None:
        try:
            cfg = yaml.safe_load((run_dir / CONFIG).read_text()) or {}
        except (OSError, yaml.YAMLError):
            cfg = {}
        config_name = config_name or cfg.get("name")
        seed = seed if seed is not None else cfg.get("seed")
    sweep = meta.get("sweep")
    return RunIdentity(run_id=str(meta.get("run_id") or run_dir.name), run_dir=run_dir,
                       experiment=str(sweep or config_name or run_dir.name), sweep=sweep,
                       variant=meta.get("variant"), seed=meta.get("seed", seed), settings=meta.get("settings") or {})


def read_summary(run_dir: Path) -> Dict[str, Any]:
    return _json(Path(run_dir) / SUMMARY)


def final_metrics(summary: Dict[str, Any]) -> Dict[str, float]:
    return {k: float(v) for k, v in (summary.get("final") or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}
