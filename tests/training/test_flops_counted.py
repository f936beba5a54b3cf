"""FLOPs and MFU are counted at the lengths trained, per token the throughput meter counts (issue 26 §1).

An encoder-decoder's tokens are its source plus its target tokens, and so is its FLOPs/token's
denominator (it was per (source, target) pair: MFU came out ~2x). A model is charged for the
examples it reads, not for ``model.max_seq_len`` (a 512-position model trained on 32-token windows
was charged 1.57x). Every claim is checked against torch's FlopCounterMode on the real batches."""
import json
from types import SimpleNamespace

import pytest
import torch

from arch_zoo.data.tasks.base import collate
from arch_zoo.experiment import load
from arch_zoo.models import build_model
from arch_zoo.models.flops import FlopCounter
from arch_zoo.training import prepare, run_one
from arch_zoo.training.callbacks import ThroughputMeter
from tests.models.flop_reference import measured_forward_flops

SMALL = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64, "attention_kernel": "explicit", "dropout": 0.0}
QUIET = {"progress_bar": False, "log_every": 1, "max_steps": 2, "val_every": 2, "val_batches": 1,
         "batch_size": 8, "exact_match_samples": 0}


def copy_task(min_len=1, max_len=6):
    return {"name": "copy", "n_symbols": 6, "min_len": min_len, "max_len": max_len, "n_train": 48, "n_val": 8,
            "n_test": 8}


CASES = {  # kind -> (model, task); max_seq_len well above what the task's examples need
    "encoder_decoder": ({**SMALL, "kind": "encoder_decoder", "max_seq_len": 64, "position": "sinusoidal"}, copy_task()),
    "decoder": ({**SMALL, "kind": "decoder", "max_seq_len": 512, "position": "rope"},
                {"name": "char_lm", "max_chars": 20000, "seq_len": 32}),
}


def _config(kind, task=None):
    model, default_task = CASES[kind]
    return load({"name": "f", "seed": 0, "model": model, "task": task or default_task, "train": QUIET})


def _measured_example(model, example) -> float:
    """FlopCounterMode on one example alone: its own length, no padding."""
    ids = torch.tensor([example.input_ids])
    if example.decoder_input_ids is None:
        return measured_forward_flops(model, input_ids=ids)
    return measured_forward_flops(model, input_ids=ids, decoder_input_ids=torch.tensor([example.decoder_input_ids]))


@pytest.mark.parametrize("kind", ["encoder_decoder", "decoder"])
def test_a_steps_training_flops_are_three_forwards_of_its_real_batch(kind):
    """What MFU's numerator adds up: 3 x the forward FLOPs of each padded batch the meter times,
    against FlopCounterMode on each row at its real length (variable-length copy pairs for the
    decoder too, laid out as one sequence)."""
    cfg = _config(kind, copy_task())
    data = prepare(cfg)
    model = build_model(cfg.model, data.tokenizer.vocab_size)
    rows = list(data.splits["train"][:8])
    batch = collate(rows, data.tokenizer.pad_id)
    assert batch["attention_mask"].float().mean() < 1  # padded: the real batch shape, not a tidy one
    meter, module = ThroughputMeter(FlopCounter(model)), SimpleNamespace(device=torch.device("cpu"))
    meter.on_train_batch_start(None, module, batch, 0)
    meter.on_train_batch_end(None, module, None, batch, 0)
    measured = sum(_measured_example(model, e) for e in rows)
    assert 3 * meter.flops == pytest.approx(3 * measured, rel=1e-9)
    tokens = sum(len(e.input_ids) + len(e.decoder_input_ids or ()) for e in rows)
    assert meter.tokens == tokens  # the source and target tokens those FLOPs are spread over
    assert meter.train_flops_per_second == pytest.approx(3 * measured / meter.seconds)


@pytest.mark.parametrize("kind", ["encoder_decoder", "decoder"])
def test_summary_flops_per_token_and_mfu_are_at_the_lengths_trained(kind, tmp_path):
    """summary.json's FLOPs/token is the forward FLOPs FlopCounterMode measures on the training
    examples over their tokens (source and target alike), its MFU the training FLOP/s those make of
    the meter's tokens/s, and flops_counted_at says where it was counted."""
    cfg = _config(kind, copy_task(5, 5) if kind == "encoder_decoder" else None)  # fixed lengths: one example is all
    summary = run_one(cfg, tmp_path / "run", quiet=True).summary
    data = prepare(cfg)
    model = build_model(cfg.model, data.tokenizer.vocab_size)
    example = data.splits["train"][0]
    tokens = len(example.input_ids) + len(example.decoder_input_ids or ())
    per_token = _measured_example(model, example) / tokens
    assert summary["flops_per_token"] == pytest.approx(per_token, rel=1e-9)
    assert summary["mfu"] == pytest.approx(3 * per_token * summary["train_tokens_per_s"] / summary["peak_flops"],
                                           rel=1e-6)
    at = summary["flops_counted_at"]
    assert at["split"] == "train" and at["examples"] == len(data.splits["train"])
    if kind == "encoder_decoder":
        assert (at["mean_source_tokens"], at["mean_target_tokens"]) == (5, 6)  # copy: bos + target
    else:
        assert at["mean_tokens"] == 32 and set(summary["eval_flops_per_token"]) == {"val", "test"}
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["flops_counted_at"] == at
