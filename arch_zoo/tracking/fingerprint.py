"""What makes an exported run current: the hash of its summary.json (of its status.json for a
tuning run pruned at a rung, which has none). A rerun (``--retry-failed``) writes a new summary, and
a pruned run taken back or promoted a new status, so its view is replaced; an unchanged run is never
written twice."""
from __future__ import annotations

import hashlib
from pathlib import Path
from ..rundir import STATUS, SUMMARY


def fingerprint(run_dir: Path) -> str:
    for name in (SUMMARY, STATUS):
        try:
            return hashlib.sha1((Path(run_dir) / name).read_bytes()).hexdigest()[:16]
        except OSError:
            continue
    return ""
