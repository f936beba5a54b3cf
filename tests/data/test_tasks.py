import dataclasses
import hashlib
import json
import math
import random
import sysconfig
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest
import torch
import yaml

from arch_zoo.data.tasks import TASKS
from arch_zoo.data.tasks.base import IGNORE, collate
from arch_zoo.data.tasks.corpus import _sorted_py_files
from arch_zoo.data.tasks.scan import all_commands, interpret
from arch_zoo.data.tokenizers import BOS, EOS, MASK, PAD, SEP, SPECIALS
from arch_zoo.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"n_train": 300, "n_val": 40, "n_test": 40}
CORPUS = {"max_chars": 20_000, "seq_len": 64}
# (task, model kind, options small enough for a fast test)
CASES = [
    ("copy", "decoder", SMALL), ("copy", "encoder_decoder", SMALL), ("reverse", "decoder", SMALL),
    ("sort", "encoder_decoder", SMALL), ("scan", "encoder_decoder", {}), ("scan", "decoder", {"split": "length"}),
    ("dyck", "encoder", SMALL), ("dyck_depth", "encoder", SMALL),
    ("char_lm", "decoder", {**CORPUS, "eval_lengths": [32, 128]}), ("mlm", "encoder", CORPUS),
]
IDS = [f"{t}-{k}" for t, k, _ in CASES]


def freeze(options):
    return json.dumps(options, sort_keys=True)


@lru_cache(maxsize=None)
def _build(name, kind, seed, max_seq_len, frozen):
    spec = TASKS.parse({"name": name, **json.loads(frozen)}, "task")
    TASKS.get(name).factory.check(spec.options, kind, max_seq_len)
    return TASKS.build(spec, seed, kind, max_seq_len).build()


def build(name, kind, seed=0, max_seq_len=128, **options):
    return _build(name, kind, seed, max_seq_len, freeze(options))


def check(name, kind, max_seq_len, **options):
    spec = TASKS.parse({"name": name, **options}, "task")
    TASKS.get(name).factory.check(spec.options, kind, max_seq_len)


# ----------------------------------------------------------------------------------- all tasks

def test_every_task_is_registered_with_its_kinds():
    kinds = {name: TASKS.get(name).factory.kinds for name in TASKS.choices()}
    assert kinds == {
        "copy": ("decoder", "encoder_decoder"), "reverse": ("decoder", "encoder_decoder"),
        "sort": ("decoder", "encoder_decoder"), "scan": ("decoder", "encoder_decoder"),
        "char_lm": ("decoder",), "mlm": ("encoder",), "dyck": ("encoder",), "dyck_depth": ("encoder",),
        **{probe: ("decoder",) for probe in ("in_context_recall", "noisy_in_context_recall", "fuzzy_in_context_recall",
                                             "selective_copying", "compression", "memorization", "mqar")}}


@pytest.mark.parametrize("name,kind,options", CASES[:5] + CASES[6:], ids=IDS[:5] + IDS[6:])  # one scan: slow
def test_same_seed_same_data_other_seed_other_data(name, kind, options):
    a, b, c = build(name, kind, 0, **options), _build.__wrapped__(name, kind, 0, 128, freeze(options)), \
        build(name, kind, 1, **options)
    assert a.splits == b.splits and a.info == b.info
    assert a.splits["train"] != c.splits["train"]
    if name in ("char_lm", "mlm"):  # the evaluation data do not depend on the seed
        assert all(a.splits[k] == c.splits[k] for k in a.splits if k != "train")


@pytest.mark.parametrize("name,kind,options", CASES, ids=IDS)
def test_sequences_fit_the_model_and_collate(name, kind, options):
    data = build(name, kind, **options)
    assert {"train", "val", "test"} <= set(data.splits) and all(data.splits.values())
    for split, rows in data.splits.items():
        limit = 128 if "@" not in split else int(split.split("@")[1])
        assert max(max(len(e.input_ids), len(e.decoder_input_ids or ())) for e in rows) <= limit
        assert all(0 <= t < data.tokenizer.vocab_size for e in rows for t in e.input_ids)
    batch = collate(data.splits["val"][:5], PAD)
    assert batch["input_ids"].shape == batch["attention_mask"].shape
    assert batch["labels"].shape[0] == 5


def test_yaml_configs_list_every_option_and_parse():
    for name in TASKS.choices():
        path = ROOT / "configs" / "tasks" / f"{name}.yaml"
        task = yaml.safe_load(path.read_text())
        assert set(task) == {"task"} and task["task"]["name"] == name
        spec = TASKS.parse(task["task"], "task")
        assert set(task["task"]) - {"name"} == {f.name for f in dataclasses.fields(spec.options)}, name


@pytest.mark.parametrize("name,bad,option", [
    ("copy", {"n_symbols": 1}, "n_symbols"), ("copy", {"min_len": 5, "max_len": 4}, "max_len"),
    ("copy", {"n_symbols": 2, "max_len": 3, "n_train": 20}, "n_train"), ("scan", {"val_fraction": 1.5}, "val_fraction"),
    ("copy", {"tokenizer": "bpx"}, "did you mean 'bpe'"), ("char_lm", {"tokenizer": "word"}, "tokenizer"),
    ("mlm", {"mask_prob": 0.0}, "mask_prob"), ("char_lm", {"eval_lengths": [64, 64]}, "eval_lengths"),
    ("dyck", {"n_types": 5}, "n_types"), ("dyck_depth", {"tokenizer": "bpe"}, "tokenizer"),
])
def test_bad_options_are_config_errors_naming_the_option(name, bad, option):
    with pytest.raises(ConfigError, match=option):
        TASKS.parse({"name": name, **bad}, "task")


@pytest.mark.parametrize("name,kind,options,need,key", [
    ("copy", "decoder", {"max_len": 20}, 43, "task.max_len"),  # bos + 20 + sep + 20 + eos
    ("copy", "encoder_decoder", {"max_len": 20}, 21, "task.max_len"),  # bos + target / target + eos
    ("scan", "decoder", {}, 60, "model.max_seq_len"),  # 9 command words + 48 actions + 3
    ("scan", "encoder_decoder", {}, 49, "model.max_seq_len"),
    ("dyck", "encoder", {"max_len": 40}, 41, "task.max_len"),  # <bos> + brackets
    ("dyck_depth", "encoder", {"max_len": 40}, 40, "task.max_len"),
    ("char_lm", "decoder", {"seq_len": 41}, 41, "task.seq_len"),
])
def test_check_rejects_sequences_longer_than_the_model(name, kind, options, need, key):
    check(name, kind, need, **options)
    with pytest.raises(ConfigError) as info:
        check(name, kind, need - 1, **options)
    assert info.value.key == key and f"max_seq_len {need - 1}" in info.value.message


def test_build_rejects_long_examples_when_only_building_can_tell():
    # bpe lengths are only known after fitting: check passes, build raises
    options = {**SMALL, "tokenizer": {"name": "bpe", "vocab_size": 300}, "max_len": 12}
    check("copy", "decoder", 20, **options)
    with pytest.raises(ConfigError, match="max_seq_len 20"):
        _build.__wrapped__("copy", "decoder", 0, 20, freeze(options))


# ------------------------------------------------------------------------------ copy/reverse/sort

@pytest.mark.parametrize("name,fn", [("copy", lambda s: s), ("reverse", lambda s: s[::-1]),
                                     ("sort", lambda s: "".join(sorted(s)))])
def test_decoder_layout_masks_the_prompt(name, fn):
    data = build(name, "decoder", **SMALL)
    tok = data.tokenizer
    assert data.objective == "lm" and data.metrics == ("exact_match",)
    for e in data.splits["train"][:50] + data.splits["test"][:50]:
        p = len(e.prompt_ids)
        assert e.prompt_ids[0] == BOS and e.prompt_ids[-1] == SEP
        assert e.input_ids == e.prompt_ids + e.target_ids + [EOS]
        assert e.labels == [IGNORE] * p + e.target_ids + [EOS]
        source = tok.decode(e.prompt_ids)
        assert 1 <= len(source) <= 10 and set(source) <= set("abcdefghij")
        assert tok.decode(e.target_ids) == fn(source)


def test_encoder_decoder_layout():
    data = build("reverse", "encoder_decoder", **SMALL)
    tok = data.tokenizer
    assert data.objective == "seq2seq"
    for e in data.splits["val"]:
        assert e.prompt_ids == e.input_ids and SEP not in e.input_ids and BOS not in e.input_ids
        assert e.decoder_input_ids == [BOS] + e.target_ids and e.labels == e.target_ids + [EOS]
        assert tok.decode(e.target_ids) == tok.decode(e.input_ids)[::-1]
    batch = collate(data.splits["val"][:4], PAD)
    assert (batch["labels"] == IGNORE).sum() == (batch["decoder_attention_mask"] == 0).sum()


@pytest.mark.parametrize("name,kind,key", [("copy", "decoder", "prompt_ids"), ("scan", "encoder_decoder", "prompt_ids"),
                                           ("dyck", "encoder", "input_ids"), ("dyck_depth", "encoder", "input_ids")])
def test_val_and_test_are_held_out(name, kind, key):
    data = build(name, kind, **(SMALL if name != "scan" else {}))
    seen = {split: [tuple(getattr(e, key)) for e in rows] for split, rows in data.splits.items()}
    assert all(len(set(v)) == len(v) for v in seen.values())
    assert not set(seen["train"]) & set(seen["val"]) and not set(seen["train"]) & set(seen["test"])
    assert not set(seen["val"]) & set(seen["test"])


def test_word_tokenizer_makes_one_token_per_symbol():
    data = build("copy", "encoder_decoder", tokenizer="word", **SMALL)
    for e in data.splits["train"][:50]:
        assert len(data.tokenizer.decode(e.input_ids).split()) == len(e.input_ids)


# ------------------------------------------------------------------------------------------ SCAN

def test_scan_has_the_published_size_and_translations():
    commands = dict(all_commands())
    assert len(all_commands()) == len(commands) == 20910
    published = {  # Lake & Baroni (2018), Table/README examples, in the dataset's action names
        "jump": "JUMP", "jump left": "LTURN JUMP", "turn left twice": "LTURN LTURN",
        "jump around right": "RTURN JUMP RTURN JUMP RTURN JUMP RTURN JUMP", "jump thrice": "JUMP JUMP JUMP",
        "jump opposite left and walk thrice": "LTURN LTURN JUMP WALK WALK WALK",
        "jump opposite left after walk around left": "LTURN WALK LTURN WALK LTURN WALK LTURN WALK LTURN LTURN JUMP",
        "jump twice after walk left": "LTURN WALK JUMP JUMP",
        "turn around left twice and jump left": "LTURN " * 9 + "JUMP",
    }
    names = {"LTURN": "I_TURN_LEFT", "RTURN": "I_TURN_RIGHT", "JUMP": "I_JUMP", "WALK": "I_WALK"}
    for command, actions in published.items():
        assert commands[command] == " ".join(names[a] for a in actions.split()), command
    for bad in ("turn", "jump twice twice", "walk around", "jump and"):
        with pytest.raises(ValueError):
            interpret(bad)


def test_scan_simple_split_is_the_papers_80_20():
    data = build("scan", "encoder_decoder")
    sizes = {k: len(v) for k, v in data.splits.items()}
    assert sizes["test"] == round(0.2 * 20910) and sum(sizes.values()) == 20910
    tok, commands = data.tokenizer, dict(all_commands())
    for e in data.splits["test"][:200]:
        assert tok.decode(e.target_ids) == commands[tok.decode(e.input_ids)]


def test_scan_length_split_trains_short_and_tests_long():
    data = build("scan", "decoder", split="length")
    n = {split: [len(e.target_ids) for e in rows] for split, rows in data.splits.items()}
    assert len(n["train"]) == 16990 and len(n["val"]) + len(n["test"]) == 3920  # the paper's split
    assert max(n["train"]) <= 22 and min(n["val"] + n["test"]) > 22 and max(n["test"]) == 48
    spec = TASKS.parse({"name": "scan", "split": "length"}, "task")
    pairs = [TASKS.build(spec, seed, "decoder", 128).pairs() for seed in (0, 0, 1)]
    assert pairs[0] == pairs[1] and set(pairs[0]["val"]) != set(pairs[2]["val"])
    assert set(pairs[0]["train"]) == set(pairs[2]["train"])  # only the held-out val/test cut depends on the seed


# ------------------------------------------------------------------------------------------ Dyck

def balanced_by_reduction(s):
    """Independent of the task's stack checker: delete adjacent matched pairs until none is left."""
    while True:
        shorter = s
        for pair in ("()", "[]", "{}", "<>"):
            shorter = shorter.replace(pair, "")
        if shorter == s:
            return s == ""
        s = shorter


def test_dyck_labels_are_correct_and_balanced():
    data = build("dyck", "encoder", **SMALL)
    tok = data.tokenizer
    assert data.objective == "classification" and data.n_classes == 2 and data.metrics == ("accuracy",)
    for split, rows in data.splits.items():
        labels = Counter(e.labels for e in rows)
        assert abs(labels[0] - labels[1]) <= 1, split
        for e in rows:
            assert e.input_ids[0] == BOS
            s = tok.decode(e.input_ids)
            assert len(s) % 2 == 0 and set(s) <= set("()[]")
            assert e.labels == int(balanced_by_reduction(s)), s
    assert data.info["negatives"]["swap"] > 0  # some negatives keep every bracket count


def test_dyck_negatives_match_positive_lengths():
    data = build("dyck", "encoder", n_train=400, n_val=40, n_test=40)
    rows = data.splits["train"]
    assert Counter(len(e.input_ids) for e in rows if e.labels == 0) == \
        Counter(len(e.input_ids) for e in rows if e.labels == 1)


def test_dyck_depth_labels_are_capped_depths():
    data = build("dyck_depth", "encoder", max_depth=3, **SMALL)
    tok = data.tokenizer
    assert data.objective == "token_classification" and data.n_classes == 4
    capped = 0
    for e in data.splits["train"] + data.splits["test"]:
        s = tok.decode(e.input_ids)
        assert len(e.labels) == len(e.input_ids) == len(s)
        depth = 0
        for i, c in enumerate(s):
            depth += 1 if c in "([{<" else -1
            assert depth >= 0 and balanced_by_reduction(s[: i + 1] + "".join(reversed(stack_of(s[: i + 1]))))
            assert e.labels[i] == min(depth, 3)
            capped += depth > 3
    assert capped > 0  # the cap was exercised


def stack_of(prefix):
    """The closing brackets a valid prefix still owes, innermost last."""
    owed = []
    for c in prefix:
        if c in "([{<":
            owed.append({"(": ")", "[": "]", "{": "}", "<": ">"}[c])
        else:
            owed.pop()
    return owed


def test_dyck_check_rejects_impossible_sizes():
    with pytest.raises(ConfigError, match="balanced strings"):
        check("dyck", "encoder", 64, n_types=1, max_len=4, n_train=10, n_val=2, n_test=2)
    with pytest.raises(ConfigError) as info:
        check("dyck", "encoder", 64, min_len=3, max_len=3)
    assert info.value.key == "task.max_len"


# --------------------------------------------------------------------------------------- corpora

@pytest.fixture
def text_files(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("The quick brown fox jumps over the lazy dog. " * 60)
    b.write_text("Pack my box with five dozen liquor jugs! " * 60)
    return [str(a), str(b)]


def test_user_files_are_the_corpus(text_files):
    data = build("char_lm", "decoder", files=text_files, seq_len=32, eval_lengths=[16, 64])
    text = "".join(Path(f).read_text() for f in text_files)
    info = data.info
    assert info["files"] == [str(Path(f).resolve()) for f in text_files] and info["chars"] == len(text)
    assert info["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    tok = data.tokenizer
    assert set(tok.decode(range(len(SPECIALS), tok.vocab_size))) <= set(text)
    a, b = int(0.9 * len(text)), int(0.95 * len(text))
    for split, part in (("val", text[a:b]), ("val@16", text[a:a + (b - a) // 16 * 16]), ("test", text[b:])):
        windows = data.splits[split]
        assert "".join(tok.decode(e.input_ids) for e in windows) == part  # contiguous, complete, in order
        assert all(e.labels == e.input_ids for e in windows)
    assert all(len(e.input_ids) == 32 for e in data.splits["train"])
    assert all(len(e.input_ids) == 64 for e in data.splits["val@64"])
    assert set(info["chars_per_token"]) == set(data.splits) and info["chars_per_token"]["val"] == 1.0
    assert data.metrics == ("bpc", "bpb") and data.eval_splits == ["val", "val@16", "val@64"]
    text_bytes = {"val": len(text[a:b].encode()), "test": len(text[b:].encode())}
    for split, nbytes in text_bytes.items():  # every character one token: bytes per token is bytes over characters
        assert info["bytes_per_token"][split] == pytest.approx(nbytes / len(data.splits[split].ids))


def test_bpe_corpus_records_chars_per_token(text_files):
    data = build("char_lm", "decoder", files=text_files, seq_len=32, tokenizer={"name": "bpe", "vocab_size": 300})
    tokens, chars = data.info["tokens"]["val"], len("".join(Path(f).read_text() for f in text_files))
    assert data.info["chars_per_token"]["val"] > 1.2 and data.tokenizer.vocab_size <= 300
    assert math.isclose(data.info["chars_per_token"]["val"] * tokens, int(0.95 * chars) - int(0.9 * chars))


def test_default_corpus_is_the_sorted_stdlib():
    data = build("char_lm", "decoder", **CORPUS)
    info, root = data.info, Path(sysconfig.get_paths()["stdlib"])
    files = info["files"]
    assert files and files == sorted(files, key=lambda f: Path(f).parts)
    assert all(f.endswith(".py") and not {"test", "tests", "site-packages"} & set(Path(f).parts) for f in files)
    text = "".join((root / f).read_text(encoding="utf-8", errors="replace") for f in files)[: CORPUS["max_chars"]]
    assert info["chars"] == len(text) == CORPUS["max_chars"]
    assert info["sha256"] == hashlib.sha256(text.encode()).hexdigest()


def test_stdlib_walk_skips_tests_and_third_party_code():
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p.relative_to(root) for p in _sorted_py_files(root)]
    assert files == sorted(files, key=lambda p: p.parts)
    assert {Path("os.py"), Path("json/decoder.py")} <= set(files)
    assert not any({"test", "tests", "idle_test", "site-packages"} & set(p.parts) for p in files)
    assert (root / "unittest" / "test").is_dir() or (root / "test").is_dir()  # there was something to skip


def test_missing_file_is_a_config_error(text_files, tmp_path):
    missing = str(tmp_path / "nope.txt")
    for name, kind in (("char_lm", "decoder"), ("mlm", "encoder")):
        with pytest.raises(ConfigError) as info:
            check(name, kind, 64, files=[text_files[0], missing])
        assert info.value.key == "task.files[1]" and info.value.message == f"file not found: {missing}"
    empty = tmp_path / "empty_dir"  # a directory is a corpus of the files below it (issue 15): none is an error
    empty.mkdir()
    with pytest.raises(ConfigError, match="holds no files") as info:
        _build.__wrapped__("char_lm", "decoder", 0, 64, freeze({"files": [str(empty)]}))
    assert info.value.key == "task.files[0]"


def test_empty_corpus_is_a_config_error(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    check("char_lm", "decoder", 64, files=[str(empty)])  # exists: only building finds it empty
    with pytest.raises(ConfigError, match="empty") as info:
        _build.__wrapped__("char_lm", "decoder", 0, 64, freeze({"files": [str(empty)]}))
    assert info.value.key == "task.files"
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("x" * 50)
    with pytest.raises(ConfigError, match="too small"):
        _build.__wrapped__("char_lm", "decoder", 0, 64, freeze({"files": [str(tiny)]}))


def test_mlm_masks_like_bert():
    data, plain = build("mlm", "encoder", **CORPUS), build("char_lm", "decoder", **CORPUS)
    assert data.objective == "mlm"
    counts, total = Counter(), 0
    for e, ref in zip(data.splits["train"], plain.splits["train"]):
        assert len(e.input_ids) == len(ref.input_ids)
        for x, y, orig in zip(e.input_ids, e.labels, ref.input_ids):
            total += 1
            if y == IGNORE:
                assert x == orig
                continue
            assert y == orig
            counts["mask" if x == MASK else "kept" if x == orig else "random"] += 1
            assert x == MASK or x >= len(SPECIALS)
    chosen = sum(counts.values())
    assert abs(chosen / total - 0.15) < 0.01
    assert abs(counts["mask"] / chosen - 0.8) < 0.03
    assert abs(counts["random"] / chosen - 0.1) < 0.03  # (a random draw can hit the original: counted kept)
    assert abs(counts["kept"] / chosen - 0.1) < 0.03
    assert all(any(y != IGNORE for y in e.labels) for rows in data.splits.values() for e in rows)


def test_corpus_windows_start_at_a_seeded_offset():
    a, b = build("char_lm", "decoder", 0, **CORPUS), build("char_lm", "decoder", 1, **CORPUS)
    assert a.info["train_offset"] == random.Random(0).randrange(64)
    assert a.info["train_offset"] != b.info["train_offset"]
    assert torch.equal(torch.tensor(a.splits["val"][0].input_ids), torch.tensor(b.splits["val"][0].input_ids))
