"""README, Sweeps: "`flops` sets each variant's `train.max_steps` so its training FLOPs (3 x forward
FLOPs/token x tokens, at the lengths it trains at, as summary.json counts them) equal the baseline's,
to the nearest step". Dry-run plans, and one tiny 2-run sweep for the report."""
import pytest
import torch
import yaml

from arch_zoo.cli import main
from arch_zoo.models import build_model
from arch_zoo.models.summary import flops_per_token
from arch_zoo.sweeps import load_spec, make_plan
from arch_zoo.training import prepare
from tests.models.flop_reference import measured_forward_flops

from .conftest import BASE, write_spec

GRID = {"model.ffn": ["gelu", "swiglu"], "model.n_layers": [1, 3]}
BIG = {**BASE, "model": {**BASE["model"], "d_model": 32, "d_ff": 128}, "train": {**BASE["train"], "max_steps": 400}}


def _plan(spec_dir, spec, base=BIG):
    return make_plan(load_spec(write_spec(spec_dir, spec, base)))


def _train_flops(run, vocab):
    """Counted afresh from the run's own config, not from the plan's numbers: windows of task.seq_len."""
    seq_len = run.config.task.options.seq_len
    fpt = flops_per_token(build_model(run.config.model, vocab), seq_len)["total"]
    t = run.config.train
    return 3 * fpt * t.batch_size * t.accumulate_grad_batches * seq_len * t.max_steps, fpt


def test_flops_budget_gives_every_variant_the_baselines_training_flops_within_one_step(spec_dir):
    plan = _plan(spec_dir, {"grid": GRID, "seeds": [0, 1], "budget": {"match": "flops"},
                            "baseline": {"model.ffn": "gelu", "model.n_layers": 1}})
    base = next(r for r in plan.runs if r.is_baseline)
    vocab = prepare(base.config).tokenizer.vocab_size
    target, _ = _train_flops(base, vocab)
    assert base.config.train.max_steps == 400 and base.matched == {}
    steps = set()
    for run in plan.runs:
        flops, fpt = _train_flops(run, vocab)
        one_step = flops / run.config.train.max_steps
        assert abs(flops - target) <= one_step / 2 + 1e-6 * target, (run.variant, flops, target)
        assert run.budget["flops"] == pytest.approx(flops) and run.budget["match"] == "flops"
        assert run.budget["tokens"] == run.config.train.max_steps * 8 * 32
        if not run.is_baseline:
            assert run.matched == {"train.max_steps": run.config.train.max_steps}
        steps.add(run.config.train.max_steps)
    deep = next(r for r in plan.runs if r.settings["model.n_layers"] == 3)
    assert deep.config.train.max_steps < 400 and len(steps) == 4  # bigger models train fewer steps


LONG = {**BASE, "model": {**BASE["model"], "max_seq_len": 512, "attention_kernel": "explicit"}}
PAIRS = {**BASE, "model": {**BASE["model"], "kind": "encoder_decoder", "max_seq_len": 64, "position": "alibi",
                           "attention_kernel": "explicit"},
         "task": {"name": "copy", "n_symbols": 6, "min_len": 5, "max_len": 5, "n_train": 64, "n_val": 8, "n_test": 8}}


@pytest.mark.parametrize("base", [LONG, PAIRS], ids=["decoder, 32-token windows of a 512-position model",
                                                     "encoder-decoder, 5-token sources"])
def test_budgets_count_tokens_and_flops_at_the_lengths_trained(base, spec_dir):
    """Not at model.max_seq_len: a budget's tokens are the examples' (source and target alike), its
    FLOPs 3 x what FlopCounterMode measures of a forward over them."""
    plan = _plan(spec_dir, {"grid": {"model.n_layers": [1, 2]}, "budget": {"match": "flops"}}, base)
    for run in plan.runs:
        data = prepare(run.config)
        model = build_model(run.config.model, data.tokenizer.vocab_size)
        example = data.splits["train"][0]  # every example is as long as this one
        inputs = {"input_ids": torch.tensor([example.input_ids])}
        if example.decoder_input_ids is not None:
            inputs["decoder_input_ids"] = torch.tensor([example.decoder_input_ids])
        per_example = measured_forward_flops(model, **inputs)
        examples = run.config.train.max_steps * run.config.train.batch_size
        assert run.budget["flops"] == pytest.approx(3 * per_example * examples, rel=1e-9)
        assert run.budget["tokens"] == examples * sum(t.shape[1] for t in inputs.values())
        assert run.budget["flops_counted_at"]["split"] == "train"


def test_tokens_budget_is_the_default_same_steps_for_every_variant(spec_dir):
    default = _plan(spec_dir, {"grid": GRID})
    tokens = _plan(spec_dir, {"grid": GRID, "budget": "tokens"})
    for a, b in zip(default.runs, tokens.runs):
        assert a.config == b.config and a.budget["tokens"] == b.budget["tokens"] == 400 * 8 * 32
    assert default.spec.budget == "tokens"
    assert len({r.budget["flops"] for r in default.runs}) == 4  # unmatched FLOPs, shown, not hidden


def test_params_budget_equals_match_params(spec_dir):
    grid = {"model.ffn": ["gelu", "swiglu", "reglu", "relu"]}
    old = _plan(spec_dir, {"grid": grid, "match_params": True, "baseline": {"model.ffn": "gelu"}})
    new = _plan(spec_dir, {"grid": grid, "budget": {"match": "params"}, "baseline": {"model.ffn": "gelu"}})
    assert [r.config for r in old.runs] == [r.config for r in new.runs]
    assert [(r.params, r.matched) for r in old.runs] == [(r.params, r.matched) for r in new.runs]
    assert any(r.matched for r in new.runs) and old.spec.budget == new.spec.budget == "params"
    loose = _plan(spec_dir, {"grid": grid, "budget": {"match": "params", "tolerance": 0.2}})
    assert loose.spec.match_params == 0.2


BAD = {
    "unknown match": ({"grid": GRID, "budget": {"match": "flop"}},
                      "budget.match: expected one of tokens, bytes, params, flops, steps, got 'flop' (did you mean 'flops'?)"),
    "flops with a max_steps axis": ({"grid": {"train.max_steps": [5, 10]}, "budget": {"match": "flops"}},
                                    "budget: match: flops sets each variant's train.max_steps"),
    "contradicts match_params": ({"grid": GRID, "budget": "flops", "match_params": True},
                                 "budget: match: flops contradicts match_params"),
    "unknown budget key": ({"grid": GRID, "budget": {"match": "flops", "steps": 3}}, "budget.steps: unknown"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_budget_is_one_line_and_exit_2(case, spec_dir, tmp_path, capsys):
    spec, expected = BAD[case]
    out = tmp_path / "out"
    assert main(["sweep", str(write_spec(spec_dir, spec)), "--out", str(out), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
    assert not out.exists()


def test_dry_run_shows_the_budget_and_each_runs_steps_tokens_and_flops(spec_dir, tmp_path, capsys):
    path = write_spec(spec_dir, {"grid": GRID, "budget": {"match": "flops"}}, BIG)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "budget: match flops (train.max_steps adjusted per variant" in text
    for col in ("steps", "tokens", "train FLOPs", "vs baseline"):
        assert col in text.splitlines()[0]
    assert "train.max_steps=" in text


def test_report_states_the_budget_and_each_variants_tokens_params_and_flops(spec_dir, tmp_path):
    """README, Sweeps: "the report states the budget and each variant's actual tokens, parameters
    and training FLOPs". One tiny 2-run sweep, trained."""
    import pandas as pd

    from arch_zoo.reports import write_report

    spec = {"name": "budget", "grid": {"model.n_layers": [1, 2]}, "budget": {"match": "flops"}}
    path = write_spec(spec_dir, spec, {**BASE, "train": {**BASE["train"], "max_steps": 6, "val_every": 6}})
    assert main(["sweep", str(path), "--out", str(tmp_path / "runs"), "--workers", "1"]) == 0
    plan = make_plan(load_spec(path))
    report = tmp_path / "report"
    write_report(tmp_path / "runs" / "budget", report, formats=["csv", "md"])
    variants = pd.read_csv(report / "variants.csv").set_index("model.n_layers")
    for run in plan.runs:
        row = variants.loc[run.settings["model.n_layers"]]
        assert row["train_tokens"] == run.budget["tokens"] == run.config.train.max_steps * 8 * 32
        assert row["train_flops"] == pytest.approx(run.budget["flops"]) and row["params"] == run.params
    assert variants.loc[2, "train_tokens"] < variants.loc[1, "train_tokens"]  # the deeper model trains less
    assert "budget: matched flops (the sweep's budget.match)" in (report / "report.md").read_text()
    for run in plan.runs:  # "each run's config holds its adjusted value": the saved config rebuilds the run
        saved = yaml.safe_load((tmp_path / "runs" / "budget" / "runs" / run.run_id / "config.yaml").read_text())
        assert saved["train"]["max_steps"] == run.config.train.max_steps


def test_wandb_format_reads_the_budget_and_flops_cannot_be_exported(spec_dir, tmp_path, capsys):
    wandb = {"method": "grid", "parameters": {"model.n_layers": {"values": [1, 2]}}, "budget": {"match": "flops"}}
    plan = _plan(spec_dir, wandb)
    assert plan.spec.budget == "flops" and plan.runs[1].matched["train.max_steps"] < 400
    path = write_spec(spec_dir, {"grid": GRID, "budget": "flops"})
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--export-wandb"]) == 2
    assert "budget: wandb cannot adjust train.max_steps per variant" in capsys.readouterr().err
