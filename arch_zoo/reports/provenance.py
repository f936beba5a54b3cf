"""What a report says about where its numbers came from, and the decodings it shows.

Plain-text lines and rows, escaped by each format's writer: the sweep's description, every
`arch-zoo sweep` call that trained its runs (command, dates, wall time, commit, machine), the
`arch-zoo report` command, the total training time, and a few greedy decodings per variant
for generation tasks."""
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


def provenance_lines(runs: pd.DataFrame, command: Optional[str] = None) -> List[str]:
    lines = []
    for call in runs.attrs.get("invocations", []):
        trained = call.get("runs_trained")
        lines.append(f"sweep: `{call.get('command') or 'arch-zoo sweep (command not recorded)'}` — "
                     f"{call.get('started', '?')} to {call.get('ended', '?')}, wall {_duration(call.get('wall_s') or 0)}, "
                     f"{_count(trained, 'run')} trained ({call.get('outcome', '?')}), "
                     f"{_count(call.get('workers'), call.get('launcher', 'local') + ' worker')}; "
                     f"arch_zoo {call.get('git_commit') or 'commit unknown'}; "
                     f"machine: {call.get('machine') or 'unknown'}")
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
