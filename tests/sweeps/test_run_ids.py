"""Run ids: a component with options reads as ``describe`` labels it; a sweep store an earlier version
wrote (other slugs for such values) keeps its run directories."""
import csv
import hashlib
import json

from arch_zoo.sweeps import load_spec, make_plan, run_sweep
from .conftest import BASE, write_spec

WINDOW = {"name": "sliding_window", "window": 4}
SPEC = {"name": "ids", "grid": {"model.attention": ["global", WINDOW]}, "seeds": [0]}


def _digest(settings: dict, seed: int) -> str:
    return hashlib.sha1(json.dumps({"settings": settings, "seed": seed}, sort_keys=True).encode()).hexdigest()[:6]


def test_a_component_axis_labels_its_runs_as_describe_does(tmp_path):
    plan = make_plan(load_spec(write_spec(tmp_path, SPEC)))
    ids = {r.settings["model.attention"]: r.run_id for r in plan.runs}  # (run.json records a mapping as text)
    assert ids == {"global": f"attention-global-s0-{_digest({'model.attention': 'global'}, 0)}",
                   "{name: sliding_window, window: 4}":
                       f"attention-sliding_window.window4-s0-{_digest({'model.attention': WINDOW}, 0)}"}


def test_a_sweep_store_an_earlier_version_wrote_keeps_its_run_ids(tmp_path):
    """Its runs renamed to the slug the earlier version wrote ("namesliding_windowwi") and run.json
    and index.csv saying so: a rerun trains nothing, finds every run done, and creates no directory."""
    path, out = write_spec(tmp_path, SPEC, {**BASE, "train": {**BASE["train"], "max_steps": 2, "val_every": 2}}), \
        tmp_path / "out"
    first = run_sweep(load_spec(path), out, log=lambda line: None)
    runs = out / "ids" / "runs"
    new = next(r.run_id for r in first.plan.runs if r.settings["model.attention"] != "global")
    old = f"attention-namesliding_windowwi-s0-{_digest({'model.attention': WINDOW}, 0)}"
    (runs / new).rename(runs / old)
    record = json.loads((runs / old / "run.json").read_text())
    (runs / old / "run.json").write_text(json.dumps({**record, "run_id": old}))
    index = (out / "ids" / "index.csv").read_text().replace(new, old)
    (out / "ids" / "index.csv").write_text(index)

    again = run_sweep(load_spec(path), out, log=lambda line: None)
    assert all(r.outcome != "trained" for r in again.results.values())
    assert sorted(d.name for d in runs.iterdir()) == sorted({old} | {r.run_id for r in first.plan.runs} - {new})
    assert old in {r.run_id for r in again.plan.runs}
    with (out / "ids" / "index.csv").open() as f:
        rows = {r["run_id"]: r["status"] for r in csv.DictReader(f)}
    assert rows.keys() == {d.name for d in runs.iterdir()} and set(rows.values()) == {"completed"}
