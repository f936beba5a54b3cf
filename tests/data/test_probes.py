"""The MAD probes and Zoology's mqar (data/tasks/recall.py, sequence_probes.py): the scored positions
are exactly the answers, found here from the decoded symbols by each task's definition (not from the
generator's labels); the lm objective's loss and accuracy read those positions alone."""
import math
import re

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.data.tasks import TASKS
from arch_zoo.data.tasks.base import IGNORE, collate
from arch_zoo.errors import ConfigError
from arch_zoo.models import build_model
from arch_zoo.training.objectives import objective

PROBES = ["in_context_recall", "noisy_in_context_recall", "fuzzy_in_context_recall", "selective_copying",
          "compression", "memorization", "mqar"]
SMALL = {"n_train": 40, "n_val": 8, "n_test": 8}


def build(name, seed=0, max_seq_len=512, **options):
    spec = TASKS.parse({"name": name, **SMALL, **options}, "task")
    return TASKS.get(name).factory(spec.options, seed, "decoder", max_seq_len).build()


def rows(data, split="train"):
    """(symbols, {position: answer symbol}) of each example, decoded by the tokenizer."""
    tok = data.tokenizer
    out = []
    for e in data.splits[split]:
        symbols = [tok.symbols[i] for i in e.input_ids]
        out.append((symbols, {i: tok.symbols[l] for i, l in enumerate(e.labels) if l != IGNORE}))
    return out


def kind(symbol):
    return re.sub(r"\d+$", "", symbol)


def runs(symbols):
    """Maximal runs of one kind of symbol: [(kind, start, tuple)]."""
    out = []
    for i, s in enumerate(symbols):
        if out and out[-1][0] == kind(s) and kind(s) in "kvn":
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + (s,))
        else:
            out.append((kind(s), i, (s,)))
    return out


def recall_answers(symbols, multi_query):
    """A value run is an answer when its key run appeared before; without multi_query only the last."""
    answered, seen, parts = [], set(), runs(symbols)
    for (k_kind, _, key), (v_kind, start, value) in zip(parts, parts[1:]):
        if k_kind == "k" and v_kind == "v":
            if key in seen:
                answered.append((start, value))
            seen.add(key)
    answered = answered if multi_query else answered[-1:]
    return {start + j: s for start, value in answered for j, s in enumerate(value)}


@pytest.mark.parametrize("name,options", [
    ("in_context_recall", {"seq_len": 32}), ("in_context_recall", {"seq_len": 32, "multi_query": False}),
    ("noisy_in_context_recall", {"seq_len": 32}), ("fuzzy_in_context_recall", {"seq_len": 48}),
    ("fuzzy_in_context_recall", {"seq_len": 48, "multi_query": False, "vocab_size": 24, "noise_vocab_size": 4,
                                 "frac_noise": 0.3})])
def test_recall_scores_exactly_the_values_of_keys_seen_before(name, options):
    data = build(name, **options)
    multi = options.get("multi_query", True)
    for split in ("train", "test"):
        for symbols, scored in rows(data, split):
            assert scored == recall_answers(symbols, multi)
            assert scored and all(symbols[i] == s for i, s in scored.items())
    if not multi:
        assert all([r[0] for r in runs(symbols)][-3:] == ["copy", "k", "v"] for symbols, _ in rows(data))
    if options.get("frac_noise", 0) or name == "noisy_in_context_recall":
        assert any(kind(s) == "n" for symbols, _ in rows(data) for s in symbols)


def test_fuzzy_recall_val_and_test_keys_are_full_length():
    data = build("fuzzy_in_context_recall", seq_len=48)
    lengths = {split: {len(r[2]) for symbols, _ in rows(data, split) for r in runs(symbols) if r[0] == "k"}
               for split in ("train", "test")}
    assert lengths == {"train": {1, 2, 3}, "test": {3}}


@pytest.mark.parametrize("random_fill", [False, True])
def test_mqar_scores_the_token_after_each_query_with_its_value(random_fill):
    n = 4
    data = build("mqar", seq_len=32, num_kv_pairs=n, vocab_size=256, random_non_queries=random_fill)
    for symbols, scored in rows(data):
        value_of = dict(zip(symbols[0:2 * n:2], symbols[1:2 * n:2]))
        assert len(value_of) == n and len(set(value_of.values())) == n
        assert all(kind(k) == "k" and kind(v) == "v" for k, v in value_of.items())
        queries = [i for i in range(2 * n, 32) if (i - 2 * n) % 2 == 0 and symbols[i] in value_of]
        if not random_fill:  # the region is filler but for the queries: every key once
            assert sorted(symbols[i] for i in queries) == sorted(value_of)
            assert scored == {i + 1: value_of[symbols[i]] for i in queries}
        else:  # filler may repeat a key; the scored ones are n queries, one per key
            assert len(scored) == n and {symbols[i - 1] for i in scored} == set(value_of)
            assert all(value_of[symbols[i - 1]] == v for i, v in scored.items())


def test_selective_copying_writes_the_data_tokens_in_order_at_the_blanks_after_copy():
    n = 6
    data = build("selective_copying", seq_len=40, num_tokens_to_copy=n)
    for symbols, scored in rows(data):
        copy = symbols.index("copy")
        assert copy == 40 - n - 1 and len(symbols) == 41
        data_tokens = [s for s in symbols[:copy] if s != "blank"]
        assert len(data_tokens) == n and symbols[copy - 1] != "blank"  # no blank after the last data token
        assert scored == {copy + 2 + j: s for j, s in enumerate(data_tokens)}
        assert all(s == "blank" for s in symbols[copy + 1:])


def test_compression_reproduces_the_sequence_after_the_compression_token():
    data = build("compression", seq_len=12)
    for symbols, scored in rows(data):
        c = symbols.index("compress")
        assert c == 11 and symbols[c + 1:] == symbols[:c]
        assert scored == {c + 1 + j: s for j, s in enumerate(symbols[:c])}


def test_memorization_answers_at_each_insert_follow_one_fixed_map_for_every_seed():
    answers = {}
    for seed in (0, 1):
        data = build("memorization", seed=seed, vocab_size=33, seq_len=16, n_val=40)
        for split in ("train", "val"):
            for symbols, scored in rows(data, split):
                inserts = [i for i, s in enumerate(symbols[:16]) if s == "insert"]
                assert inserts == list(range(1, 16, 2)) and sorted(scored) == [i + 1 for i in inserts]
                for i in inserts:
                    assert answers.setdefault(symbols[i - 1], scored[i + 1]) == scored[i + 1]
    assert len(set(answers.values())) == len(answers)  # a map from distinct keys to distinct values
    other = build("memorization", vocab_size=33, seq_len=16, kv_map_seed=7)
    assert any(answers.get(symbols[i - 1]) != scored[i + 1] for symbols, scored in rows(other)
               for i in range(1, 16, 2))


@pytest.mark.parametrize("name", PROBES)
def test_probes_are_seeded_distinct_and_fit_their_declared_length(name):
    extra = {"num_tokens_to_copy": 4} if name == "selective_copying" else {}
    a, b, c = (build(name, seed=seed, seq_len=32, **extra) for seed in (0, 0, 1))
    for split in ("train", "val", "test"):
        assert [e.input_ids for e in a.splits[split]] == [e.input_ids for e in b.splits[split]]
    assert [e.input_ids for e in a.splits["train"]] != [e.input_ids for e in c.splits["train"]]
    seqs = [tuple(e.input_ids) for split in ("train", "val", "test") for e in a.splits[split]]
    assert len(set(seqs)) == len(seqs) == 56
    options = TASKS.parse({"name": name, "seq_len": 32, **extra}, "task").options
    length = TASKS.get(name).factory.length(options)
    assert {len(e.input_ids) for e in a.splits["train"]} == {length} and a.objective == "lm"
    assert a.tokenizer.vocab_size == 6 + options.vocab_size
    with pytest.raises(ConfigError, match=rf"task.seq_len: the examples \(seq_len 32\) need {length} tokens"):
        TASKS.get(name).factory.check(options, "decoder", 16)


def test_vocabulary_is_the_papers_count_plus_the_reserved_ids():
    for name, size in [("in_context_recall", 16), ("noisy_in_context_recall", 32), ("fuzzy_in_context_recall", 16),
                       ("selective_copying", 16), ("compression", 16), ("memorization", 256), ("mqar", 8192)]:
        options = TASKS.parse({"name": name}, "task").options
        assert options.vocab_size == size
        assert len(TASKS.get(name).factory.symbols(options)) == size


def test_lm_loss_and_accuracy_read_the_answer_positions_alone():
    data = build("in_context_recall", seq_len=16)
    batch = collate(list(data.splits["val"]), data.tokenizer.pad_id)
    torch.manual_seed(0)
    model = build_model({"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32,
                         "max_seq_len": 32}, data.tokenizer.vocab_size).eval()
    obj = objective("lm")
    with torch.no_grad():
        logits, labels = obj.forward(model, batch)
    sums = obj.metric_sums(logits, labels)
    scored = labels != IGNORE
    assert sums["count"] == int(scored.sum()) == sum(sum(l != IGNORE for l in e.labels) for e in data.splits["val"])
    log_p = torch.log_softmax(logits.double(), -1)  # by hand: mean -log p(answer) over the answers
    by_hand = -log_p[scored].gather(-1, labels[scored][:, None]).mean().item()
    assert obj.finish(sums)["loss"] == pytest.approx(by_hand, rel=1e-5)
    noise = logits.clone()
    noise[~scored] = torch.randn_like(noise[~scored]) * 100  # scramble every unscored position
    assert obj.metric_sums(noise, labels) == pytest.approx(sums)
    hit = logits.clone()
    hit[scored] = torch.nn.functional.one_hot(labels[scored], logits.shape[-1]).float() * 100
    assert obj.finish(obj.metric_sums(hit, labels))["token_accuracy"] == 1.0
    assert obj.finish(sums)["token_accuracy"] < 1.0 and math.isfinite(sums["loss"])


def test_components_lists_every_probe_with_its_knobs(capsys):
    assert main(["components"]) == 0
    out = capsys.readouterr().out
    for name, knobs in [("in_context_recall", "multi_query=True"), ("noisy_in_context_recall", "frac_noise=0.2"),
                        ("fuzzy_in_context_recall", "k_motif_size=3"), ("selective_copying", "num_tokens_to_copy=16"),
                        ("compression", "seq_len=32"), ("memorization", "kv_map_seed=12345"),
                        ("mqar", "num_kv_pairs=4")]:
        line = next(l for l in out.splitlines() if l.strip().startswith(name + " "))
        assert knobs in line, line
