"""invocations.jsonl: what one `arch-zoo sweep` call records about itself as it goes (the reports
print it as the sweep's provenance), and the per-worker timings its end record carries."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from ..rundir import INVOCATIONS
from .store import Store
from .worker import Result


def utc_now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def worker_times(results, ready_at: Dict[int, float]) -> Dict[str, List[float]]:
    """Per warm worker: the gaps between the end of one run and the start of the next, and the time
    from its imports being done to the end of its last run (the worker time the machinery shares
    with training; each worker's one-time start-up is timed apart, in worker_startup_s)."""
    by_pid: Dict[int, List[Result]] = {}
    for r in results:
        if r.ended:
            by_pid.setdefault(r.pid, []).append(r)
    gaps, busy = [], []
    for pid, rs in by_pid.items():
        rs.sort(key=lambda r: r.began)
        gaps += [b.began - a.ended for a, b in zip(rs, rs[1:])]
        if pid in ready_at:
            busy.append(rs[-1].ended - ready_at[pid])
    return {"gaps_s": gaps, "worker_busy_s": busy}


class Invocation:
    """This call's lines in invocations.jsonl: "started" before any run is sent (so a call killed
    outright still shows), one "run" line per run it trained, "ended" with the outcome and timings.
    Lines of one call share its ``invocation`` id. A failed append is worth a warning, never the
    sweep's results."""

    def __init__(self, store: Store, command: Optional[str], started_at: str, launcher: str,
                 workers: Optional[int], log: Callable[[str], None]):
        import uuid

        self.store, self.log, self.warned = store, log, False
        self.head = {"invocation": uuid.uuid4().hex[:12], "command": command, "started": started_at,
                     "launcher": launcher, "workers": workers}

    def _append(self, record: Dict[str, Any]) -> None:
        try:
            self.store.log_invocation(record)
        except OSError as exc:
            if not self.warned:
                self.log(f"warning: could not append to {self.store.root / INVOCATIONS}: {exc}")
            self.warned = True

    def start(self, planned: int) -> None:
        from ..provenance import git_commit, machine

        self.head.update({"git_commit": git_commit(), "machine": machine()})
        self._append({**self.head, "event": "started", "runs_planned": planned})

    def ran(self, result: Result) -> None:
        if result.outcome == "trained":
            self._append({"invocation": self.head["invocation"], "event": "run", "run_id": result.run_id,
                          "status": result.status, "seconds": round(result.seconds, 2), "at": utc_now()})

    def end(self, t: Dict[str, Any], how: str, **extra: Any) -> None:
        """The end record: ``how`` (finished | interrupted), the timings ``t`` (``SweepOutcome.timings``)
        and ``extra`` (an interrupted call's signal and the runs it stopped)."""
        gaps = t.get("gaps_s") or []
        self._append({
            **self.head, "event": "ended", "ended": utc_now(), "wall_s": round(t["wall_s"], 2), "outcome": how,
            "runs_trained": len(t["run_s"]),
            "timings_s": {"training": round(sum(t["run_s"]), 2), "import": round(t["import_s"], 2),
                          "plan": round(t["plan_s"], 2), "store": round(t["store_s"], 2),
                          "worker_startup": round(max(t["worker_startup_s"] or [0.0]), 2),
                          "worker_busy": round(sum(t.get("worker_busy_s") or []), 2),
                          "between_runs_max": round(max(gaps), 3) if gaps else None}, **extra})
