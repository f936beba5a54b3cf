"""Windows that start at documents (``task.windows: documents``) and scored positions from prompt-completion
records (``scored: completion``, TRL's SFT format), issue 30. The expected ids and labels are rebuilt
from the records themselves, never from the store's offsets."""
import json
import math
import random

import numpy as np
import pytest
import torch

from arch_zoo.experiment import load
from arch_zoo.data.prepare import prepare, recipe
from arch_zoo.data.tasks import TASKS
from arch_zoo.data.tasks.base import IGNORE, collate
from arch_zoo.data.tokenizers import EOS
from arch_zoo.training.run import prepare as prepare_data

SEQ = 24


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def texts(n=160, seed=0):
    rng = random.Random(seed)
    return [f"doc{i} " + "".join(rng.choice("abcdefgh ") for _ in range(rng.randint(1, 50))) for i in range(n)]


def sft(n=200, seed=0):
    rng = random.Random(seed)
    return [{"prompt": f"Q{i}: " + "ab" * rng.randint(0, 12) + "?", "completion": " " + "xyz"[i % 3] * rng.randint(1, 9)}
            for i in range(n)]


def build(files, **kw):
    cfg = load({"model": {"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "max_seq_len": 64},
                "task": {"name": "char_lm", "files": files, "split_by": "documents", "seq_len": SEQ, **kw},
                "train": {"batch_size": 4}})
    return cfg, prepare_data(cfg, quiet=True)


def all_windows(data):
    return [e for name in ("train", "val", "test") for e in data.splits[name]]


@pytest.mark.parametrize("long_documents", ["truncate", "split"])
def test_every_window_is_one_document_from_its_start(tmp_path, long_documents):
    docs = texts()
    _, data = build([write_jsonl(tmp_path / "d.jsonl", [{"text": d} for d in docs])], windows="documents",
                    long_documents=long_documents)
    tok = data.tokenizer
    got = sorted(e.input_ids for e in all_windows(data))
    assert all(2 <= len(w) <= SEQ for w in got) and all(e.labels == e.input_ids for e in all_windows(data))
    want = []
    for d in docs:
        ids = tok.encode(d) + [EOS]
        if long_documents == "truncate":
            want.append(ids[:SEQ])
        else:  # consecutive windows of SEQ tokens, a 1-token tail (nothing to predict) left out
            want += [w for w in (ids[i:i + SEQ] for i in range(0, len(ids), SEQ)) if len(w) >= 2]
    assert got == sorted(want)  # every document from its start, none run into the next
    long = sum(len(tok.encode(d)) + 1 > SEQ for d in docs)
    assert sum(v["longer_than_window"] for v in data.info["long_documents"].values()) == long > 10


def split_docs(ids):
    """A split's documents, cut after each eos (an independent reading of the split's ids)."""
    out, cur = [], []
    for t in ids:
        cur.append(t)
        if t == EOS:
            out.append(cur)
            cur = []
    return out


def test_padding_is_not_scored_and_not_attended(tmp_path):
    _, data = build([write_jsonl(tmp_path / "d.jsonl", [{"text": d} for d in texts()])], windows="documents")
    rows = data.splits["train"][:8]
    batch = collate(rows, data.tokenizer.pad_id)
    for i, e in enumerate(rows):
        n = len(e.input_ids)
        assert batch["attention_mask"][i].tolist() == [1] * n + [0] * (batch["input_ids"].shape[1] - n)
        assert (batch["labels"][i, n:] == IGNORE).all()
    assert len({len(e.input_ids) for e in rows}) > 1  # the batch really pads


RECORDS = sft()


def expected_labels(tok, window_ids):
    """The record whose prompt the window starts with, and the labels its completion alone gives."""
    text = tok.decode([t for t in window_ids if t != EOS])
    rec = next(r for r in RECORDS if (r["prompt"] + r["completion"]).startswith(text)
               and text.startswith(r["prompt"].split(":")[0] + ":"))
    p = tok.encode(rec["prompt"])
    full = p + tok.encode(rec["completion"]) + [EOS]
    assert window_ids == full[:len(window_ids)]
    return rec, [IGNORE] * len(p) + full[len(p):]


@pytest.mark.parametrize("tokenizer", ["char", {"name": "bpe", "vocab_size": 300}])
def test_scored_positions_are_exactly_the_completion_tokens(tmp_path, tokenizer):
    _, data = build([write_jsonl(tmp_path / "sft.jsonl", RECORDS)], windows="documents", scored="completion",
                    tokenizer=tokenizer)
    tok, seen = data.tokenizer, set()
    for e in all_windows(data):
        rec, want = expected_labels(tok, e.input_ids)
        assert e.labels == want[:len(e.input_ids)]
        seen.add(rec["prompt"])
    # a window is left out only when its truncation leaves no completion token to predict
    cut = {r["prompt"] for r in RECORDS if len(tok.encode(r["prompt"])) >= SEQ}
    assert seen == {r["prompt"] for r in RECORDS} - cut and (cut or tokenizer != "char")


def test_stream_windows_score_the_completions_too(tmp_path):
    _, data = build([write_jsonl(tmp_path / "sft.jsonl", RECORDS)], scored="completion")
    tok = data.tokenizer
    val = data.splits["val"]  # offset 0, keep_tail: the whole val split, window after window
    ids = [t for e in val for t in e.input_ids]
    labels = [y for e in val for y in e.labels]
    want = []
    for doc in split_docs(ids):
        want += expected_labels(tok, doc)[1]
    assert labels == want[:len(labels)] and any(y == IGNORE for y in labels)


def test_val_loss_counts_only_the_completion_tokens(tmp_path):
    from arch_zoo.training.module import ArchZooModule

    cfg, data = build([write_jsonl(tmp_path / "sft.jsonl", RECORDS)], windows="documents", scored="completion")
    torch.manual_seed(0)
    module = ArchZooModule(cfg, data).eval()
    val = list(data.splits["val"])
    with torch.no_grad():
        for i in range(0, len(val), 4):
            module._accumulate(collate(val[i:i + 4], data.tokenizer.pad_id), "val")
        metrics = module._finish_eval("val")
        total, count = 0.0, 0
        for e in val:  # each window alone, unpadded; the loss summed by hand over its completion tokens
            _, want = expected_labels(data.tokenizer, e.input_ids)
            logp = module.model(torch.tensor([e.input_ids])).logits[0].float().log_softmax(-1)
            for j in range(1, len(e.input_ids)):
                if want[j] != IGNORE:
                    total -= float(logp[j - 1, want[j]])
                    count += 1
    tok = data.tokenizer  # the completion tokens (and eos) inside each window, from its record
    in_windows = [min(len(e.input_ids), len(tok.encode(r["prompt"] + r["completion"])) + 1) - len(tok.encode(r["prompt"]))
                  for e in val for r in [expected_labels(tok, e.input_ids)[0]]]
    assert count == sum(in_windows) and len(val) > 5
    assert metrics["val/loss"] == pytest.approx(total / count, rel=1e-5)


def test_store_keys_change_only_for_prompt_completion_stores(tmp_path):
    files = [write_jsonl(tmp_path / "sft.jsonl", RECORDS)]
    plain = TASKS.parse({"name": "char_lm", "files": files, "split_by": "documents", "text_field": "prompt"},
                        "task").options
    scored = TASKS.parse({"name": "char_lm", "files": files, "split_by": "documents", "scored": "completion"},
                         "task").options
    windows = TASKS.parse({"name": "char_lm", "files": files, "split_by": "documents", "text_field": "prompt",
                           "windows": "documents", "long_documents": "split"}, "task").options
    assert "fields" not in recipe(plain).identity() and recipe(windows).key() == recipe(plain).key()
    assert recipe(scored).key() != recipe(plain).key()
    store = prepare(plain, tmp_path / "cache")
    assert store.score_starts("train") is None and "score_starts" not in store.manifest["splits"]["train"]
    starts = prepare(scored, tmp_path / "cache").score_starts("train")
    assert starts is not None and np.all(np.diff(starts) > 0)


def test_parquet_columns_hold_prompts_and_completions_too(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"q": [r["prompt"] for r in RECORDS], "a": [r["completion"] for r in RECORDS]}),
                   tmp_path / "sft.parquet")
    _, data = build([str(tmp_path / "sft.parquet")], windows="documents", scored="completion", prompt_field="q",
                    completion_field="a")
    windows = all_windows(data)
    assert len(windows) > 100
    for e in windows:
        assert e.labels == expected_labels(data.tokenizer, e.input_ids)[1][:len(e.input_ids)]
