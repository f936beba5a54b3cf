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


GDN = {"mixer": "gated_deltanet"}
LAYOUTS = {"model.layers": [[{"pattern": [GDN, GDN, GDN, {}]}], [{"pattern": [GDN, {}]}], None]}
FOUR_LAYERS = {**BASE, "model": {**BASE["model"], "n_layers": 4, "position": "none"},
              "train": {**BASE["train"], "max_steps": 2, "val_every": 2}}


def test_a_layer_list_names_its_variant_and_its_run_id_by_its_layout(tmp_path):
    """Not the whole YAML list in every table and legend, nor a run id cut to layers-patternmixergated_de."""
    plan = make_plan(load_spec(write_spec(tmp_path, {"name": "hy", "zip": LAYOUTS, "seeds": [0]}, FOUR_LAYERS)))
    got = [(r.variant, r.run_id) for r in plan.runs]
    digests = [_digest({"model.layers": v}, 0) for v in LAYOUTS["model.layers"]]
    assert got == [("layers=gated_deltanet x3 + attention", f"layers-gated_deltanetx3+attention-s0-{digests[0]}"),
                   ("layers=gated_deltanet + attention", f"layers-gated_deltanet+attention-s0-{digests[1]}"),
                   ("layers=attention", f"layers-null-s0-{digests[2]}")]


def test_a_layouts_name_counts_repeats_and_says_the_models_own_mixer_ranges_and_other_keys():
    from arch_zoo.run_names import layout_name, plain, settings_label

    assert layout_name([{"pattern": [GDN, GDN, {}, GDN]}]) == "gated_deltanet x2 + attention + gated_deltanet"
    assert layout_name([{"pattern": [{}, {"mixer": "attention"}]}], mixer="mamba2") == "mamba2 + attention"
    assert layout_name([{"range": "0:2", "mixer": {"name": "mamba2", "state_size": 4}}, {"stack": "decoder",
                                                                                          "ffn": "relu"}]) == \
        "layers 0:2: mamba2(state_size=4); decoder: attention with ffn=relu"
    # as run.json records a list (its plain text), and as a flattened config.yaml holds one (Python's repr)
    value = [{"pattern": [GDN, {}]}]
    assert layout_name(plain(value)) == layout_name(str(value)) == "gated_deltanet + attention"
    # a variant that sets the model's mixer too: its layers are that mixer's where the list leaves them
    assert settings_label({"model.mixer": "mamba2", "model.layers": plain(value)}) == \
        "mixer=mamba2,layers=gated_deltanet + mamba2"
    assert layout_name("not yaml: [") is None and layout_name([1, 2]) is None


def test_a_store_that_named_layer_lists_by_their_yaml_resumes_and_reports_the_layouts(tmp_path):
    """An earlier version named a layer list's variant by its whole YAML and cut its run id's slug to 20
    characters; its store resumes (nothing retrained, every run dir kept, run.json renamed) and reports by
    the layouts' names."""
    from arch_zoo.reports import load_runs
    from arch_zoo.reports.tables import terminal_table
    from arch_zoo.run_names import plain

    spec = {"name": "hy", "zip": {"model.layers": [[{"pattern": [GDN, {}]}], None]}, "seeds": [0],
            "baseline": {"model.layers": None}}
    path, out = write_spec(tmp_path, spec, FOUR_LAYERS), tmp_path / "out"
    first = run_sweep(load_spec(path), out, log=lambda line: None)
    runs, old_ids = out / "hy" / "runs", {}
    index = (out / "hy" / "index.csv").read_text()
    for run in first.plan.runs:  # as the earlier version wrote them
        value = None if run.settings["model.layers"] is None else [{"pattern": [GDN, {}]}]
        old_variant = f"layers={plain(value)}"
        old_id = f"layers-{''.join(c for c in plain(value) if c.isalnum() or c in '._+')[:20]}" \
                 f"-s0-{_digest({'model.layers': value}, 0)}"
        old_ids[run.run_id] = old_id
        (runs / run.run_id).rename(runs / old_id)
        record = json.loads((runs / old_id / "run.json").read_text())
        (runs / old_id / "run.json").write_text(json.dumps({**record, "run_id": old_id, "variant": old_variant}))
        index = index.replace(run.run_id, old_id).replace(run.variant, old_variant)
    (out / "hy" / "index.csv").write_text(index)
    assert "layers-patternmixergated_" in " ".join(old_ids.values())

    again = run_sweep(load_spec(path), out, log=lambda line: None)
    assert all(r.outcome != "trained" for r in again.results.values())
    assert sorted(d.name for d in runs.iterdir()) == sorted(old_ids.values())
    assert {json.loads((runs / d / "run.json").read_text())["variant"] for d in old_ids.values()} == \
        {"layers=gated_deltanet + attention", "layers=attention"}
    frame = load_runs(out / "hy")
    assert set(frame["variant"]) == {"layers=gated_deltanet + attention", "layers=attention"}
    table = terminal_table(out / "hy")
    assert "gated_deltanet + attention" in table and "pattern" not in table
