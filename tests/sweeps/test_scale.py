"""A size ladder in a sweep spec (issue 29 §1): ``scale`` crosses every variant with sizes, gives each
rung its budget (tokens per parameter, or IsoFLOP budgets), tunes per size or transfers the smallest
rung's value, and ``--dry-run`` prints the ladder with a timed estimate."""
import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.errors import ConfigError
from arch_zoo.models import build_model
from arch_zoo.models.summary import non_embedding_parameters
from arch_zoo.sweeps import load_spec, make_plan
from arch_zoo.sweeps.ladder_table import duration
from arch_zoo.sweeps.plan import second_plan
from arch_zoo.sweeps.scale import SIZE_KEY
from arch_zoo.sweeps.scale_plan import check_transfer
from arch_zoo.sweeps.spec import add_overrides, expand, parse_spec
from arch_zoo.sweeps.tune import choose, stage_one_spec

from .conftest import write_spec

SIZES = [{"d_model": 16, "n_layers": 1, "d_ff": 32}, {"d_model": 24, "n_layers": 2, "d_ff": 48},
         {"d_model": 32, "n_layers": 2, "d_ff": 64}]
LADDER = {"name": "lad", "grid": {"model.position": ["sinusoidal", "rope"]}, "seeds": [0, 1],
          "baseline": {"model.position": "sinusoidal"}, "scale": {"sizes": SIZES, "budget": {"tokens_per_param": 0.5}}}


def _parse(scale, **extra):
    return parse_spec({"name": "t", "base": "preset:gpt2", "grid": {"model.position": ["rope", "alibi"]},
                       "scale": scale, **extra})


def test_a_rule_makes_widths_at_a_fixed_aspect_ratio_and_head_size():
    spec = _parse({"rule": {"widths": [32, 64, 128], "aspect_ratio": 16, "head_dim": 16}})
    assert [s.keys for s in spec.scale.sizes] == [
        {"d_model": w, "n_layers": w // 16, "n_heads": w // 16, "d_ff": None} for w in (32, 64, 128)]
    assert [s.label for s in spec.scale.sizes] == ["d32-L2-h2", "d64-L4-h4", "d128-L8-h8"]
    spec = _parse({"rule": {"widths": [64], "aspect_ratio": 32, "head_dim": 32, "ffn_ratio": 2}, "fit": False})
    assert spec.scale.sizes[0].keys == {"d_model": 64, "n_layers": 2, "n_heads": 2, "d_ff": 128}


def test_the_sizes_are_one_more_axis_smallest_rung_first():
    spec = _parse({"sizes": [{"d_model": 32}, {"model.d_model": 64, "name": "big"}], "budget": {"flops": [1e9, 4e9]},
                   "fit": False})
    assert spec.axes == ["model.position", "scale.size", "scale.flops"]
    got = [(v.settings["scale.size"], v.settings["scale.flops"], v.settings["model.position"]) for v in expand(spec)]
    assert got == [(s, c, p) for s in ("d32", "big") for c in (1e9, 4e9) for p in ("rope", "alibi")]


def test_a_key_a_size_sets_is_neither_an_axis_nor_an_override():
    with pytest.raises(ConfigError, match=r"scale.sizes\[0\].d_model: model.d_model is also varied by grid"):
        parse_spec({"name": "t", "base": "preset:gpt2", "grid": {"model.d_model": [32, 64]},
                    "scale": {"sizes": [{"d_model": 32}]}})
    with pytest.raises(ConfigError, match="model.d_model: is set by the spec's scale"):
        add_overrides(_parse({"sizes": [{"d_model": 32}], "fit": False}), ["model.d_model=48"])
    with pytest.raises(ConfigError, match="scale.lr: transfer is about the tuned value; add a tune key"):
        _parse({"sizes": [{"d_model": 32}], "lr": "transfer", "fit": False})
    from arch_zoo.sweeps.wandb_format import to_wandb

    with pytest.raises(ConfigError, match="scale: a wandb sweep has no size ladder"):
        to_wandb(_parse({"sizes": [{"d_model": 32}], "fit": False}), ".")


@pytest.fixture(scope="module")
def ladder_plan(tmp_path_factory):
    path = write_spec(tmp_path_factory.mktemp("spec"), LADDER)
    return make_plan(load_spec(path)), path


def test_each_rung_trains_tokens_per_param_times_its_baselines_parameters(ladder_plan):
    plan, _ = ladder_plan
    from arch_zoo.training.run import prepare

    vocab = prepare(plan.runs[0].config).tokenizer.vocab_size
    assert [r.settings[SIZE_KEY] for r in plan.runs] == [s for s in ("d16-L1-ff32", "d24-L2-ff48", "d32-L2-ff64")
                                                         for _ in range(4)]  # every seed of a rung, then the next
    for run in plan.runs:
        with torch.random.fork_rng():
            model = build_model(run.config.model, vocab)
        total = sum(p.numel() for p in model.parameters())
        embedding = model.embed.weight.numel()  # tied head; sinusoidal and rope positions have no parameters
        assert (run.scale["params"], run.scale["non_embedding_params"]) == (total, total - embedding)
        assert run.config.model.d_model == SIZES[run.scale["rung"]]["d_model"]
        tokens_per_step = 8 * 32
        assert run.config.train.max_steps == max(1, round(0.5 * total / tokens_per_step))
        assert run.record("lad")["scale"]["size"] == run.settings[SIZE_KEY]


def test_non_embedding_parameters_leave_out_token_and_position_tables():
    from arch_zoo.config import ModelConfig

    cfg = ModelConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_seq_len=32, position="learned",
                      tie_embeddings=False)
    model = build_model(cfg, 50)
    tables = 50 * 16 + 32 * 16  # tokens, learned positions; the untied head stays: every token runs through it
    assert non_embedding_parameters(model) == sum(p.numel() for p in model.parameters()) - tables


def test_an_isoflop_ladder_trains_each_size_on_what_its_budget_buys(spec_dir):
    budgets = [2e8, 8e8]
    spec = {**LADDER, "seeds": [0], "scale": {"sizes": SIZES[:2], "budget": {"flops": budgets}, "warmup_fraction": 0.1,
                                              "fit": False}}
    plan = make_plan(load_spec(write_spec(spec_dir, spec)))
    assert len(plan.runs) == 2 * 2 * 2
    for run in plan.runs:
        b, per_step = run.budget, run.budget["flops"] / run.budget["steps"]
        assert abs(b["flops"] - run.settings["scale.flops"]) <= per_step / 2
        assert run.config.train.warmup_steps == round(0.1 * b["steps"])
        assert run.scale["flops_budget"] == run.settings["scale.flops"]


def test_transfer_tunes_the_smallest_rung_and_reuses_its_choice_at_every_size(spec_dir):
    spec = {**LADDER, "seeds": [1], "scale": {**LADDER["scale"], "lr": "transfer"},
            "tune": {"key": "train.lr", "values": [1.0e-3, 3.0e-3], "seeds": [7]}}
    with pytest.raises(ConfigError, match="scale.lr: transfer .* model.parametrization is standard"):
        make_plan(load_spec(write_spec(spec_dir, spec)))  # a transferred lr holds under µP only
    spec["overrides"] = {"model.parametrization": {"name": "mup", "base_width": 16}}
    loaded = load_spec(write_spec(spec_dir, spec))
    first = make_plan(loaded)
    assert {r.settings[SIZE_KEY] for r in first.runs} == {"d16-L1-ff32"} and len(first.runs) == 4
    from arch_zoo.sweeps.tables import dry_run_table

    assert "4 runs in stage 1, 6 runs in stage 2" in dry_run_table(first)  # every rung at the smallest's value
    scores = {("sinusoidal", 1.0e-3): 2.0, ("sinusoidal", 3.0e-3): 1.9, ("rope", 1.0e-3): 1.8, ("rope", 3.0e-3): 2.1}
    rows = [(r.settings, r.seed, "completed", scores[(r.settings["model.position"], r.settings["train.lr"])])
            for r in first.runs]
    second = second_plan(loaded, choose(stage_one_spec(loaded).tune, rows))
    assert len(second.runs) == 6
    for run in second.runs:
        assert run.config.train.lr == {"sinusoidal": 3.0e-3, "rope": 1.0e-3}[run.settings["model.position"]]
    assert {r.settings[SIZE_KEY] for r in second.runs} == {"d16-L1-ff32", "d24-L2-ff48", "d32-L2-ff64"}


def test_transfer_needs_mup_where_the_schema_has_a_parametrization():
    scale = _parse({"sizes": [{"d_model": 32}], "fit": False}).scale
    scale = dataclasses.replace(scale, lr="transfer")
    variant = SimpleNamespace(settings={})
    check_transfer(scale, [(variant, SimpleNamespace(model=SimpleNamespace()))])  # no such key: the user's call
    check_transfer(scale, [(variant, SimpleNamespace(model=SimpleNamespace(parametrization={"name": "mup"})))])
    with pytest.raises(ConfigError, match="scale.lr: transfer .* model.parametrization is sp"):
        check_transfer(scale, [(variant, SimpleNamespace(model=SimpleNamespace(parametrization=SimpleNamespace(
            name="sp"))))])


def test_the_dry_run_prints_each_rung_with_its_estimate_from_the_probe(ladder_plan, tmp_path, capsys, monkeypatch):
    plan, path = ladder_plan
    from arch_zoo.sweeps import probe

    monkeypatch.setattr(probe, "step_seconds", lambda cfg, data, timed=probe.TIMED_STEPS: 0.25)
    monkeypatch.setattr(probe, "overhead", lambda cfg, per_step, steps=probe.CALIBRATION_STEPS: probe.Overhead())
    assert main(["sweep", str(path), "--dry-run", "--out", str(tmp_path / "out"), "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "nothing was trained (--dry-run)" in out and not (tmp_path / "out").exists()
    table = out.split("\nladder:\n")[1]
    total = 0.0
    for run in plan.runs[::2]:  # one row per rung and variant; its two seeds alike
        t = run.config.train
        evals = math.ceil(t.max_steps / t.val_every)
        each = 0.25 * (t.max_steps + evals * t.val_batches / 3)  # eval batches at a third of a step
        total += 2 * each
        row = next(line for line in table.splitlines() if run.settings[SIZE_KEY] in line
                   and run.variant.split(",")[0] in line)
        assert f"{run.scale['params']:,}" in row and f"{run.scale['non_embedding_params']:,}" in row
        assert row.split()[-4:] == duration(each).split() + duration(2 * each).split()
    assert f"estimated wall time: {duration(total)} for 12 runs" in table
    assert f"with --workers 2, about {duration(total / 2)}" in table


def test_the_probe_times_real_steps(ladder_plan):
    from arch_zoo.sweeps.probe import step_seconds
    from arch_zoo.training.run import prepare

    plan, _ = ladder_plan
    cfg = plan.runs[0].config
    seconds = step_seconds(cfg, prepare(cfg), timed=2)
    assert 0 < seconds < 60


def test_the_dry_run_of_a_ladder_without_a_budget_says_every_rung_trains_max_steps(spec_dir, tmp_path, capsys,
                                                                                   monkeypatch):
    from arch_zoo.sweeps import probe

    monkeypatch.setattr(probe, "step_seconds", lambda cfg, data, timed=probe.TIMED_STEPS: 0.25)
    spec = {**LADDER, "seeds": [0], "scale": {"sizes": SIZES[:2], "fit": False}}
    assert main(["sweep", str(write_spec(spec_dir, spec)), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    assert "budget: every rung trains train.max_steps\n" in capsys.readouterr().out


def test_a_depth_rule_makes_depths_at_one_width(spec_dir):
    """Issue 42 item 4: a ladder by depth at a fixed width, as OLMo-core and Chinchilla also ladder."""
    spec = _parse({"rule": {"depths": [2, 4, 8], "d_model": 64, "head_dim": 16, "ffn_ratio": 2}})
    assert [s.keys for s in spec.scale.sizes] == [
        {"d_model": 64, "n_layers": d, "n_heads": 4, "d_ff": 128} for d in (2, 4, 8)]
    assert [s.label for s in spec.scale.sizes] == ["d64-L2-h4-ff128", "d64-L4-h4-ff128", "d64-L8-h4-ff128"]
    for rule, message in (({"depths": [2], "widths": [32], "d_model": 64, "head_dim": 16}, "not both or neither"),
                          ({"aspect_ratio": 16, "head_dim": 16}, "not both or neither"),
                          ({"depths": [2, 4, 8], "head_dim": 16}, "scale.rule.d_model: missing"),
                          ({"depths": [2, 0, 8], "d_model": 64, "head_dim": 16}, r"scale.rule.depths\[1\]: expected a"),
                          ({"depths": [2, 4, 8], "d_model": 64, "head_dim": 16, "aspect_ratio": 16},
                           "scale.rule.aspect_ratio: is for a width rule")):
        with pytest.raises(ConfigError, match=message):
            _parse({"rule": rule})
    ladder = {**LADDER, "seeds": [0], "scale": {"rule": {"depths": [1, 2, 3], "d_model": 16, "head_dim": 8},
                                                "budget": {"tokens_per_param": 0.5}}}
    plan = make_plan(load_spec(write_spec(spec_dir, ladder)))
    by_rung = {r.scale["rung"]: r for r in plan.runs if r.settings["model.position"] == "sinusoidal"}
    assert [by_rung[i].config.model.n_layers for i in range(3)] == [1, 2, 3]
    assert by_rung[0].scale["non_embedding_params"] < by_rung[1].scale["non_embedding_params"] \
        < by_rung[2].scale["non_embedding_params"]
