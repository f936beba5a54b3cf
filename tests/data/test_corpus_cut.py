"""Issue 26 §2: a user's files are read whole unless a limit is set; a limit that cuts says how much it
left out; the train split's unigram loss (its token entropy) is recorded once, at prepare time."""
import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import entropy

from arch_zoo.data.example import Example
from arch_zoo.data.prepare import STDLIB_CHARS, prepare, recipe
from arch_zoo.data.store import cut_text
from arch_zoo.data.tasks import TASKS
from arch_zoo.data.unigram import unigram_loss
from arch_zoo.errors import ConfigError


def options(**kw):
    return TASKS.parse({"name": "char_lm", **kw}, "task").options


def test_a_users_file_is_read_whole_by_default(tmp_path):
    """`task.files=[corpus.txt]` with no max_chars read 2,000,000 characters of a bigger file and said
    nothing; now the whole file is read, and nothing claims a cut."""
    rng = np.random.default_rng(0)
    body = "".join(rng.choice(list("abcdefgh \n"), STDLIB_CHARS + 1234))
    f = tmp_path / "corpus.txt"
    f.write_text(body)
    store = prepare(options(files=[str(f)]), tmp_path / "cache")
    assert store.manifest["chars"] == len(body) == store.info()["total_chars"]
    assert sum(store.counts("chars").values()) == len(body)
    assert store.cut() is None and store.info()["max_chars"] is None


def test_the_default_corpus_keeps_its_cut_and_its_store(tmp_path):
    """The built-in corpus (the standard library) still reads its first 2,000,000 characters, and its
    store's key is the one an explicit max_chars: 2000000 gives (its results and cached stores stay)."""
    auto = recipe(options())
    assert options().max_chars == "auto" and auto.max_chars == STDLIB_CHARS
    assert auto.key() == recipe(options(max_chars=STDLIB_CHARS)).key()
    (tmp_path / "x.txt").write_text("text")
    mine = recipe(options(files=[str(tmp_path / "x.txt")]))
    assert mine.max_chars is None and mine.key() == recipe(options(files=[str(tmp_path / "x.txt")], max_chars=None)).key()


def test_a_cut_counts_what_it_left_out_in_every_format(tmp_path):
    """A cut reads on to count the rest (plain text, JSON Lines, Parquet): "read 1,000 of N characters"."""
    text = "0123456789\n" * 300
    docs = ["first document " * 20, "second " * 50, "third, the last " * 10]
    (tmp_path / "a.txt").write_text(text)
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    pq.write_table(pa.table({"text": docs}), tmp_path / "c.parquet")
    files = [str(tmp_path / n) for n in ("a.txt", "b.jsonl", "c.parquet")]
    total = len(text) + 2 * sum(map(len, docs))
    store = prepare(options(files=files, max_chars=1000), tmp_path / "cache")
    info = store.info()
    assert (info["chars"], info["total_chars"], info["max_chars"]) == (1000, total, 1000)
    assert store.cut() == f"read 1,000 of {total:,} characters (max_chars: 1,000)"
    cut_in_a_later_file = prepare(options(files=files, max_chars=len(text) + 5), tmp_path / "cache")
    assert cut_in_a_later_file.info()["total_chars"] == total
    whole = prepare(options(files=files, max_chars=total), tmp_path / "cache")  # a limit that cuts nothing
    assert whole.info()["total_chars"] == total and whole.cut() is None


def test_cut_text_needs_both_counts():
    assert cut_text({"chars": 10, "total_chars": 10, "max_chars": 10}) is None
    assert cut_text({"chars": 10}) is None  # a summary from before the count
    assert cut_text({"chars": 10, "total_chars": 12345, "max_chars": 10}) == "read 10 of 12,345 characters (max_chars: 10)"


@pytest.mark.parametrize("bad", ["lots", "AUTO", 0])
def test_max_chars_is_a_count_null_or_auto(bad):
    with pytest.raises(ConfigError, match="max_chars"):
        options(max_chars=bad)


def test_unigram_loss_is_the_entropy_of_the_train_split(tmp_path):
    """Checked against an independent count: the characters of the first 90% of the text (char
    tokens), and the ids Hugging Face's tokenizer gives that text (BPE)."""
    rng = np.random.default_rng(1)
    words = ["alpha", "beta", "gamma", "delta", "pi", "e", "zeta\n"]
    body = " ".join(rng.choice(words, 6000, p=[0.3, 0.2, 0.15, 0.15, 0.1, 0.05, 0.05]))
    f = tmp_path / "book.txt"
    f.write_text(body)
    train = body[: int(0.9 * len(body))]
    store = prepare(options(files=[str(f)]), tmp_path / "cache")
    expected = entropy(list(Counter(train).values()))
    assert store.info()["unigram_loss"] == pytest.approx(expected, rel=1e-12)
    bpe = prepare(options(files=[str(f)], tokenizer={"name": "bpe", "vocab_size": 300}), tmp_path / "cache")
    ids = bpe.tokenizer._tok.encode(train).ids
    assert bpe.info()["unigram_loss"] == pytest.approx(entropy(list(Counter(ids).values())), rel=1e-12)
    assert bpe.info()["unigram_loss"] != pytest.approx(expected, rel=1e-3)


def test_a_generated_tasks_unigram_loss_counts_the_scored_labels():
    """lm: position i predicts label i + 1, so a row's first label is never scored; IGNORE never is."""
    from arch_zoo.training.objectives import objective

    rows = [Example([1, 7, 8, 9], [1, 7, 8, 9]), Example([1, 7, 7], [-100, -100, 7])]
    offset = {name: objective(name).label_offset for name in ("lm", "seq2seq", "classification")}
    assert unigram_loss(rows, offset["lm"]) == pytest.approx(entropy([2, 1, 1]))
    assert unigram_loss(rows, offset["seq2seq"]) == pytest.approx(entropy([1, 2, 1, 1]))
    assert unigram_loss([Example([1], 0), Example([1], 1), Example([1], 1)], offset["classification"]) == \
        pytest.approx(entropy([1, 2]))
    assert unigram_loss([], offset["lm"]) is None
