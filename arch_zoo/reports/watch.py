"""``arch-zoo report --watch``: rewrite the report whenever a run of the sweep writes something, and
say how far each variant is (runs done / running / waiting), until no run is left to train.

While runs remain, the HTML page reloads itself every ``interval`` seconds, so a browser left open
on it follows the sweep. The report's last state (without the reload) stays when it ends."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import pandas as pd

from ..rundir import INDEX, METRICS, RUN_JSON, SPEC, STATUS, SUMMARY
from .export import write_report
from .interactive import progress, unfinished

WATCHED = (STATUS, SUMMARY, METRICS, RUN_JSON)


def snapshot(sweep_dirs: Sequence[Path]) -> Dict[str, Tuple[float, int]]:
    """(mtime, size) of every file a run writes as it goes: a change means a new report."""
    out = {}
    for root in sweep_dirs:
        paths = [root / INDEX, root / SPEC, *(root / name for name in WATCHED)]
        runs = root / "runs"
        if runs.is_dir():
            paths += [d / name for d in runs.iterdir() for name in WATCHED]
        for p in paths:
            try:
                st = p.stat()
            except OSError:
                continue
            out[str(p)] = (st.st_mtime, st.st_size)
    return out


def progress_line(runs: pd.DataFrame) -> str:
    parts = [f"{r.variant}: {r.done} done{f' ({r.failed} failed)' if r.failed else ''}, {r.running} running, "
             f"{r.waiting} waiting" for r in progress(runs).itertuples(index=False)]
    return time.strftime("%H:%M:%S ") + "; ".join(parts)


def watch(sweep_dir: Union[str, Path, Sequence[Union[str, Path]]], out_dir: Optional[Union[str, Path]],
          interval: float = 10.0, say: Callable[[str], None] = print, **report_options) -> Dict[str, object]:
    """Regenerate until every run has finished (or Ctrl-C); returns the last ``write_report`` result."""
    dirs = [Path(sweep_dir)] if isinstance(sweep_dir, (str, Path)) else [Path(p) for p in sweep_dir]
    refresh = max(1, int(round(interval)))
    seen, result = None, None
    try:
        while True:
            state = snapshot(dirs)
            if state != seen or result is None:
                seen = state
                result = write_report(dirs if len(dirs) > 1 else dirs[0], out_dir, refresh_s=refresh,
                                      **report_options)
                runs = pd.concat([g["runs"] for g in result["groups"]], ignore_index=True)
                say(progress_line(runs))
                if not unfinished(runs):
                    break
                out_dir = result["out_dir"]  # the default name is the sweep's: keep writing to the same place
            time.sleep(interval)
    except KeyboardInterrupt:
        say("stopped watching")
        if result is None:
            raise
        return result
    # the last report: no reload, nothing left to follow
    return write_report(dirs if len(dirs) > 1 else dirs[0], out_dir, **report_options)
