"""Spec expansion, run ids, parameter matching, wandb settings: no training here."""
import math
import re


from arch_zoo.models import build_model
from arch_zoo.models.summary import count_parameters
from arch_zoo.sweeps import expand, load_spec, make_plan
from arch_zoo.sweeps.spec import parse_spec
from arch_zoo.training import prepare

from .conftest import BASE, write_spec


def settings(spec):
    return [v.settings for v in expand(spec)]


def test_grid_is_cartesian_in_axis_order(spec_dir):
    spec = load_spec(write_spec(spec_dir, {"grid": {"model.position": ["rope", "alibi"],
                                                    "model.norm": ["layernorm", "rmsnorm"]}}))
    assert settings(spec) == [
        {"model.position": "rope", "model.norm": "layernorm"}, {"model.position": "rope", "model.norm": "rmsnorm"},
        {"model.position": "alibi", "model.norm": "layernorm"}, {"model.position": "alibi", "model.norm": "rmsnorm"}]


def test_zip_varies_together_and_crosses_the_grid(spec_dir):
    spec = load_spec(write_spec(spec_dir, {"grid": {"model.position": ["rope", "alibi"]},
                                           "zip": {"model.n_heads": [1, 4], "model.head_dim": [16, 4]}}))
    got = settings(spec)
    assert len(got) == 4
    assert {(s["model.n_heads"], s["model.head_dim"]) for s in got} == {(1, 16), (4, 4)}
    assert got[0] == {"model.position": "rope", "model.n_heads": 1, "model.head_dim": 16}


def test_random_samples_are_seeded_distinct_and_in_range(spec_dir):
    raw = {"random": {"n": 5, "seed": 3, "parameters": {
        "train.lr": {"min": 1.0e-4, "max": 1.0e-2, "scale": "log"},
        "model.n_layers": {"min": 1, "max": 3},
        "model.ffn": {"values": ["gelu", "swiglu"]}}}}
    a = settings(load_spec(write_spec(spec_dir, raw)))
    b = settings(load_spec(write_spec(spec_dir, raw)))
    assert a == b and len(a) == 5 and len({tuple(s.items()) for s in a}) == 5
    for s in a:
        assert 1e-4 <= s["train.lr"] <= 1e-2 and isinstance(s["train.lr"], float)
        assert s["model.n_layers"] in (1, 2, 3) and isinstance(s["model.n_layers"], int)
        assert s["model.ffn"] in ("gelu", "swiglu")
    other = settings(load_spec(write_spec(spec_dir, {"random": {**raw["random"], "seed": 4}})))
    assert other != a
    logs = [math.log10(s["train.lr"]) for s in settings(load_spec(write_spec(spec_dir, {"random": {
        "n": 40, "parameters": {"train.lr": {"min": 1.0e-4, "max": 1.0e-2, "scale": "log"}}}})))]
    assert sum(x < -3 for x in logs) >= 10  # a log scale puts about half the draws below the midpoint 1e-3


def test_seeds_multiply_variants_into_stable_readable_run_ids(spec_dir):
    path = write_spec(spec_dir, {"name": "ids", "grid": {"model.position": ["rope", "alibi"]}, "seeds": [0, 7]})
    plan = make_plan(load_spec(path))
    assert [(r.variant, r.seed) for r in plan.runs] == [
        ("position=rope", 0), ("position=alibi", 0), ("position=rope", 7), ("position=alibi", 7)]
    assert [r.config.seed for r in plan.runs] == [0, 0, 7, 7]
    ids = [r.run_id for r in plan.runs]
    assert len(set(ids)) == 4
    assert re.fullmatch(r"position-rope-s0-[0-9a-f]{6}", ids[0])
    assert [r.run_id for r in make_plan(load_spec(path)).runs] == ids  # stable across invocations
    assert plan.runs[0].config.model.position.name == "rope" and plan.runs[1].config.model.position.name == "alibi"


def test_wandb_format_expands_like_the_native_spec(spec_dir):
    native = load_spec(write_spec(spec_dir, {"name": "n", "grid": {"model.position": ["rope", "alibi"],
                                                                   "train.lr": [1.0e-3, 3.0e-3]},
                                             "overrides": {"model.d_ff": 48}, "seeds": [0, 1]}))
    wandb = load_spec(write_spec(spec_dir, {"name": "w", "method": "grid", "parameters": {
        "model.position": {"values": ["rope", "alibi"]}, "train.lr": {"values": [1.0e-3, 3.0e-3]},
        "model.d_ff": {"value": 48}, "seed": {"values": [0, 1]}},
        "metric": {"name": "val/loss", "goal": "minimize"}}, name="wandb.yaml"))
    assert settings(wandb) == settings(native) and wandb.seeds == native.seeds == [0, 1]
    assert wandb.metric == {"name": "val/loss", "goal": "min"}
    assert [r.config for r in make_plan(wandb).runs] == [r.config for r in make_plan(native).runs]
    rnd = load_spec(write_spec(spec_dir, {"method": "random", "run_cap": 6, "parameters": {
        "train.lr": {"distribution": "log_uniform_values", "min": 1.0e-4, "max": 1.0e-2},
        "seed": {"values": [0, 1]}}}, name="wr.yaml"))
    assert len(expand(rnd)) == 3 and rnd.random["train.lr"].scale == "log"  # run_cap counts runs over seeds


def test_match_params_brings_every_variant_within_one_percent(spec_dir):
    grid = {"model.ffn": ["gelu", "swiglu", "reglu", "relu"], "model.n_heads": [2]}
    base = {**BASE, "model": {**BASE["model"], "d_model": 32, "d_ff": 128}}
    free = make_plan(load_spec(write_spec(spec_dir, {"grid": grid}, base)))
    assert max(abs(r.params - free.runs[0].params) / free.runs[0].params for r in free.runs) > 0.1
    plan = make_plan(load_spec(write_spec(spec_dir, {"grid": grid, "match_params": True,
                                                     "baseline": {"model.ffn": "gelu"}}, base)))
    target = next(r for r in plan.runs if r.is_baseline)
    vocab = prepare(target.config).tokenizer.vocab_size
    for run in plan.runs:
        actual = count_parameters(build_model(run.config.model, vocab))  # counted afresh, not trusted
        assert actual == run.params
        assert abs(actual - target.params) <= 0.01 * target.params, (run.variant, actual, target.params)
        if not run.is_baseline:
            assert run.matched == {"model.d_ff": run.config.model.d_ff}
    swiglu = next(r for r in plan.runs if r.settings["model.ffn"] == "swiglu")
    assert swiglu.config.model.d_ff < 128  # three projections: a narrower hidden layer


def test_wandb_enabled_base_gets_group_job_type_and_tags(spec_dir):
    base = {**BASE, "logging": {"wandb": {"enabled": True, "tags": ["mine"]}}}
    plan = make_plan(load_spec(write_spec(spec_dir, {"name": "dash", "grid": {"model.position": ["rope", "alibi"],
                                                                              "train.lr": [0.001]}}, base)))
    w = plan.runs[1].config.logging.wandb
    assert (w.group, w.job_type) == ("dash", "position=alibi,lr=0.001")
    assert w.tags == ["mine", "position=alibi", "lr=0.001"]
    plain = make_plan(load_spec(write_spec(spec_dir, {"grid": {"model.position": ["rope"]}})))
    assert plain.runs[0].config.logging.wandb.group is None  # only when the base turns wandb on


def test_baseline_and_defaults(spec_dir):
    plan = make_plan(load_spec(write_spec(spec_dir, {"grid": {"model.position": ["rope", "alibi"]}})))
    assert [r.is_baseline for r in plan.runs] == [True, False]  # no baseline: the first variant
    assert plan.spec.metric == {"name": "val/loss", "goal": "min"} and [r.seed for r in plan.runs] == [0, 0]
    spec = parse_spec({"name": "plain", "base": str(write_spec(spec_dir, {}).parent / "base.yaml"), "seeds": [1, 2]})
    assert [(r.variant, r.seed) for r in make_plan(spec).runs] == [("base", 1), ("base", 2)]


def test_the_shipped_random_spec_expands_with_dry_run(tmp_path, capsys):
    """README (Sweeps): "`random` draws `n` distinct samples, a function of `random.seed` alone ...
    `sweeps/random_lr.yaml` is one: `arch-zoo sweep sweeps/random_lr.yaml --dry-run` lists them"."""
    from pathlib import Path

    from arch_zoo.cli import main

    path = Path(__file__).resolve().parents[2] / "sweeps" / "random_lr.yaml"
    outputs = []
    for _ in range(2):
        assert main(["sweep", str(path), "--dry-run", "--out", str(tmp_path)]) == 0
        outputs.append(capsys.readouterr().out)
    runs = [o.split("estimated wall time")[0] for o in outputs]  # the timed estimate aside
    assert runs[0] == runs[1]  # the samples are a function of random.seed
    rows = re.findall(r"^lr=(\S+),warmup_steps=(\d+)\s.*?\s+([01])\s", outputs[0], flags=re.M)
    assert len(rows) == 12 and "12 runs" in outputs[0] and not any((tmp_path / "random_lr").glob("runs/*"))
    assert len({(lr, w) for lr, w, _ in rows}) == 6 and sorted({seed for *_, seed in rows}) == ["0", "1"]
    assert all(3e-4 <= float(lr) <= 1e-2 and w in ("0", "30", "100") for lr, w, _ in rows)
