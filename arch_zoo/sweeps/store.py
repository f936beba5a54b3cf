"""The run store of one sweep, ``OUT/<sweep>/``:

    sweep.yaml             the spec as given, plus ``resolved_base``
    index.csv              run_id, variant, seed, status, reason, then one column per varied key;
                           rebuilt from the run dirs and replaced atomically after every run
    runs/<run_id>/         run_one's run directory, plus run.json (written before training)
    runs/<run_id>/.lock    held (flock) by the process training the run; the kernel drops it when
                           that process dies, however it dies
    retried/<run_id>.<time>/  what --retry-failed moved aside (failures stay data)
    invocations.jsonl      per `arch-zoo sweep` call, appended as it goes: a "started" line (command,
                           commit, machine), a "run" line per run it trained, an "ended" line (times,
                           outcome); a call killed outright leaves no "ended" line, and reports say so

Every status lives in the run dirs (status.json, written by run_one; under successive halving the
sweep also records a run's value as ``pruned`` there, see ``rungs.py``), so a killed sweep loses
nothing: the index is derived, and a rerun rebuilds it."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from ..errors import ConfigError
from ..locks import acquire, is_held
from ..run_names import plain
from ..rundir import CONFIG, INDEX, INVOCATIONS, LOCK, RUN_JSON, SPEC, STATUS, read_json, set_status, write_json  # noqa: F401
from .plan import Plan

INDEX_COLUMNS = ["run_id", "variant", "seed", "status", "reason"]
IDENTITY = ("sweep", "run_id", "variant", "seed", "settings", "matched")  # what a rerun's run.json must agree on


class Store:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.runs = self.root / "runs"

    def run_dir(self, run_id: str) -> Path:
        return self.runs / run_id

    def log_invocation(self, record: Dict[str, Any]) -> None:
        """Append one line to invocations.jsonl. One write(2) on an O_APPEND descriptor, so
        concurrent sweep processes never interleave a line; a line a killed process left torn (no
        final newline) is closed first, so it does not swallow this one."""
        self.root.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(record, default=str) + "\n").encode("utf-8")
        fd = os.open(self.root / INVOCATIONS, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            os.write(fd, line)
        finally:
            os.close(fd)

    # ------------------------------------------------------------------------------ writing the plan

    def keep_ids(self, plan: Plan) -> None:
        """A planned run whose directory is missing takes the stored one that ends in its
        ``id_suffix`` (the same settings and seed): an earlier version wrote other slugs for some
        values (a component with options), and its runs keep their directories and run.json."""
        if not self.runs.is_dir():
            return
        stored = {_suffix(d.name): d.name for d in sorted(self.runs.iterdir()) if d.is_dir()}
        for run in plan.runs:
            if not self.run_dir(run.run_id).exists():
                run.run_id = stored.get(_suffix(run.run_id), run.run_id)

    def check_conflicts(self, plan: Plan) -> None:
        """A run id that already holds a different config is an error naming the run: the spec
        changed something its runs share. Nothing is ever overwritten. The plan's runs first take
        the ids the store holds them under (``keep_ids``)."""
        from ..experiment import load
        from ..coerce import first_difference, to_dict

        self.keep_ids(plan)
        for run in plan.runs:
            d = self.run_dir(run.run_id)
            if (d / CONFIG).exists():
                diff = first_difference(to_dict(load(d / CONFIG)), to_dict(run.config))
                if diff:
                    raise ConfigError(f"run {run.run_id}", f"{d} holds a different config ({diff}); the spec changed "
                                      "what its runs share: use a new sweep name or --out, or move the old runs away")
            old = read_json(d / RUN_JSON)
            new = run.record(plan.spec.name)
            # a variant's name follows from its settings: one an earlier version wrote (a layer list as
            # its whole YAML) is renamed by write_plan when the settings agree
            key = next((k for k in IDENTITY if old is not None and old.get(k) != new[k]
                        and not (k == "variant" and old.get("settings") == new["settings"])), None)
            if key:
                raise ConfigError(f"run {run.run_id}", f"{d / RUN_JSON} records {key}={old.get(key)!r}, the spec now "
                                  f"gives {new[key]!r}; use a new sweep name or --out")

    def write_plan(self, plan: Plan) -> None:
        import yaml

        self.runs.mkdir(parents=True, exist_ok=True)
        spec = dict(plan.spec.raw)
        spec["resolved_base"] = plan.spec.base
        _atomic_text(self.root / SPEC, yaml.safe_dump(spec, sort_keys=False))
        for run in plan.runs:
            d = self.run_dir(run.run_id)
            d.mkdir(exist_ok=True)
            old, new = read_json(d / RUN_JSON), run.record(plan.spec.name)
            if old is not None:  # the baseline may change between reruns; params stay as the run was built
                new["params"] = old.get("params", new["params"])
            if old != new:
                write_json(d / RUN_JSON, new)

    # ------------------------------------------------------------------------------- reading state

    def status(self, run_id: str) -> Dict[str, Any]:
        """status.json, or {"status": "pending"}; a "running" run whose lock nobody holds was
        killed, and reads as interrupted."""
        d = self.run_dir(run_id)
        record = read_json(d / STATUS) or {"status": "pending"}
        if record.get("status") == "running" and not is_locked(d):
            record = {**record, "status": "interrupted", "reason": record.get("reason") or "its process died"}
        return record

    def write_index(self, plan: Plan) -> None:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(INDEX_COLUMNS + plan.axes)
        for run in plan.runs:
            s = self.status(run.run_id)
            writer.writerow([run.run_id, run.variant, run.seed, s.get("status"), s.get("reason") or ""]
                            + [plain(run.settings[k]) for k in plan.axes])
        _atomic_text(self.root / INDEX, out.getvalue())

    def mark_lost(self, run_id: str, pid: Optional[int], why: str) -> None:
        """A worker died mid-run: record it as interrupted (a rerun resumes it), unless another
        process has taken the run over since."""
        d = self.run_dir(run_id)
        record = read_json(d / STATUS) or {}
        if record.get("status") == "running" and (pid is None or record.get("pid") == pid) and not is_locked(d):
            set_status(d, "interrupted", reason=why)

    def archive(self, run_id: str) -> Path:
        """Move a failed or diverged run's files aside (--retry-failed), keeping run.json and the lock."""
        d = self.run_dir(run_id)
        dest = self.root / "retried" / f"{run_id}.{time.strftime('%Y%m%dT%H%M%S')}"
        dest.mkdir(parents=True, exist_ok=True)
        for entry in d.iterdir():
            if entry.name not in (RUN_JSON, LOCK):
                entry.rename(dest / entry.name)
        return dest


# ------------------------------------------------------------------------------------------- locks

def _suffix(run_id: str) -> str:
    """The ``run_names.id_suffix`` of a run id: -s<seed>-<hash6>."""
    return "-" + "-".join(run_id.rsplit("-", 2)[1:])


@contextlib.contextmanager
def run_lock(run_dir: Path, wait: bool) -> Iterator[bool]:
    """Hold the run's lock for the body; yields False (without waiting) when another process has
    it and ``wait`` is false. The file stays when it is let go."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = acquire(run_dir / LOCK, blocking=wait)
    if lock is None:
        yield False
        return
    try:
        yield True
    finally:
        lock.release(remove=False)


def is_locked(run_dir: Path) -> bool:
    return is_held(run_dir / LOCK)


# ----------------------------------------------------------------------------------------- helpers

def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # per process: two sweeps may write at once
    tmp.write_text(text)
    tmp.replace(path)
