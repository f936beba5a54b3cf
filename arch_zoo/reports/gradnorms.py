"""The gradient-norm study's outputs (``arch-zoo gradnorms``): the measured table, the last-layer
summary, the plots and provenance.json. The measuring is training's (``training/gradnorms.py``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import pandas as pd

from ..provenance import git_commit, machine
from ..training.gradnorms import last_layer_table
from .plots import gradnorm_plots


def write(frame: pd.DataFrame, out: Path, command: Optional[str] = None, wall_s: Optional[float] = None) -> List[Path]:
    """The table, the last-layer summary, the plots, and provenance.json (command, commit, machine)."""
    out.mkdir(parents=True, exist_ok=True)
    last = last_layer_table(frame)
    frame.to_csv(out / "gradnorms.csv", index=False)
    last.to_csv(out / "gradnorms_last_layer.csv", index=False)
    record = {"command": command, "wall_s": None if wall_s is None else round(wall_s, 1),
              "git_commit": git_commit(), "machine": machine()}
    (out / "provenance.json").write_text(json.dumps(record, indent=2) + "\n")
    return [out / "gradnorms.csv", out / "gradnorms_last_layer.csv", out / "provenance.json",
            *gradnorm_plots(frame, last, out)]

