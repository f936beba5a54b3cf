"""``run_one(config, out_dir) -> RunResult``: one training run, end to end, the way every sweep runs it."""
from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from .. import rundir
from ..components.heads import HEADS
from ..config import ExperimentConfig
from ..coerce import first_difference, to_dict
from ..config.loading import save
from ..config.plugins import records as plugin_records
from ..config.validation import position_limit
from ..data.store import cut_text
from ..data.tasks import TASKS, TaskData
from ..data.unigram import unigram_loss
from ..errors import ConfigError
from ..experiment import load
from ..models.build import embedding_rows
from ..models.embedding_scale import embedding_scale
from ..recipes import recipe_warnings
from ..recipes.wsds import planned
from ..trained.init_from import InitialWeights, initial_weights
from .interrupts import RunInterrupted, sigterm_raises
from .objectives import objective


@dataclass
class RunResult:
    run_dir: Path
    status: str  # completed | diverged | failed | interrupted
    summary: Dict[str, Any] = field(default_factory=dict)
    reason: Optional[str] = None
    skipped: bool = False  # already finished before this call; nothing was trained

    @property
    def metrics(self) -> Dict[str, float]:
        return self.summary.get("final", {})


def _signal_name(exc: BaseException) -> str:
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    if isinstance(exc, RunInterrupted):
        return exc.signal_name
    return "SIGTERM" if isinstance(exc, SIGTERMException) else "SIGINT"  # Lightning turns Ctrl-C into exit(1)


def _needs_task(cfg: ExperimentConfig) -> None:
    if cfg.task is None:
        raise ConfigError("task", f"a training run needs a task; choices: {', '.join(TASKS.choices())}")


def prepare(cfg: ExperimentConfig, quiet: bool = False) -> TaskData:
    """Build the task's data and check it fits the model; every problem is a ConfigError, raised
    before anything is written. The train split's unigram loss goes into ``data.info``."""
    _needs_task(cfg)
    task = TASKS.build(cfg.task, cfg.seed, cfg.model.kind, cfg.model.max_seq_len)
    task.progress = not quiet  # (a corpus task shows its store's build)
    try:
        data = task.build()
    except (ValueError, OSError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError("task", str(exc)) from None
    head = cfg.model.head
    needs = objective(data.objective).needs
    if HEADS.get(head.name).factory.produces != needs:
        fits = [e.name for e in HEADS.entries() if e.factory.produces == needs and cfg.model.kind in e.factory.kinds]
        raise ConfigError("model.head", f"task '{cfg.task.name}' trains with objective '{data.objective}', which "
                          f"needs {needs}; head '{head.name}' gives {HEADS.get(head.name).factory.produces}; "
                          f"heads that fit: {', '.join(fits)}")
    if data.n_classes is not None and getattr(head.options, "n_classes", data.n_classes) != data.n_classes:
        raise ConfigError("model.head.n_classes", f"is {head.options.n_classes} but task '{cfg.task.name}' has "
                          f"{data.n_classes} classes")
    embedding_rows(cfg.model, data.tokenizer)  # more rows than tokens (an import's padding) train
    _drop_unreachable_lengths(cfg, data)
    if "unigram_loss" not in data.info:  # (a corpus task's store counted it once, when prepared)
        data.info["unigram_loss"] = unigram_loss(data.splits["train"], objective(data.objective).label_offset)
    return data


def _notices(cfg: ExperimentConfig, data: TaskData, quiet: bool) -> None:
    """Before training: a corpus cut by max_chars (unless quiet: the summary records it), a
    position signal that drowns the tokens out, and a recipe that will not run as its settings name."""
    cut = cut_text(data.info)
    if cut and not quiet:
        print(f"arch-zoo: note: the corpus was cut: {cut}", file=sys.stderr)
    for why in (data.info.get("not_evaluated") or {}).values() if not quiet else ():
        print(f"arch-zoo: warning: {why}", file=sys.stderr)
    drowned = embedding_scale(cfg.model, data.tokenizer.vocab_size).warning()
    for line in ([drowned] if drowned else []) + recipe_warnings(cfg.train):
        print(f"arch-zoo: warning: {line}", file=sys.stderr)


def unreachable_lengths(cfg: ExperimentConfig) -> Dict[str, str]:
    """Extra eval splits (``val@L``, from ``task.eval_lengths``) longer than the model's position scheme
    can represent (a learned table): {split: why}, naming the key, the length and the limit."""
    limit = position_limit(cfg.model)
    lengths = (getattr(cfg.task.options, "eval_lengths", None) or []) if cfg.task is not None else []
    return {f"val@{n}": f"task.eval_lengths: {n} is past what position '{cfg.model.position.name}' represents "
                        f"(at most {limit} positions, model.max_seq_len {cfg.model.max_seq_len}); val@{n} is not "
                        "evaluated" for n in lengths if limit is not None and n > limit}


def _drop_unreachable_lengths(cfg: ExperimentConfig, data: TaskData) -> None:
    """Extra eval splits a variant cannot run are not evaluated; ``data.info["not_evaluated"]`` says
    why, and reports show it."""
    for split, why in unreachable_lengths(cfg).items():
        if split in data.splits:
            del data.splits[split]
            data.info.setdefault("not_evaluated", {})[split] = why


RESUMABLE_ACROSS = ("compile", "compile_mode", "strategy")  # checkpoints are full (consolidated) state dicts


def _check_same_config(cfg: ExperimentConfig, run_dir: Path) -> None:
    saved = run_dir / rundir.CONFIG
    if not saved.exists():
        return
    old = to_dict(load(saved))
    new = to_dict(cfg)
    for d in (old, new):  # how the steps are computed, not what: a run resumes with compile on or off
        for k in RESUMABLE_ACROSS:
            d["train"].pop(k, None)
    diff = first_difference(old, new)
    if diff:
        raise ConfigError("--out", f"{run_dir} holds a run of a different config ({diff}); "
                          "choose another output directory")


def _is_rank_zero() -> bool:
    return int(os.environ.get("LOCAL_RANK", 0)) == 0 and int(os.environ.get("NODE_RANK", 0)) == 0


def run_one(cfg: ExperimentConfig, out_dir, callbacks: Sequence[Any] = (), quiet: bool = False,
            stop_at: Optional[int] = None, best: Optional[Tuple[str, str]] = None) -> RunResult:
    """Train ``cfg`` into ``out_dir``. Reruns resume from checkpoints/last.ckpt; a finished run
    (completed or diverged) is returned as it is, not trained again. SIGTERM or Ctrl-C raise
    ``RunInterrupted`` once the run dir records the run as interrupted (SIGTERM after a checkpoint
    at the step in progress). A resumed run's metrics.csv and best metrics equal an uninterrupted
    run's; its summary lists every attempt and sums their wall time.

    ``stop_at`` (a successive-halving rung below ``train.max_steps``): validate and checkpoint at
    that step and stop there, as status ``paused`` with the rung's validation metrics in
    status.json's ``rungs`` (the result's ``metrics``); a later call with a higher ``stop_at``, or
    none, resumes from that checkpoint, and ends as the run trained in one go would.

    ``best`` (a validation metric and its goal, ``("val/loss", "min")``; a sweep passes its own):
    also keep checkpoints/best.ckpt, the weights at its best validation over the whole run, resumes
    included; summary.json's ``best_checkpoint`` says where and what it scored."""
    with sigterm_raises():
        return _run_one(cfg, Path(out_dir), callbacks, quiet, stop_at, best)


def _check_checkpoint(run_dir: Path) -> None:
    """A last.ckpt that cannot be read is the user's to move away (a copy cut short, a disk error),
    not a failed run: say which file before anything is written."""
    try:
        rundir.resume_state(run_dir)
    except Exception as exc:  # noqa: BLE001 - unpickling, zip and truncation errors alike
        detail = (str(exc).splitlines() or [""])[0][:100]
        raise ConfigError("--out", f"cannot resume from {run_dir / rundir.CHECKPOINT} ({type(exc).__name__}: "
                          f"{detail}); move it away to train this run from the start") from None


def _run_one(cfg: ExperimentConfig, run_dir: Path, callbacks: Sequence[Any], quiet: bool,
             stop_at: Optional[int], best: Optional[Tuple[str, str]]) -> RunResult:
    _needs_task(cfg)  # the config's own mistake first, before comparing it with the run dir's
    _check_same_config(cfg, run_dir)
    done = _already_done(run_dir, stop_at)
    if done is not None:
        return done
    data = prepare(cfg, quiet)  # user errors surface here, before the run dir exists
    points = planned(cfg, data.splits["train"])  # WSD-S branches: a token budget past the run is refused here too
    _check_checkpoint(run_dir)
    start = _initial_weights(cfg, data, run_dir)
    writer = _is_rank_zero()
    _check_machine(cfg, writer)
    if writer:
        _notices(cfg, data, quiet)
        _start(cfg, run_dir, data, start)
    attempt = rundir.Attempt(run_dir, writer)
    try:
        from .branches import train_trunk
        from .trainer import train

        summary = train_trunk(train, cfg, run_dir, attempt, writer, data=data, callbacks=list(callbacks), quiet=quiet,
                              stop_at=stop_at, best=best, init=start)
    except (KeyboardInterrupt, SystemExit) as exc:  # Lightning turns Ctrl-C into SystemExit(1)
        name = _signal_name(exc)
        attempt.update(outcome="interrupted")
        if writer:
            rundir.set_status(run_dir, "interrupted", reason=f"interrupted by {name}", step=attempt.step)
        raise RunInterrupted(name, run_dir, attempt.step) from None
    except Exception as exc:  # a crash is data: record it, let the caller (a sweep) go on
        return _failed(run_dir, exc, attempt, writer)
    if summary["status"] == rundir.PAUSED:
        return _pause(run_dir, summary, attempt, writer)
    if points:  # before the run is recorded as finished: a rerun then resumes its branches
        summary["branches"] = _branches(cfg, points, run_dir, attempt, writer, callbacks, quiet, best)
    return _finish(run_dir, summary, attempt, writer)


def _already_done(run_dir: Path, stop_at: Optional[int]) -> Optional[RunResult]:
    """A finished run as it is, or a paused one already at ``stop_at``; None: there is training to do."""
    status = rundir.read_json(run_dir / rundir.STATUS) or {}
    if status.get("status") in rundir.FINISHED:
        return RunResult(run_dir, status["status"], rundir.read_json(run_dir / rundir.SUMMARY) or {},
                         status.get("reason"), skipped=True)
    if rundir.stopped_by(status, stop_at):
        return RunResult(run_dir, status["status"], _rung_summary(status, int(status["step"])), status.get("reason"),
                         skipped=True)
    return None


def _check_machine(cfg: ExperimentConfig, writer: bool) -> None:
    """What the strategy, compiler and precision need of this machine; a warning when CPU processes crowd it."""
    from .accel import _wants_cuda, check_compiler, check_precision, check_strategy, oversubscribed
    from .eval_decoding import check_compiled_decoding

    check_strategy(cfg.train)
    check_compiler(cfg.train, cfg.train.accelerator)
    check_compiled_decoding(cfg.train, _wants_cuda(cfg.train.accelerator))
    check_precision(cfg.train, cfg.train.accelerator)
    crowded = oversubscribed(cfg.train)
    if crowded and writer:
        print(f"arch-zoo: warning: {crowded}", file=sys.stderr)


def _initial_weights(cfg: ExperimentConfig, data: TaskData, run_dir: Path) -> Optional[InitialWeights]:
    """``train.init_from``'s weights, checked against the model this config builds; None without it,
    and for a run that resumes (from its own checkpoint: the source may be gone by then)."""
    if not cfg.train.init_from or rundir.resume_state(run_dir) is not None:
        return None
    from ..models import build_model

    return initial_weights(cfg.train.init_from, build_model(cfg, embedding_rows(cfg.model, data.tokenizer)))


def _start(cfg: ExperimentConfig, run_dir: Path, data: TaskData, start: Optional[InitialWeights]) -> None:
    """The run dir as a run starts it: config, tokenizer, plugins, status ``running`` (and, for a run
    started from another's weights, their source: ``init_from``)."""
    (run_dir / rundir.CHECKPOINTS).mkdir(parents=True, exist_ok=True)
    save(cfg, run_dir / rundir.CONFIG)
    data.tokenizer.save(run_dir)
    plugins = plugin_records(cfg.plugins)
    rundir.keep_plugins(run_dir, plugins)
    rundir.set_status(run_dir, "running", started=rundir.now(), pid=os.getpid(), reason=None,
                      plugins=plugins, metrics_steps=rundir.METRICS_STEPS,  # a failed run is traceable to its code too
                      **({"init_from": start.record} if start is not None else {}))


def _failed(run_dir: Path, exc: Exception, attempt: rundir.Attempt, writer: bool) -> RunResult:
    """Called inside the ``except``: error.txt holds the traceback being handled."""
    reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
    attempt.update(outcome="failed")
    if writer:
        (run_dir / "error.txt").write_text(traceback.format_exc())
        rundir.set_status(run_dir, "failed", reason=reason)
    return RunResult(run_dir, "failed", {}, reason)


def _finish(run_dir: Path, summary: Dict[str, Any], attempt: rundir.Attempt, writer: bool) -> RunResult:
    """A completed or diverged run: its attempts and their wall time in summary.json, status finished."""
    summary["attempts"] = attempt.update(summary["step"], summary["status"]) or summary.get("attempts", [])
    summary["wall_time_s"] = rundir.total_wall_time(summary["attempts"]) or summary["wall_time_s"]
    if writer:
        source = (rundir.read_json(run_dir / rundir.STATUS) or {}).get("init_from")
        if source:  # recorded when the run started: a resumed attempt loads no source weights
            summary["init_from"] = source
        rundir.write_json(run_dir / rundir.SUMMARY, summary)
        rundir.set_status(run_dir, summary["status"], reason=summary.get("reason"), finished=rundir.now(),
                          step=summary["step"])
    return RunResult(run_dir, summary["status"], summary, summary.get("reason"))


def _branches(cfg: ExperimentConfig, points: list, run_dir: Path, attempt: rundir.Attempt, writer: bool,
              callbacks: Sequence[Any], quiet: bool, best: Optional[Tuple[str, str]]) -> list:
    from .branches import run_branches

    try:
        return run_branches(cfg, points, run_dir, lambda c, d: _run_one(c, d, callbacks, quiet, None, best))
    except RunInterrupted as exc:  # the command that resumes is the run's, which resumes the branch
        attempt.update(outcome="interrupted")
        if writer:
            rundir.set_status(run_dir, "interrupted", reason=f"interrupted by {exc.signal_name} in {exc.run_dir}",
                              step=attempt.step)
        raise RunInterrupted(exc.signal_name, run_dir, attempt.step) from None


def _pause(run_dir: Path, paused: Dict[str, Any], attempt: rundir.Attempt, writer: bool) -> RunResult:
    step = paused["step"]
    attempt.update(step, rundir.PAUSED)
    reason = f"stopped at rung step {step}"
    if writer:
        rungs = (rundir.read_json(run_dir / rundir.STATUS) or {}).get("rungs") or {}
        rundir.set_status(run_dir, rundir.PAUSED, reason=reason, step=step, rungs={**rungs, str(step): paused["rung"]})
    return RunResult(run_dir, rundir.PAUSED, {"final": paused["rung"], "step": step}, reason)


def _rung_summary(status: Dict[str, Any], step: int) -> Dict[str, Any]:
    return {"final": (status.get("rungs") or {}).get(str(step), {}), "step": step}
