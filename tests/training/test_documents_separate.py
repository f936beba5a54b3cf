"""``task.documents: separate`` (issue 58 §4) on a tiny corpus of short documents: the windows say which
document each token is of, a packed batch's loss is the loss of its documents each run alone, and a run
trains and evaluates that way. Documents are found again independently, by cutting each window after
every eos the split holds."""
import json
import random

import pytest
import torch

from arch_zoo import restore
from arch_zoo.experiment import load
from arch_zoo.data.tasks.base import collate
from arch_zoo.data.tokenizers import EOS
from arch_zoo.models import build_model
from arch_zoo.training import run_one
from arch_zoo.training.objectives import loss_fn, objective
from arch_zoo.training.run import prepare as prepare_data

SEQ = 24
MODEL = {"kind": "decoder", "d_model": 16, "n_layers": 2, "n_heads": 2, "d_ff": 32, "max_seq_len": SEQ,
         "position": "learned", "layers": [{"pattern": [{"mixer": "gated_deltanet"}, {"mixer": "attention"}]}]}


def config(tmp_path, documents="separate", **train):
    rng = random.Random(0)
    docs = [f"d{i} " + "".join(rng.choice("abc ") for _ in range(rng.randint(1, 9))) for i in range(300)]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return load({"name": "docs", "model": MODEL,
                 "task": {"name": "char_lm", "files": [str(path)], "split_by": "documents", "seq_len": SEQ,
                          "documents": documents},
                 "train": {"batch_size": 4, "progress_bar": False, "exact_match_samples": 0, **train}})


def pieces(ids):
    """(start, stop) of each document in a window: a new one after every eos."""
    out, start = [], 0
    for i, t in enumerate(ids):
        if t == EOS:
            out.append((start, i + 1))
            start = i + 1
    return out + ([(start, len(ids))] if start < len(ids) else [])


def test_each_window_says_which_document_each_token_is_of(tmp_path):
    data = prepare_data(config(tmp_path), quiet=True)
    for split in ("train", "val"):
        for ex in data.splits[split][:20]:
            starts = [i for i in range(1, len(ex.input_ids)) if ex.document_ids[i] != ex.document_ids[i - 1]]
            assert starts == [stop for _, stop in pieces(ex.input_ids)[:-1]]
    assert data.info["documents"] == "separate"
    assert data.splits["train"][0].document_ids is not None
    joined = prepare_data(config(tmp_path, "joined"), quiet=True)
    assert joined.splits["train"][0].document_ids is None and "documents" not in joined.info


def test_a_packed_batch_s_loss_is_that_of_its_documents_alone(tmp_path):
    data = prepare_data(config(tmp_path), quiet=True)
    batch = collate(list(data.splits["train"][:4]), data.tokenizer.pad_id)
    torch.manual_seed(0)
    model = build_model(MODEL, data.tokenizer.vocab_size).double().eval()
    with torch.no_grad():
        logits, labels = objective("lm").forward(model, batch)
        packed = loss_fn(logits, labels).item()
        total = count = 0.0
        for row in batch["input_ids"]:
            for start, stop in pieces(row.tolist()):
                if stop - start < 2:
                    continue  # a one-token document predicts nothing alone
                own = row[start:stop].unsqueeze(0)
                total += loss_fn(model(own).logits[:, :-1], own[:, 1:], reduction="sum").item()
                count += stop - start - 1
    assert sum(len(pieces(r.tolist())) for r in batch["input_ids"]) > 8  # several documents a window
    assert packed == pytest.approx(total / count, abs=1e-5)
    joined = loss_fn(model(batch["input_ids"]).logits[:, :-1], batch["labels"][:, 1:]).item()
    assert abs(joined - packed) > 1e-3


def test_a_run_trains_and_evaluates_its_documents_apart(tmp_path):
    cfg = config(tmp_path, max_steps=2, val_every=2, val_batches=2)
    result = run_one(cfg, tmp_path / "run", quiet=True)
    assert result.status == "completed" and result.summary["task"]["documents"] == "separate"
    model = restore(tmp_path / "run").model.double()
    data = prepare_data(cfg, quiet=True)
    total = count = 0.0
    with torch.no_grad():  # val/loss from the val windows' documents, each run alone
        for ex in data.splits["val"][:2 * 4]:
            for start, stop in pieces(ex.input_ids):
                if stop - start >= 2:
                    own = torch.tensor([ex.input_ids[start:stop]])
                    total += loss_fn(model(own).logits[:, :-1], own[:, 1:], reduction="sum").item()
                    count += stop - start - 1
    assert result.metrics["val/loss"] == pytest.approx(total / count, abs=1e-5)
