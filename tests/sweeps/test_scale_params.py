"""A ladder by parameter count (issue 42 item 4): ``scale.rule: {params, aspect_ratio, head_dim}`` picks
each rung's width (a multiple of head_dim) and depth (width / aspect_ratio) nearest a parameter target."""
import pytest
from torch import nn

from arch_zoo.cli import main
from arch_zoo.experiment import load
from arch_zoo.errors import ConfigError
from arch_zoo.models import build_model
from arch_zoo.sweeps import load_spec, make_plan
from arch_zoo.sweeps.spec import add_overrides, parse_spec
from arch_zoo.training.run import prepare

from .conftest import write_spec

RULE = {"params": [2000, 6000, 20000], "aspect_ratio": 8, "head_dim": 4, "ffn_ratio": 2, "tolerance": 0.3}
LADDER = {"name": "lad", "grid": {"model.position": ["sinusoidal", "rope"]}, "seeds": [0],
          "baseline": {"model.position": "sinusoidal"},
          "scale": {"rule": RULE, "budget": {"tokens_per_param": 0.5}}}


def _non_embedding(model: nn.Module) -> int:
    """Independently of the sizer: every parameter once, less the embedding tables."""
    unique = {id(p): p for p in model.parameters()}
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return sum(p.numel() for i, p in unique.items() if i not in tables)


def _count_at(base, width: int) -> int:
    cfg = load(base, ["model.position=sinusoidal", f"model.d_model={width}", f"model.n_heads={width // 4}",
                      f"model.n_layers={max(1, round(width / 8))}", f"model.d_ff={2 * width}"])
    return _non_embedding(build_model(cfg.model, _vocab(cfg)))


def _vocab(cfg) -> int:
    return prepare(cfg, quiet=True).tokenizer.vocab_size


def _parse(rule, **extra):
    return parse_spec({"name": "t", "base": "preset:gpt2", "grid": {"model.position": ["rope", "alibi"]},
                       "scale": {"rule": rule, **extra}})


def test_a_parameter_rule_parses_to_targets_and_sets_the_shape_keys():
    spec = _parse({"params": [1e5, 3e5, 1e6], "aspect_ratio": 16, "head_dim": 16})
    scale = spec.scale
    assert scale.sizes == () and scale.rungs == 3 and scale.holdout is None
    assert scale.params_rule.params == (1e5, 3e5, 1e6) and scale.params_rule.count == "non_embedding"
    assert scale.params_rule.shape(64) == {"d_model": 64, "n_layers": 4, "n_heads": 4, "d_ff": None}
    with pytest.raises(ConfigError, match="model.d_model: is set by the spec's scale"):
        add_overrides(spec, ["model.d_model=48"])
    with pytest.raises(ConfigError, match="scale.rule.d_model: model.d_model is also varied by grid"):
        parse_spec({"name": "t", "base": "preset:gpt2", "grid": {"model.d_model": [32, 64]},
                    "scale": {"rule": {"params": [1e5, 3e5, 1e6], "aspect_ratio": 16, "head_dim": 16}}})


@pytest.mark.parametrize("rule, message", [
    ({"params": [1e5, 3e5, 1e6], "widths": [32], "aspect_ratio": 16, "head_dim": 16}, "scale.rule: give one of"),
    ({"params": [1e5, 3e5, 1e6], "d_model": 32, "aspect_ratio": 16, "head_dim": 16}, "scale.rule.d_model: is for a"),
    ({"params": [3e5, 1e5, 1e6], "aspect_ratio": 16, "head_dim": 16}, "scale.rule.params: list each target once"),
    ({"params": [1e5, -3e5, 1e6], "aspect_ratio": 16, "head_dim": 16}, r"scale.rule.params\[1\]: expected a pos"),
    ({"params": 1e5, "aspect_ratio": 16, "head_dim": 16}, "scale.rule.params: expected a list"),
    ({"params": [1e5, 3e5, 1e6], "head_dim": 16}, "scale.rule.aspect_ratio: missing"),
    ({"params": [1e5, 3e5, 1e6], "aspect_ratio": 16, "head_dim": 1.5}, "scale.rule.head_dim: expected a positive"),
    ({"params": [1e5, 3e5, 1e6], "aspect_ratio": 16, "head_dim": 16, "count": "all"}, "scale.rule.count: expected"),
    ({"params": [1e5, 3e5, 1e6], "aspect_ratio": 16, "head_dim": 16, "tolerance": 0}, "scale.rule.tolerance: exp"),
    ({"widths": [32, 64, 128], "aspect_ratio": 16, "head_dim": 16, "count": "total"}, "scale.rule.count: is for a"),
])
def test_a_bad_parameter_rule_is_one_line(rule, message):
    with pytest.raises(ConfigError, match=message):
        _parse(rule)


def test_the_plan_picks_the_width_nearest_each_target_and_counts_it_as_the_built_model_does(spec_dir):
    plan = make_plan(load_spec(write_spec(spec_dir, LADDER)))
    sizes = plan.spec.scale.sizes
    assert [s.where for s in sizes] == [f"scale.rule.params[{i}]" for i in range(3)]
    ref = {r.scale["rung"]: r for r in plan.runs if r.is_baseline}
    for i, (size, target) in enumerate(zip(sizes, RULE["params"])):
        run = ref[i]
        width = run.config.model.d_model
        assert width % 4 == 0 and size.keys == {"d_model": width, "n_layers": max(1, round(width / 8)),
                                                "n_heads": width // 4, "d_ff": 2 * width}
        measured = _non_embedding(build_model(run.config.model, _vocab(run.config)))
        assert run.scale["non_embedding_params"] == measured == size.count
        assert run.scale["target_params"] == target and run.scale["target_count"] == "non_embedding"
        assert abs(measured / target - 1) <= RULE["tolerance"]
        # no other multiple of head_dim comes nearer
        miss = abs(measured / target - 1)
        for other in (width - 4, width + 4):
            if other > 0:
                assert abs(_count_at(spec_dir / "base.yaml", other) / target - 1) >= miss
    assert len({s.label for s in sizes}) == 3


def test_the_dry_run_describes_each_rung_and_a_target_out_of_reach_is_one_line(spec_dir, tmp_path, capsys):
    path = write_spec(spec_dir, LADDER)
    assert main(["sweep", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "target params" in out and "nearest each target" in out
    plan = make_plan(load_spec(path))
    for size in plan.spec.scale.sizes:
        line = next(x for x in out.splitlines() if f" {size.label} " in x and "sinusoidal" in x)
        assert f"d_model={size.keys['d_model']}, n_layers={size.keys['n_layers']}" in line
        assert f"{size.count:,}" in line and f"{size.count / size.target - 1:+.1%}" in line
    for rule, message in (({**RULE, "params": [2000, 2100, 20000]}, r"scale.rule.params\[1\]: 2,100 parameters lands "
                           r"on the shape of scale.rule.params\[0\]"),
                          ({**RULE, "params": [2000, 6000, 9000], "tolerance": 0.01},
                           r"scale.rule.params\[\d\]: no shape of the rule comes within 1% of")):
        bad = write_spec(spec_dir, {**LADDER, "scale": {**LADDER["scale"], "rule": rule}}, name="bad.yaml")
        assert main(["sweep", str(bad), "--dry-run", "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        import re
        assert re.search(message, err), err


def test_count_total_meets_the_targets_in_all_parameters_and_a_tuned_ladder_plans_on_the_sizes(spec_dir):
    rule = {**RULE, "params": [4000, 9000, 20000], "count": "total"}
    spec = {**LADDER, "scale": {**LADDER["scale"], "rule": rule}}
    plan = make_plan(load_spec(write_spec(spec_dir, spec)))
    for run in (r for r in plan.runs if r.is_baseline):
        size = plan.spec.scale.sizes[run.scale["rung"]]
        model = build_model(run.config.model, _vocab(run.config))
        total = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
        assert run.scale["params"] == total == size.count and abs(total / size.target - 1) <= rule["tolerance"]
    # lr: transfer tunes the smallest resolved rung in stage 1
    tuned = {**spec, "tune": {"key": "train.lr", "values": [1e-3, 3e-3], "seeds": [5]},
             "scale": {**spec["scale"], "lr": "tune"}}
    first = make_plan(load_spec(write_spec(spec_dir, tuned, name="tuned.yaml")))
    assert sorted({r.scale["size"] for r in first.runs}) == sorted(s.label for s in plan.spec.scale.sizes)
