"""Exact-match evaluation's decoding: grouped by length, eager or compiled (train.exact_match_decoding)."""
from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

import pytest

from arch_zoo.config.schema import TrainConfig
from arch_zoo.errors import ConfigError
from arch_zoo.generation import compiled, generate
from arch_zoo.training import objectives
from arch_zoo.training.eval_decoding import AUTO_MIN_STEPS, EvalDecoding, check_compiled_decoding, decode_steps
from tests.test_generation import model_for

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17], [18, 19, 20], [21], [22, 23, 24, 25, 26]]
TARGETS = [[1] * 5, [1] * 2, [1] * 7, [1] * 3, [1] * 4, [1] * 6]
EOS, PAD = 3, 0
LM = objectives.objective("lm")


def _one_at_a_time(model):
    out = []
    for prompt, target in zip(PROMPTS, TARGETS):
        hyp = generate(model, [prompt], max_new_tokens=len(target) + 1, eos_token_id=EOS, pad_token_id=PAD).to_lists()[0][0]
        ended = hyp[-1:] == [EOS]
        out.append((hyp[:-1] if ended else hyp, ended))
    return out


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "static-cache"])
def test_grouped_decoding_returns_each_prompts_own_decoding_in_order(compile, monkeypatch):
    """Grouping by length (batches of 4: the last one filled up when compiled) changes no prompt's output
    and keeps the caller's order. The static cache runs uncompiled here (its grid test compiles)."""
    monkeypatch.setattr(compiled, "BACKEND", None)
    model = copy.deepcopy(model_for("decoder-rope-mha"))  # its own: other tests decode the shared one at other shapes
    got = objectives.greedy_outputs(model, PROMPTS, TARGETS, LM, bos=1, eos=EOS, pad=PAD, batch_size=4,
                                    compile=compile)
    assert got == _one_at_a_time(model)
    if compile:  # both batches ran at 4 rows: one shape
        assert {k[0] for k in compiled._STEPS[model] if k[4] is None} == {4}


def _examples(n, target_len):
    return [SimpleNamespace(target_ids=[1] * target_len) for _ in range(n)]


def test_auto_compiles_only_where_the_decode_steps_repay_it():
    t = TrainConfig(max_steps=1000, val_every=100, eval_batch_size=64)
    small = {"val": _examples(64, 9), "test": _examples(64, 9)}
    assert decode_steps(t, small) == 10 * 1 * 10 + 1 * 1 * 10  # 10 validations + the test, one batch, 10 steps
    big = {"val": _examples(640, 49), "test": _examples(640, 49)}
    assert decode_steps(t, big) == 11 * 10 * 50 >= AUTO_MIN_STEPS
    model = model_for("decoder-rope-mha")
    for examples, used in ((small, "eager"), (big, "compiled")):
        d = EvalDecoding(t, examples)
        assert d.run(model, lambda compile: compile) is (used == "compiled")
        assert d.used == used and d.why.startswith("auto: ~") and d.info(model)["asked"] == "auto"
    for asked in ("eager", "compiled"):
        d = EvalDecoding(dataclasses.replace(t, exact_match_decoding=asked), small)
        assert d.run(model, lambda compile: compile) is (asked == "compiled") and d.why == "asked"


def test_compiled_decoding_without_a_compiler_is_refused_before_training(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-cxx")
    t = TrainConfig(exact_match_decoding="compiled")
    with pytest.raises(ConfigError) as err:
        check_compiled_decoding(t, cuda=False)
    assert err.value.key == "train.exact_match_decoding" and "'no-such-cxx' is not on PATH" in err.value.message
    check_compiled_decoding(dataclasses.replace(t, exact_match_decoding="auto"), cuda=False)  # auto: eager, no error
    d = EvalDecoding(dataclasses.replace(t, exact_match_decoding="auto", max_steps=10 ** 6, val_every=1),
                     {"val": _examples(64, 9)})
    d.run(model_for("decoder-rope-mha"), lambda compile: compile)
    assert d.used == "eager" and "C++ compiler" in d.why


def test_the_decoding_path_is_not_part_of_a_runs_identity():
    """Eager and compiled decoding give the same tokens: two runs that differ only there are one run to a report."""
    from arch_zoo.reports.grouping import identity

    def row(path, asked):
        return {"_config": {"model.position": "rope", "train.exact_match_decoding": asked}, "seed": 0, "run_dir": path}

    assert identity(row("a", "eager")) == identity(row("b", "compiled"))
    assert identity(row("a", "eager")) != identity({**row("a", "eager"), "seed": 1})
