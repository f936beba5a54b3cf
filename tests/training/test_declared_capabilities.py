"""A task, head and tokenizer registered outside arch_zoo (here, in the test) work with no edit
anywhere else: tasks ask a tokenizer what it can do (``lossless``, ``count_tokens``, ``joiner``),
training asks a head what it ``produces``, ``arch-zoo generate`` asks the task how its prompts are
laid out (``encode_prompt``), and a run dir restores any registered tokenizer (``from_state``).
Nothing in the package keys behaviour on these components' names (issue 13, section 5)."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest
from torch import nn

from arch_zoo.components.heads import HEADS, VOCAB_LOGITS
from arch_zoo.experiment import load
from arch_zoo.data.tasks import TASKS, Example, Task, TaskData
from arch_zoo.data.tasks.common import fit_tokenizer, validate_tokenizer
from arch_zoo.data.tokenizers import BOS, EOS, SPECIALS, TOKENIZERS, Tokenizer
from arch_zoo.errors import ConfigError
from arch_zoo.registry import NoOptions
from arch_zoo.training import run_one
from arch_zoo.training.restore import prompt_ids, restore


class AsciiTokenizer(Tokenizer):
    """One token per ASCII character, a fixed table (nothing learned)."""

    name = "ascii"
    lossless = True

    def __init__(self, options=None):
        pass

    @property
    def vocab_size(self):
        return len(SPECIALS) + 128

    def encode(self, text):
        return [ord(c) + len(SPECIALS) if ord(c) < 128 else self.unk_id for c in text]

    def decode(self, ids, skip_special=True):
        return "".join(chr(i - len(SPECIALS)) for i in ids if i >= len(SPECIALS))

    @classmethod
    def count_tokens(cls, text):
        return len(text)

    @classmethod
    def from_state(cls, state):
        return cls()


class NormedLMHead(nn.Module):
    """LayerNorm, then vocabulary logits: not named lm, but it gives what an LM objective needs."""

    kinds = ("decoder",)
    produces = VOCAB_LOGITS

    def __init__(self, options, ctx):
        super().__init__()
        self.norm, self.proj = nn.LayerNorm(ctx.d_model), nn.Linear(ctx.d_model, ctx.vocab_size)

    def forward(self, hidden, attention_mask=None):
        return self.proj(self.norm(hidden))


@dataclass(frozen=True)
class ChantOptions:
    n: int = 96
    tokenizer: Any = "ascii"

    def __post_init__(self):
        validate_tokenizer(self.tokenizer)


class ChantTask(Task):
    """Language modelling of bos + a short 'ab' chant + eos; its prompts start with bos (unlike
    char_lm's plain text and the pair tasks' bos + prompt + sep)."""

    kinds = ("decoder",)

    def build(self):
        rng = random.Random(self.seed)
        texts = ["".join(rng.choice("ab") for _ in range(rng.randint(3, 8))) for _ in range(self.options.n)]
        tok = fit_tokenizer(self.options.tokenizer, texts)
        rows = [[BOS] + tok.encode(t) + [EOS] for t in texts]
        third = len(rows) // 3
        splits = {"train": rows[:third], "val": rows[third:2 * third], "test": rows[2 * third:]}
        return TaskData(tok, "lm", {k: [Example(r, r) for r in v] for k, v in splits.items()})

    @classmethod
    def encode_prompt(cls, tokenizer, text, model_kind):
        return [tokenizer.bos_id] + tokenizer.encode(text)


@pytest.fixture
def plugins():
    added = [(TOKENIZERS, "ascii", AsciiTokenizer, NoOptions), (HEADS, "normed_lm", NormedLMHead, NoOptions),
             (TASKS, "chant", ChantTask, ChantOptions)]
    for registry, name, cls, options in added:
        registry.register(name, options, cls.__doc__.split("\n")[0])(cls)
    yield
    for registry, name, _, _ in added:
        registry.unregister(name)  # leave the registries as other tests expect them


def test_a_registered_task_head_and_tokenizer_train_restore_and_prompt(plugins, tmp_path):
    cfg = load({"name": "plugins", "seed": 0,
                "model": {"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "max_seq_len": 16,
                          "head": "normed_lm"},
                "task": {"name": "chant"},
                "train": {"max_steps": 4, "batch_size": 8, "val_every": 4, "val_batches": 1, "progress_bar": False}})
    result = run_one(cfg, tmp_path / "run", quiet=True)
    assert result.status == "completed", result.reason
    assert result.summary["goals"]["val/loss"] == "min" and result.summary["goals"]["val/token_accuracy"] == "max"
    saved, model, tok = restore(tmp_path / "run")
    assert isinstance(tok, AsciiTokenizer) and isinstance(model.head, NormedLMHead)
    assert prompt_ids(saved, tok, "ab") == [BOS, ord("a") + len(SPECIALS), ord("b") + len(SPECIALS)]


def test_built_in_tasks_ask_a_registered_tokenizer_what_it_can_do(plugins):
    """The corpus tasks need a lossless tokenizer, the bracket tasks one token per bracket, the
    pair tasks count tokens to check lengths before building: the new tokenizer declares all three."""
    for task in ({"name": "dyck", "max_len": 16}, {"name": "char_lm"}, {"name": "copy", "max_len": 5}):
        cfg = load({"model": {"kind": "encoder" if task["name"] == "dyck" else "decoder",
                              "head": {"name": "sequence_classification"} if task["name"] == "dyck" else "lm"},
                    "task": {**task, "tokenizer": "ascii"}})
        assert cfg.task.options.tokenizer == "ascii"
    with pytest.raises(ConfigError) as err:  # the copy task's longest example, counted before building
        load({"model": {"kind": "decoder", "max_seq_len": 8},
              "task": {"name": "copy", "max_len": 5, "tokenizer": "ascii"}})
    assert err.value.key == "task.max_len"
    with pytest.raises(ConfigError, match="choices: ascii, byte, char$"):  # word joins many brackets in one token
        load({"model": {"kind": "encoder", "head": "sequence_classification"},
              "task": {"name": "dyck", "tokenizer": "word"}})


def test_the_bert_mlm_head_is_accepted_for_the_mlm_objective():
    """Training asks for vocabulary logits, not for a head named 'lm': BERT's own MLM head fits."""
    from arch_zoo.training.run import prepare

    model = {"kind": "encoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": 32}
    task = {"name": "mlm", "max_chars": 5000, "seq_len": 32}
    assert prepare(load({"model": {**model, "head": "mlm"}, "task": task})).objective == "mlm"
    with pytest.raises(ConfigError, match="needs vocabulary logits per position; head 'embedding' gives a pooled "
                                          "vector per sequence; heads that fit: lm, mlm"):
        prepare(load({"model": {**model, "head": "embedding"}, "task": task}))
