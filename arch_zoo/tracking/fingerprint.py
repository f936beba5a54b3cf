"""What makes an exported run current: the hash of its summary.json. A rerun (``--retry-failed``)
writes a new summary, so its view is replaced; an unchanged run is never written twice."""
from __future__ import annotations

import hashlib
from pathlib import Path
from ..rundir import SUMMARY


def fingerprint(run_dir: Path) -> str:
    try:
        return hashlib.sha1((Path(run_dir) / SUMMARY).read_bytes()).hexdigest()[:16]
    except OSError:
        return ""
