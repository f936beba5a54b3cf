"""WSD-S in training (the plan: ``recipes/wsds.py``): the run trains its stable phase once, stopping
at each branch's fork to copy its state into ``<run>/branches/<steps>/``, a run directory of its own
(config.yaml: the separate run it equals; checkpoints/last.ckpt: the fork; metrics.csv: the history
up to it); after the run's own end each branch resumes from there like any interrupted run and
ends as that separate run would, with its own summary.json.

Why sub-run directories: a branch is then a run to every reader (the run store lists it with its
run's variant, seed and settings, at its own steps, tokens and FLOPs), and its resume, SIGTERM and
SIGKILL behaviour is a run's, tested once. A fork dir appears whole (written under a temporary
name, then renamed), so a kill at any moment leaves either no branch, which the rerun forks again
at the same step, or one that resumes. The run is not completed before its branches are: a kill
during a branch reruns nothing of the run (its last.ckpt is at its end) and resumes the branch."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytorch_lightning as pl

from .. import rundir
from ..config import ExperimentConfig
from ..config.loading import save
from ..recipes.wsds import Branch, branch_config, planned
from ..run_names import BUDGET_KEY, budget_variant

FORKED = "forked"  # an attempt that stopped at a fork and went on in the same process


def branch_dir(run_dir: Path, steps: int) -> Path:
    return Path(run_dir) / rundir.BRANCHES / str(steps)


class ForkAt(pl.Callback):
    """Stops a fit at the end of optimizer step ``step`` the way a SIGTERM does (RunCheckpoint saves
    last.ckpt there, after the step's validation if it has one): the one mid-run checkpoint a
    resume is known to continue exactly from, at any step."""

    def __init__(self, step: int):
        self.step, self.forked = step, False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if not self.forked and trainer.global_step == self.step:
            self.forked = True
            trainer._signal_connector.received_sigterm = True


def train_trunk(train: Callable[..., Dict[str, Any]], cfg: ExperimentConfig, run_dir: Path,
                attempt: rundir.Attempt, writer: bool, **kwargs) -> Dict[str, Any]:
    """``train(cfg, ..., fork_at=...)`` to each fork not yet taken, in order, then to the end; what
    the last call returns (a run that diverged or paused before a fork returns there)."""
    for branch in planned(cfg, kwargs["data"].splits["train"]):
        if branch_dir(run_dir, branch.steps).exists():
            continue
        resume = rundir.resume_state(run_dir)
        at = resume["step"] if resume else 0
        if at > branch.fork:  # forks are taken in order and before the run goes on: not reachable
            raise RuntimeError(f"{run_dir} is at step {at}, past the fork of branch {branch.steps} at {branch.fork}")
        if at < branch.fork:
            out = train(cfg, run_dir=run_dir, attempt=attempt, writer=writer, fork_at=branch.fork, **kwargs)
            if out["status"] != FORKED:
                return out
            attempt.update(branch.fork, FORKED)
        if writer:
            _fork(cfg, run_dir, branch)
    return train(cfg, run_dir=run_dir, attempt=attempt, writer=writer, **kwargs)


def _fork(cfg: ExperimentConfig, run_dir: Path, branch: Branch) -> None:
    dest = branch_dir(run_dir, branch.steps)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / rundir.CHECKPOINTS).mkdir(parents=True)
    if branch.fork:  # (a fork at step 0 trains from the start: there is nothing to copy)
        shutil.copy2(run_dir / rundir.CHECKPOINT, tmp / rundir.CHECKPOINT)
        if (run_dir / rundir.METRICS).exists():
            shutil.copy2(run_dir / rundir.METRICS, tmp / rundir.METRICS)
    save(branch_config(cfg, branch.steps), tmp / rundir.CONFIG)
    status = rundir.read_json(run_dir / rundir.STATUS) or {}
    rundir.write_json(tmp / rundir.STATUS, {"status": "pending", "updated": rundir.now(), "forked_from": str(run_dir),
                                            "fork_step": branch.fork, "metrics_steps": status.get("metrics_steps")})
    meta = rundir.read_json(run_dir / rundir.RUN_JSON)
    if meta is not None:
        rundir.write_json(tmp / rundir.RUN_JSON, branch_meta(meta, branch))
    os.replace(tmp, dest)


def branch_meta(meta: Dict[str, Any], branch: Branch) -> Dict[str, Any]:
    """A sweep's run.json for a branch: the run's variant and seed, its settings with the budget
    (``wsds.budget``: the entry of decays or decay_tokens it is), and the run's planned tokens and FLOPs scaled
    to the branch's steps."""
    steps = branch.steps
    budget = dict(meta.get("budget") or {})
    if budget.get("steps"):
        scale = steps / budget["steps"]
        budget.update({k: budget[k] * scale for k in ("tokens", "bytes", "flops") if budget.get(k) is not None})
        budget["steps"] = steps
    out = {**meta, "run_id": f"{meta.get('run_id')}@{steps}",
           "variant": budget_variant(meta.get("variant"), branch.budget),
           "settings": {**(meta.get("settings") or {}), BUDGET_KEY: branch.budget},
           "branch_of": meta.get("run_id"), **({"budget": budget} if budget else {})}
    if meta.get("scale"):
        out["scale"] = {**meta["scale"], "steps": steps}
    return json.loads(json.dumps(out))


def run_branches(cfg: ExperimentConfig, points: List[Branch], run_dir: Path,
                 run: Callable[[ExperimentConfig, Path], Any]) -> List[Dict[str, Any]]:
    """Each forked branch of ``points`` (``plan``) run to its end (``run(config, dir)``: the run's own
    runner; a finished one is read back), as summary.json's ``branches`` (with ``tokens``, what it
    trained, where the budgets are token counts)."""
    out = []
    for branch in points:
        where = branch_dir(run_dir, branch.steps)
        if not where.exists():  # the run diverged before this fork
            continue
        result = run(branch_config(cfg, branch.steps), where)
        out.append({"steps": branch.steps, "fork": branch.fork, "status": result.status,
                    "dir": str(where.relative_to(run_dir)), "final": result.summary.get("final", {}),
                    **({"tokens": branch.tokens} if branch.tokens is not None else {})})
    return out
