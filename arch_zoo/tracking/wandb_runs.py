"""wandb: a sweep's runs share a group (the sweep), a job_type (the variant) and tags (the varied
settings), live (Lightning's WandbLogger) or exported from metrics.csv. Each run dir has one
stable wandb id, so a resumed run continues its wandb run and an export never makes a second."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..run_names import short_names, tags
from .fingerprint import fingerprint
from .identity import RunIdentity, final_metrics, read_summary

MARKER = "arch_zoo.json"


def flatten(data: Any, prefix: str = "") -> Dict[str, Any]:
    """{"model": {"d_model": 64}} -> {"model.d_model": 64}: the form wandb filters and groups by."""
    if isinstance(data, dict):
        out: Dict[str, Any] = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data}


def wandb_mode(mode: Optional[str]) -> str:
    """Explicit config wins; else $WANDB_MODE; else online only when an API key is configured."""
    if mode:
        return mode
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    netrc = Path.home() / ".netrc"
    has_key = bool(os.environ.get("WANDB_API_KEY")) or netrc.exists() and \
        "api.wandb.ai" in netrc.read_text(errors="ignore")
    return "online" if has_key else "offline"


def quiet_settings(mode: str):
    """wandb's banner and end-of-run history (~25 lines per run) drown the run's own summary. Offline,
    everything it says is in the run dir and the summary prints the one `wandb sync` line; online,
    ``quiet`` keeps the run's URL, the one line worth seeing."""
    import wandb

    return wandb.Settings(silent=True) if mode in ("offline", "disabled") else wandb.Settings(quiet=True)


def wandb_id(run_dir: Path) -> str:
    """A stable id per run dir, so a resumed run continues the same wandb run."""
    return hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:12]


def identity_tags(identity: RunIdentity) -> List[str]:
    return tags(identity.settings, short_names(identity.settings))


def _offline_dirs(identity: RunIdentity) -> List[Path]:
    return sorted((identity.run_dir / "wandb").glob(f"*-{wandb_id(identity.run_dir)}"))


def is_current(identity: RunIdentity) -> bool:
    """Offline files for this run: an export of this very summary, or what a live logger wrote."""
    dirs = _offline_dirs(identity)
    if not dirs:
        return False
    try:
        marked = json.loads((dirs[-1] / MARKER).read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return True
    return marked == fingerprint(identity.run_dir)


def export_run(identity: RunIdentity, metrics, project: str, config: Dict[str, Any],
               mode: Optional[str] = None) -> Path:
    """One finished run from its files into ``<run dir>/wandb``; returns the wandb run's dir."""
    import wandb

    mode = wandb_mode(mode)
    for old in _offline_dirs(identity):  # a stale offline export: the CSV is the truth
        shutil.rmtree(old, ignore_errors=True)
    summary = read_summary(identity.run_dir)
    run = wandb.init(project=project, group=identity.sweep, job_type=identity.variant, name=identity.run_id,
                     tags=identity_tags(identity), config=config, id=wandb_id(identity.run_dir), dir=str(identity.run_dir),
                     mode=mode, resume="allow", settings=quiet_settings(mode))
    try:
        for step, rows in metrics.groupby("step", sort=True):
            run.log(dict(zip(rows["metric"], rows["value"].astype(float))), step=int(step))
        run.summary.update(final_metrics(summary))
        run.summary["status"] = summary.get("status")
        out = Path(run.dir).parent
    finally:
        run.finish()
    (out / MARKER).write_text(json.dumps({"fingerprint": fingerprint(identity.run_dir)}))
    return out
