"""Writing a section's frames (a ladder's fits, a suite's scores) as CSV and Parquet at full precision."""
from __future__ import annotations

from pathlib import Path
from typing import List, Mapping, Sequence

import pandas as pd


def write_frames(frames: Mapping[str, pd.DataFrame], out: Path, formats: Sequence[str]) -> List[Path]:
    """``out/<name>.csv`` and ``.parquet`` for each frame, as ``formats`` asks."""
    written = []
    for name, frame in frames.items():
        for fmt in ("csv", "parquet"):
            if fmt in formats:
                path = out / f"{name}.{fmt}"
                frame.to_csv(path, index=False) if fmt == "csv" else frame.to_parquet(path, index=False)
                written.append(path)
    return written
