"""Budgets that hold when an axis changes what a step holds: `match: tokens` sets each variant's
steps so its training tokens equal the baseline's within one batch (batch size, length, gradient
accumulation), `match: bytes` does so in bytes of text from each variant's bytes per token, a varied
train.max_steps is a budget of steps and says so; the report says "matched" only when it is."""
import json

import pytest

from arch_zoo.cli import main
from arch_zoo.reports.load import _budget_note
from arch_zoo.sweeps import load_spec, make_plan
from arch_zoo.training import prepare

from .conftest import BASE, write_spec

LONG = {**BASE, "model": {**BASE["model"], "max_seq_len": 64}, "train": {**BASE["train"], "max_steps": 100}}


def _plan(spec_dir, spec, base=LONG):
    return make_plan(load_spec(write_spec(spec_dir, spec, base)))


def _tokens(run):
    """A run's training tokens from its own config: steps x batch x accumulation x window length."""
    t = run.config.train
    return t.max_steps * t.batch_size * t.accumulate_grad_batches * run.config.task.options.seq_len


def test_tokens_budget_trains_batch_size_by_length_variants_on_the_baselines_tokens(spec_dir, tmp_path, capsys):
    spec = {"grid": {"train.batch_size": [8, 32], "task.seq_len": [32, 64], "train.accumulate_grad_batches": [1, 3]},
            "baseline": {"train.batch_size": 8, "task.seq_len": 32, "train.accumulate_grad_batches": 1}}
    plan = _plan(spec_dir, spec)
    target = 100 * 8 * 32
    steps = set()
    for run in plan.runs:
        t = run.config.train
        one_batch = t.batch_size * t.accumulate_grad_batches * run.config.task.options.seq_len
        assert abs(_tokens(run) - target) <= one_batch / 2, (run.variant, _tokens(run))
        assert run.budget["tokens"] == _tokens(run)
        if not run.is_baseline:
            assert run.matched == {"train.max_steps": t.max_steps}
        steps.add(t.max_steps)
    assert len(steps) > 4  # the budget moved steps; before, all eight kept 100 (102k to 2.5M tokens)
    warm = {**LONG, "train": {**LONG["train"], "warmup_steps": 30}}
    assert main(["sweep", str(write_spec(spec_dir, spec, warm)), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "budget: match tokens (train.max_steps set per variant so its training tokens equal the baseline's" in out
    assert "train.max_steps=12" in out  # 32 x 64 x 1: 25,600 / 2,048 tokens a step
    short = {r.variant for r in plan.runs if r.config.train.max_steps <= 30}
    assert out.count("but train.warmup_steps is 30: it never reaches train.lr") == len(short) > 0


def test_a_varied_max_steps_is_a_budget_of_steps_and_says_so(spec_dir, tmp_path, capsys):
    spec = {"grid": {"train.max_steps": [50, 100], "train.batch_size": [8, 16]}}
    plan = _plan(spec_dir, spec)
    assert plan.spec.budget == "steps" and {r.config.train.max_steps for r in plan.runs} == {50, 100}
    assert main(["sweep", str(write_spec(spec_dir, spec, LONG)), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "budget: steps, not tokens (train.max_steps is varied on purpose): the variants train on" in out
    with pytest.raises(Exception, match="match: tokens sets each variant's train.max_steps"):
        _plan(spec_dir, {**spec, "budget": "tokens"})


def test_an_explicit_budget_of_steps_says_so_not_that_steps_were_varied(spec_dir, tmp_path, capsys):
    spec = {"grid": {"train.batch_size": [8, 16]}, "budget": {"match": "steps"}}
    assert main(["sweep", str(write_spec(spec_dir, spec, LONG)), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "budget: steps, not tokens (budget.match: steps): the variants train on" in out
    assert "varied on purpose" not in out
    spec = {"grid": {"train.max_steps": [10, 20]}, "budget": {"match": "steps"}}
    assert main(["sweep", str(write_spec(spec_dir, spec, LONG)), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "budget: steps, not tokens (train.max_steps is varied on purpose)" in out


def _train_bytes_per_token(config):
    """UTF-8 bytes per token of a run's train split, from the text its tokens decode to."""
    data = prepare(config)
    ids = data.splits["train"].ids
    text = data.tokenizer.decode(ids.read(0, len(ids)).tolist())
    return len(text.encode("utf-8")) / len(ids)


def test_bytes_budget_gives_every_variant_the_baselines_bytes_within_one_batch(spec_dir, tmp_path, capsys):
    spec = {"grid": {"task.tokenizer": ["char", {"name": "bpe", "vocab_size": 300}], "train.batch_size": [8, 16]},
            "budget": {"match": "bytes"}, "baseline": {"task.tokenizer": "char", "train.batch_size": 8}}
    plan = _plan(spec_dir, spec)
    base = next(r for r in plan.runs if r.is_baseline)
    per_token = {r.run_id: _train_bytes_per_token(r.config) for r in plan.runs}
    target = _tokens(base) * per_token[base.run_id]
    for run in plan.runs:
        one_batch = run.config.train.batch_size * 32 * per_token[run.run_id]
        read = _tokens(run) * per_token[run.run_id]
        assert abs(read - target) <= one_batch / 2 + 1e-6 * target, (run.variant, read, target)
        assert run.budget["bytes"] == pytest.approx(read, rel=1e-9)
    bpe = [r for r in plan.runs if "bpe" in r.variant]
    assert all(per_token[r.run_id] > 1.2 for r in bpe)  # BPE tokens cover more text: fewer tokens, fewer steps
    assert all(r.config.train.max_steps < 100 * 8 / r.config.train.batch_size for r in bpe)
    assert main(["sweep", str(write_spec(spec_dir, spec, LONG)), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "text bytes" in out.splitlines()[0] and "budget: match bytes" in out
    assert "warning: the report will rank by val/bpb, not val/loss" in out


def _rows(spent, match, per_step, text=None, steps=4):
    return [{"variant": v, "status": "completed", "_budget": match, "train_tokens": t, "train_flops": 3.0 * t,
             "step": steps, "_tokens_per_step": per_step[v], "_flops_per_step": 3.0 * per_step[v],
             **({"_train_bytes": text[v], "_bytes_per_step": text[v] / steps} if text else {})}
            for v, t in spent.items()]


def test_the_budget_line_says_matched_only_when_the_tokens_agree():
    per_step = {"a": 256, "b": 512}
    assert _budget_note(_rows({"a": 1024, "b": 1024}, "tokens", per_step), True)[0].startswith(
        "budget: matched tokens (the sweep's budget.match)")
    assert _budget_note(_rows({"a": 1024, "b": 1280}, "tokens", per_step), True)[0].startswith(
        "budget: matched tokens")  # whole steps: within one batch is matched
    line = _budget_note(_rows({"a": 1024, "b": 2048}, "tokens", per_step), True)[0]
    assert line == ("budget: tokens not matched (the sweep's budget.match is tokens, but the variants spent different "
                    "amounts); each variant's training tokens: a 1.02k, b 2.05k.")
    steps = _budget_note(_rows({"a": 1024, "b": 2048}, "steps", per_step), True)[0]
    assert "train.max_steps was varied on purpose, so the budget is steps" in steps


def test_a_params_budget_says_matched_params_with_their_range_and_tokens_only_when_the_tokens_agree():
    per_step = {"a": 256, "b": 256}
    rows = _rows({"a": 1024, "b": 1024}, "params", per_step)
    rows[0]["params"], rows[1]["params"] = 206_592, 206_848
    line = _budget_note(rows, True)[0]
    assert line.startswith("budget: matched params (model.d_ff set per variant: 206,592 to 206,848 parameters, "
                           f"{206_848 / 206_592 - 1:.2%} apart) and tokens (the sweep's budget.match)"), line
    assert "0.12% apart" in line
    rows[1]["train_tokens"] = 2048
    line = _budget_note(rows, True)[0]
    assert line.startswith("budget: tokens not matched (the sweep's budget.match is params, but the variants spent")


def test_matched_tokens_over_different_text_and_flops_budgets_say_how_much_text_each_read():
    per_step = {"a": 256, "b": 256}
    lines = _budget_note(_rows({"a": 1024, "b": 1024}, "tokens", per_step, text={"a": 1024, "b": 2600}), True)
    assert lines[0].startswith("budget: matched tokens")
    assert lines[1].startswith("text read: a 1.02k bytes, b 2.60k bytes (the variants' tokens cover different text")
    flops = _budget_note(_rows({"a": 1024, "b": 1024}, "flops", per_step, text={"a": 1024, "b": 1100}), True)
    assert flops[1] == "text read: a 1.02k bytes, b 1.10k bytes (budget.match: bytes matches text)"
    same = _budget_note(_rows({"a": 1024, "b": 1024}, "bytes", per_step, text={"a": 2000, "b": 2000}), True)
    assert len(same) == 1 and same[0].startswith("budget: matched bytes")


def test_a_trained_tokens_sweep_is_reported_matched_and_an_old_unmatched_store_is_not(spec_dir, tmp_path, capsys):
    base = {**BASE, "train": {**BASE["train"], "max_steps": 4, "val_every": 4, "batch_size": 4}}
    spec = {"name": "bs", "grid": {"train.batch_size": [4, 8]}, "baseline": {"train.batch_size": 4}}
    out = tmp_path / "runs"
    assert main(["sweep", str(write_spec(spec_dir, spec, base)), "--out", str(out), "--workers", "1"]) == 0
    assert "budget: matched tokens (the sweep's budget.match)" in capsys.readouterr().out
    for meta in (out / "bs" / "runs").glob("batch_size-8*/run.json"):  # as a store planned before: same steps
        record = json.loads(meta.read_text())
        record["budget"].update(steps=2, tokens=2 * 8 * 32)
        assert record["budget"]["tokens"] == 4 * 4 * 32  # matched: half the steps at twice the batch
        record["budget"].update(steps=4, tokens=4 * 8 * 32)
        meta.write_text(json.dumps(record))
        summary = json.loads((meta.parent / "summary.json").read_text())
        (meta.parent / "summary.json").write_text(json.dumps({**summary, "step": 4}))
    assert main(["compare", str(out / "bs")]) == 0
    text = capsys.readouterr().out
    assert "budget: tokens not matched" in text and "batch_size=4 512, batch_size=8 1.02k" in text
    assert "budget: matched" not in text


def test_wandb_cannot_follow_a_tokens_budget_over_batch_size(spec_dir, tmp_path, capsys):
    path = write_spec(spec_dir, {"grid": {"train.batch_size": [8, 16]}}, LONG)
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--export-wandb"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "budget: train.batch_size changes the tokens a step holds" in err
    steps = write_spec(spec_dir, {"grid": {"train.batch_size": [8, 16]}, "budget": "steps"}, LONG)
    assert main(["sweep", str(steps), "--out", str(tmp_path / "o"), "--export-wandb"]) == 0


def test_a_ladder_is_matched_within_each_rung_and_names_a_rung_that_is_not():
    per_step = {"a": 256, "b": 256}
    rows = []
    for rung, (size, tokens) in enumerate([("d32", 1024), ("d64", 4096)]):
        for r in _rows({"a": tokens, "b": tokens}, "tokens", per_step):
            r["variant"] += f",size={size}"
            r["_scale"] = {"rung": rung, "size": size}
            rows.append(r)
    line = _budget_note(rows, True)
    assert line == ["budget: within each rung, matched tokens (the sweep's budget.match); the rungs trained on 1.02k "
                    "to 4.10k tokens (the ladder's scale.budget); each variant's actual train_tokens, params and "
                    "train_flops (3 x forward FLOPs/token x tokens) are in variants.csv."], line
    rows[-1]["train_tokens"] = 8192  # one variant of the largest rung spent twice its partner's tokens
    lines = _budget_note(rows, True)
    assert len(lines) == 1 and lines[0].startswith("rung d64: budget: tokens not matched"), lines
    assert "a,size=d64 4.10k, b,size=d64 8.19k" in lines[0]
