"""A setting whose value is a list or a mapping (``model.layers``, a hybrid's layout) is stored in run.json
as its YAML flow text; a baseline given as the list itself, in the spec or through ``--within``'s levels,
picks the runs of that layout."""
import json

import numpy as np
import pytest

from arch_zoo.reports import load_runs, summarize
from arch_zoo.run_names import plain

from .sweeps import config, write_run

HYBRID = [{"pattern": [{"mixer": "gated_deltanet"}, {}]}]
LOCAL = [{"pattern": [{"mixer": "gated_deltanet"}, {"attention": {"name": "sliding_window", "window": 8}}]}]
LOSS = {"hybrid": [1.10, 1.12, 1.09], "local": [1.08, 1.11, 1.06]}


def write_layouts(root):
    (root / "runs").mkdir(parents=True)
    (root / "sweep.yaml").write_text(json.dumps({"name": "lay", "metric": {"name": "val/loss", "goal": "min"},
                                                 "baseline": {"model.layers": HYBRID}}))
    for name, layers in (("hybrid", HYBRID), ("local", LOCAL)):
        for seed, loss in enumerate(LOSS[name]):
            write_run(root / "runs" / f"{name}-{seed}", status="completed", seed=seed, sweep="lay",
                      settings={"model.layers": plain(layers)}, variant=f"layers={name}",
                      final={"val/loss": loss}, cfg=config("sinusoidal", seed, **{"model.layers": layers}))
    return root


def test_a_list_valued_baseline_in_the_spec_matches_the_runs_of_that_layout(tmp_path):
    table = summarize(load_runs(write_layouts(tmp_path / "lay"))).set_index("variant")
    assert table.loc["layers=hybrid", "baseline"] and not table.loc["layers=local", "baseline"]
    assert table.loc["layers=local", "val/loss delta"] == pytest.approx(np.mean(np.subtract(LOSS["local"],
                                                                                            LOSS["hybrid"])))
