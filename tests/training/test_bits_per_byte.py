"""Bits per byte: summed token losses over the UTF-8 bytes those tokens cover, checked against a
float64 loop and against a tiny corpus of multi-byte characters counted by hand."""
import csv
import json
import math

import pytest
import torch

from arch_zoo.experiment import load
from arch_zoo.data.tokenizers import BPEOptions, BPETokenizer, ByteTokenizer, CharTokenizer
from arch_zoo.training import prepare, run_one
from arch_zoo.training.objectives import objective

TEXT = "".join(f"héllo wörld € naïve café {i} 日本 " for i in range(700))  # 1, 2 and 3 UTF-8 bytes a character


def test_bpb_is_summed_loss_over_summed_bytes_in_float64():
    tok = CharTokenizer().fit([TEXT])
    table = tok.token_bytes()
    vocab = tok.vocab_size
    labels = torch.tensor([tok.encode("é€a日"), tok.encode("e €") + [-100]])
    logits = torch.randn(2, 4, vocab)
    obj = objective("lm")
    halves = [obj.metric_sums(logits[i:i + 1], labels[i:i + 1], torch.as_tensor(table)) for i in range(2)]
    sums = {k: halves[0][k] + halves[1][k] for k in halves[0]}
    got = obj.finish(sums)["bpb"]
    loss, nbytes = 0.0, 0
    for row in range(2):
        for pos in range(4):
            y = int(labels[row, pos])
            if y == -100:
                continue
            logp = torch.log_softmax(logits[row, pos].double(), -1)[y].item()
            loss -= logp
            nbytes += len(tok.decode([y]).encode("utf-8"))
    assert nbytes == 2 + 3 + 1 + 3 + 1 + 1 + 3
    assert got == pytest.approx(loss / math.log(2) / nbytes, rel=1e-6)
    # not a mean over batches of their ratios: with every token at ln V nats, the pooled value is
    # 7 ln V / 14 bytes, the mean of the rows' ratios (4 ln V / 9 + 3 ln V / 5) / 2
    flat = [obj.metric_sums(torch.zeros(1, 4, vocab), labels[i:i + 1], torch.as_tensor(table)) for i in range(2)]
    pooled = obj.finish({k: flat[0][k] + flat[1][k] for k in flat[0]})["bpb"]
    assert pooled == pytest.approx(7 * math.log(vocab) / math.log(2) / 14, rel=1e-6)
    assert abs(pooled - (4 / 9 + 3 / 5) / 2 * math.log(vocab) / math.log(2)) > 0.05


@pytest.mark.parametrize("make", [lambda: CharTokenizer().fit([TEXT]), lambda: ByteTokenizer(),
                                  lambda: BPETokenizer(BPEOptions(vocab_size=300)).fit([TEXT])],
                         ids=["char", "byte", "bpe"])
def test_token_bytes_add_up_to_the_texts_utf8_length(make):
    tok = make()
    ids = tok.encode(TEXT[:500])
    assert int(sum(tok.token_bytes()[i] for i in ids)) == len(TEXT[:500].encode("utf-8"))
    assert all(tok.token_bytes()[i] == 0 for i in range(6))  # specials cover no text


def _config(tmp_path, tokenizer="char"):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return load({"name": "bpb", "seed": 0,
                 "model": {"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32,
                           "max_seq_len": 16, "position": "rope"},
                 "task": {"name": "char_lm", "files": [str(path)], "seq_len": 16, "tokenizer": tokenizer,
                          "eval_lengths": [8]},
                 "train": {"max_steps": 4, "batch_size": 4, "val_every": 4, "val_batches": 1000,
                           "progress_bar": False, "log_every": 1, "exact_match_samples": 0}})


def _by_hand(data, split):
    """(scored target tokens, their UTF-8 bytes) over every window of a split, counted from the text
    each id decodes to."""
    count = nbytes = 0
    for example in data.splits[split]:
        for y in example.labels[1:]:  # lm: a window's first token is never a target
            if y != -100:
                count += 1
                nbytes += len(data.tokenizer.decode([y]).encode("utf-8"))
    return count, nbytes


def test_a_run_reports_bpb_for_train_every_eval_split_and_length(tmp_path):
    cfg = _config(tmp_path)
    data = prepare(cfg)
    result = run_one(cfg, tmp_path / "run", quiet=True)
    final = result.metrics
    for split in ("val", "val@8", "test"):
        count, nbytes = _by_hand(data, split)
        assert nbytes > count  # multi-byte characters: a per-character and a per-byte metric differ
        assert final[f"{split}/bpb"] == pytest.approx(final[f"{split}/loss"] * count / math.log(2) / nbytes,
                                                       rel=1e-6)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["units"]["val/bpb"] == "byte" and summary["units"]["val/loss"] == "token"
    assert summary["units"]["val/bpc"] == "character"
    assert summary["task"]["bytes_per_token"]["val"] == pytest.approx(
        sum(len(data.tokenizer.decode([i]).encode()) for i in data.splits["val"].ids.read(0, len(
            data.splits["val"].ids))) / len(data.splits["val"].ids))
    with (tmp_path / "run" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    train = [r for r in rows if r.get("train/bpb")]
    assert train and all(0 < float(r["train/bpb"]) < float(r["train/loss"]) / math.log(2) for r in train)


class _Ids:
    """A split of ``n`` token ids, i % 7, read by offset as a store's TokenArray is."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def read(self, start, stop):
        import numpy as np

        return np.arange(start, stop) % 7


def test_split_bytes_is_exact_up_to_its_limit_and_an_estimate_past_it(monkeypatch):
    import numpy as np

    from arch_zoo.data import text_bytes

    table = np.array([0, 1, 1, 2, 3, 4, 1])
    monkeypatch.setattr(text_bytes, "CHUNK", 50)
    exact = sum(int(table[i % 7]) for i in range(5_000))
    assert text_bytes.split_bytes(_Ids(5_000), table) == exact  # chunked, every token counted
    monkeypatch.setattr(text_bytes, "EXACT_UP_TO", 1_000)  # past the limit: 64 evenly spaced chunks, scaled
    assert text_bytes.split_bytes(_Ids(5_000), table) == pytest.approx(exact, rel=0.01)
    assert text_bytes.bytes_per_token(_Ids(5_000), None) is None
