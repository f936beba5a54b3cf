"""Decoding-state bytes per token, as describe prints them, against counts by hand: a K/V cache's two
tensors of kv_heads x head_dim per key (MHA, GQA, MQA; a sliding window keeps window - 1 keys), MLA's
latent and shared rope key, and a recurrent mixer's fixed state spread over the context; and what
every state reports against the storage its tensors keep alive."""
import pytest
import torch

from arch_zoo import testing
from arch_zoo.components.mixers import MIXERS
from arch_zoo.config import ExperimentConfig
from arch_zoo.config.loading import model_config
from arch_zoo.describe import _fmt, describe_text
from arch_zoo.models import build_model
from arch_zoo.models.flops import decoding_state_bytes
from tests.conftest import tiny

N, LAYERS, F32 = 16, 2, 4  # context, layers, bytes a number
SHAPE = dict(d_model=32, n_heads=4, n_layers=LAYERS)  # head_dim 8

CASES = {  # name: (model changes, float32 bytes per token of one layer at context N, by hand)
    "MHA": ({}, 2 * 4 * 8 * F32),
    "GQA": ({"n_kv_heads": 2}, 2 * 2 * 8 * F32),
    "MQA": ({"n_kv_heads": 1}, 2 * 1 * 8 * F32),
    "sliding window 5": ({"attention": {"name": "sliding_window", "window": 5}}, 2 * 4 * 8 * F32 * 4 / N),
    "MLA": ({"mixer": {"name": "mla", "kv_lora_rank": 12, "qk_rope_head_dim": 4}}, (12 + 4) * F32),
    "gated_deltanet": ({"mixer": {"name": "gated_deltanet", "conv_size": 4}},
                       (4 * 8 * 8 + (2 * 32 + 32) * 3) * F32 / N),  # S per head, the conv's last 3 inputs
    "lstm": ({"mixer": {"name": "lstm", "hidden_size": 24}}, 2 * 24 * F32 / N),  # h and c
    "gru": ({"mixer": {"name": "gru", "hidden_size": 24}}, 24 * F32 / N),  # h
}


@pytest.mark.parametrize("name", list(CASES))
def test_state_bytes_per_token_match_a_count_by_hand(name):
    changes, per_layer = CASES[name]
    cfg = tiny(**SHAPE, **changes)
    model = build_model(cfg, 11).eval()
    assert decoding_state_bytes(model, N) == pytest.approx(per_layer * LAYERS * N)
    cache = model.new_cache()
    with torch.no_grad():  # and what an eager prefill holds (the window's cache: its live keys)
        model(torch.randint(1, 11, (1, N)), cache=cache)
    live = sum(sum(t.numel() for t in (s.mixer.k, s.mixer.v)) if hasattr(s.mixer, "k") else 0 for s in cache.layers)
    if live:
        assert live * F32 == per_layer * LAYERS * N
    text = describe_text(ExperimentConfig(model=model_config(cfg)), vocab_size=11, seq_len=N)
    line = next(l for l in text.splitlines() if l.startswith("  state bytes (float32)"))
    assert line.split()[3:] == [_fmt(per_layer * LAYERS * N), _fmt(per_layer * LAYERS), "per", "token"], line


@pytest.mark.parametrize("heads", [2, 16])
def test_mla_state_does_not_grow_with_the_heads(heads):
    """The latent and the rope key are shared by the heads: 2 or 16 heads cache the same numbers."""
    cfg = model_config(tiny(d_model=128, n_heads=heads, n_layers=1, position="rope",
                            mixer={"name": "mla", "kv_lora_rank": 32, "qk_rope_head_dim": 4}))
    assert decoding_state_bytes(build_model(cfg, 11), 10) == (32 + 4) * 10 * F32


def test_a_run_s_summary_and_its_report_row_carry_the_bytes_per_token(tmp_path):
    import json

    from arch_zoo.experiment import load
    from arch_zoo.reports.runstore import read_run
    from arch_zoo.training.run import run_one

    model = tiny(n_layers=2, max_seq_len=32, position="rope", mixer={"name": "mla", "kv_lora_rank": 12,
                                                                      "qk_rope_head_dim": 4})
    cfg = load({"name": "t", "model": model, "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
                "train": {"max_steps": 2, "batch_size": 4, "val_every": 2, "val_batches": 1, "log_every": 2,
                          "progress_bar": False, "exact_match_samples": 0}})
    assert run_one(cfg, tmp_path / "run", quiet=True).status == "completed"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["state_bytes_per_token"] == (12 + 4) * F32 * 2  # two layers, whatever the length
    assert read_run(tmp_path / "run", "s")["state_bytes_per_token"] == summary["state_bytes_per_token"]


def _kept_alive(state) -> int:
    """Bytes of the distinct storages a state's tensors hold: what stays allocated while it lives."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in state.tensors()}
    return sum(storages.values())


BUILT_IN = [e.name for e in MIXERS.entries() if e.factory.__module__.startswith("arch_zoo.")]
KINDS = [({"mixer": {"name": n, **testing.example_options("mixers", n)}}, n) for n in BUILT_IN] + [
    ({"position": "rope"}, "attention, rope"),  # rotated keys are fresh tensors, the values still a view
    ({"position": "rope", "mixer": {"name": "mla", **testing.example_options("mixers", "mla")}}, "mla, rope"),
    ({"attention": {"name": "sliding_window", "window": 3}}, "sliding window (eager trim, static ring)"),
    ({"kind": "encoder_decoder", "layers": [{"stack": "decoder", "mixer": "gated_deltanet"}]},
     "cross-attention K/V beside a recurrent mixer")]


@pytest.mark.parametrize("changes", [c for c, _ in KINDS], ids=[i for _, i in KINDS])
def test_a_state_reports_the_bytes_its_tensors_keep_alive(changes):
    """Every built-in mixer's eager state (and its static form, and a cross-attention cache) reports in
    ``nbytes`` exactly the storage it keeps alive, right after a prefill and after a decoding step: a
    convolution state sliced from the prefill's input, or K/V split from a fused projection, would
    keep the whole prefill buffer (4 MB where nbytes said 11 KB at 4,096 tokens)."""
    model = build_model(tiny(d_model=16, n_heads=2, max_seq_len=64, **changes), 11).eval()
    n, ids, cache = 40, torch.randint(1, 11, (1, 40)), model.new_cache()
    if changes.get("kind") == "encoder_decoder":
        memory = model.encode(ids)
        feed = lambda tokens: model.decode(tokens, memory, cache=cache)  # noqa: E731
    else:
        feed = lambda tokens: model(tokens, cache=cache)  # noqa: E731
    with torch.no_grad():
        feed(ids)
        states = [s for layer in cache.layers for s in (layer.mixer, layer.cross)]
        static = [layer.mixer.sublayer.static_state(1, 64, torch.float32, ids.device, torch.zeros(1, dtype=torch.long))
                  for layer in model.decoder.layers]
        for layer, state in zip(cache.layers, static):
            state.load(layer.mixer, n)
        assert sum(s.nbytes for s in states) > 0
        assert [s.nbytes for s in states + static] == [_kept_alive(s) for s in states + static]
        feed(ids[:, :1])
        assert [s.nbytes for s in states] == [_kept_alive(s) for s in states]
