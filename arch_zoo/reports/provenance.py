"""What a report says about where its numbers came from, and the decodings it shows.

Plain-text lines and rows, escaped by each format's writer: the sweep's description, every
`arch-zoo sweep` call that trained its runs (command, dates, wall time, commit, machine; a call
killed outright shows as interrupted), the `arch-zoo report` command, the total training time, and
a few greedy decodings per variant for generation tasks."""
from __future__ import annotations

from typing import Dict, List, Optional

import pandas as pd

from ..formatting import plural


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _count(n, word: str) -> str:
    return plural(n, word) if isinstance(n, int) else f"? {word}s"  # calls logged before a field existed


def sweep_calls(records: List[Dict]) -> List[Dict]:
    """invocations.jsonl's lines, one dict per `arch-zoo sweep` call in the order they started.
    A call writes "started", a "run" line per run it trained and "ended", sharing an id; one killed
    outright has no "ended" line: it comes out with outcome "killed" and the runs it got through.
    Lines without an id are the one-line records of older versions, complete as they are."""
    calls: List[Dict] = []
    by_id: Dict[str, Dict] = {}
    for record in records:
        key = record.get("invocation")
        if key is None:
            calls.append(dict(record))
            continue
        if key not in by_id:
            by_id[key] = {"outcome": "killed", "runs_trained": 0}
            calls.append(by_id[key])
        call, event = by_id[key], record.get("event")
        if event == "run":
            call["runs_trained"] += 1
            call["last_run_at"] = record.get("at")
        else:
            call.update({k: v for k, v in record.items() if k != "event"})
    return calls


def _call_line(call: Dict) -> str:
    command = call.get("command") or "arch-zoo sweep (command not recorded)"
    trained = call.get("runs_trained")
    where = (f"{_count(call.get('workers'), call.get('launcher', 'local') + ' worker')}; "
             f"arch_zoo {call.get('git_commit') or 'commit unknown'}; machine: {call.get('machine') or 'unknown'}")
    if call.get("outcome") == "killed":
        last = f", the last at {call['last_run_at']}" if call.get("last_run_at") else ""
        return (f"sweep: `{command}` — started {call.get('started', '?')}, interrupted: killed before it could "
                f"record its end; {_count(trained, 'run')} trained{last}; {where}")
    return (f"sweep: `{command}` — {call.get('started', '?')} to {call.get('ended', '?')}, "
            f"wall {_duration(call.get('wall_s') or 0)}, {_count(trained, 'run')} trained ({call.get('outcome', '?')}), {where}")


def provenance_lines(runs: pd.DataFrame, command: Optional[str] = None) -> List[str]:
    lines = [_call_line(call) for call in sweep_calls(runs.attrs.get("invocations", []))]
    if command:
        lines.append(f"report: `{command}`")
    wall = runs["wall_time_s"].dropna() if "wall_time_s" in runs.columns else pd.Series(dtype=float)
    if len(wall):
        lines.append(f"training time: {_duration(wall.sum())} over {plural(len(wall), 'run')} "
                     f"({_duration(wall.mean())} per run on average)")
    commits = runs.attrs.get("commits") or []
    if commits:
        lines.append("arch_zoo commit of the runs: " + ", ".join(commits))
    return lines


def sample_rows(runs: pd.DataFrame) -> Dict[str, List[Dict[str, str]]]:
    """variant → rows (input, target, greedy output, exact) from its lowest completed seed."""
    out = {}
    for variant, samples in (runs.attrs.get("samples") or {}).items():
        out[variant] = [{"input": str(s.get("prompt", "")), "target": str(s.get("target", "")),
                         "greedy output": str(s.get("greedy", "")), "exact": "yes" if s.get("exact") else "no"}
                        for s in samples]
    return out
