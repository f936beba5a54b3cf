"""Attention diagnostics (issue 30): per layer attention entropy, largest attention logit and the mass on
the first real token (issue 40), checked
against attention probabilities rebuilt by hand from each layer's input and weights."""
import csv
import math

import pytest
import torch

from arch_zoo.components.attention import MultiHeadAttention
from arch_zoo.components.attention_diagnostics import AttentionRecorder
from arch_zoo.components.positions import alibi_slopes
from arch_zoo.models import build_model
from tests.conftest import tiny

HEADS, D = 2, 16


def model(**kw):
    torch.manual_seed(0)
    m = build_model(tiny(n_layers=2, n_heads=HEADS, d_model=D, max_seq_len=16, **kw), vocab_size=20).eval()
    with torch.no_grad():  # larger q/k weights than the init: logits far from zero, entropies far from log(L)
        for layer in m.decoder.layers:
            layer.mixer.sublayer.qkv.weight.mul_(4)
    return m


def inputs():
    ids = torch.randint(0, 20, (3, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # right padding: keys (and queries) 6.. of row 1 are not real
    mask[2, 3:] = 0
    return ids, mask


def by_hand(m, ids, mask, bias=None):
    """Per layer (mean entropy, max logit, mean weight on the row's first real token) over real queries,
    from the layer's input x: q, k = x W_q, x W_k (no rotation), scores q.k / sqrt(head_dim) (+ bias),
    causal and padding masks, softmax (with the layer's sink logit as one more outcome, if it has one)."""
    xs = []
    hooks = [layer.mixer.sublayer.register_forward_pre_hook(lambda mod, args: xs.append(args[0]))
             for layer in m.decoder.layers]
    with torch.no_grad():
        m(ids, attention_mask=mask)
    xs = [x.detach() for x in xs]
    for h in hooks:
        h.remove()
    out = []
    L, d = ids.shape[1], D // HEADS
    for layer, x in zip(m.decoder.layers, xs):
        w = layer.mixer.sublayer.qkv.weight.detach().double()
        b = layer.mixer.sublayer.qkv.bias
        qkv = x.double() @ w.T + (b.detach().double() if b is not None else 0)
        q, k = qkv[..., :D], qkv[..., D:2 * D]
        sinks = layer.mixer.sublayer.sinks
        ent, rows, top, first = 0.0, 0, -math.inf, 0.0
        for r in range(ids.shape[0]):
            for h in range(HEADS):
                s = q[r, :, h * d:(h + 1) * d] @ k[r, :, h * d:(h + 1) * d].T / math.sqrt(d)
                if bias is not None:
                    s = s + bias[h]
                for i in range(L):
                    if not mask[r, i]:
                        continue  # a padded query
                    keys = [j for j in range(i + 1) if mask[r, j]]
                    logits = s[i, keys]
                    with_sink = logits if sinks is None else torch.cat((logits, sinks[h:h + 1].detach().double()))
                    p = with_sink.softmax(-1)
                    ent -= float((p * p.log()).sum())
                    rows += 1
                    top = max(top, float(logits.max()))
                    first += float(p[0])  # keys[0]: the row's first real token
        out.append((ent / rows, top, first / rows))
    return out


def recorded(m, ids, mask):
    rec = AttentionRecorder(m)
    with torch.no_grad(), rec.recording({"decoder": mask}):
        m(ids, attention_mask=mask)
    return rec.results()


@pytest.mark.parametrize("kernel", ["sdpa", "explicit"])
def test_entropy_and_max_logit_equal_a_computation_by_hand(kernel):
    m = model(position="none", attention_kernel=kernel)
    ids, mask = inputs()
    got = recorded(m, ids, mask)
    hand = by_hand(m, ids, mask)
    for i, (entropy, top, first) in enumerate(hand):
        assert got[f"attn_entropy/layer_{i}"] == pytest.approx(entropy, rel=1e-5)
        assert got[f"attn_max_logit/layer_{i}"] == pytest.approx(top, rel=1e-5)
        assert got[f"attn_first_token/layer_{i}"] == pytest.approx(first, rel=1e-5)
    assert got["attn_first_token"] == pytest.approx(sum(f for _, _, f in hand) / len(hand), rel=1e-5)  # over layers
    assert set(got) == {f"attn_{k}/layer_{i}" for k in ("entropy", "max_logit", "first_token") for i in range(2)} \
        | {"attn_first_token"}
    assert 0.1 < got["attn_entropy/layer_0"] < math.log(10) - 0.1  # neither uniform nor collapsed


def test_the_max_logit_counts_score_biases_and_the_softcap():
    m = model(position="alibi")
    ids, mask = inputs()
    pos = torch.arange(ids.shape[1], dtype=torch.float64)
    bias = -alibi_slopes(HEADS).double().view(-1, 1, 1) * (pos[None, :] - pos[:, None]).abs()
    got = recorded(m, ids, mask)
    for i, (entropy, top, _) in enumerate(by_hand(m, ids, mask, bias)):
        assert got[f"attn_entropy/layer_{i}"] == pytest.approx(entropy, rel=1e-5)
        assert got[f"attn_max_logit/layer_{i}"] == pytest.approx(top, rel=1e-5)
    capped = recorded(model(position="none", attn_logit_softcap=0.2), ids, mask)  # (the same weights: same seed)
    top = by_hand(model(position="none"), ids, mask)[0][1]  # layer 0: its input is the cap's alone; tanh is monotonic
    assert capped["attn_max_logit/layer_0"] == pytest.approx(0.2 * math.tanh(top / 0.2), rel=1e-5)


@pytest.mark.parametrize("kernel", ["sdpa", "explicit"])
def test_first_token_mass_finds_the_first_real_token_and_counts_sinks_as_the_model_does(kernel):
    """Left padding moves the first real token off column 0; a sink takes its share of the softmax."""
    m = model(position="none", attention_kernel=kernel, mixer={"name": "attention", "sinks": True})
    with torch.no_grad():
        for layer in m.decoder.layers:
            layer.mixer.sublayer.sinks.copy_(torch.randn(HEADS) * 2)
    ids, _ = inputs()
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding
    mask[2, :7] = 0
    got = recorded(m, ids, mask)
    for i, (entropy, top, first) in enumerate(by_hand(m, ids, mask)):
        assert got[f"attn_entropy/layer_{i}"] == pytest.approx(entropy, rel=1e-5)
        assert got[f"attn_max_logit/layer_{i}"] == pytest.approx(top, rel=1e-5)
        assert got[f"attn_first_token/layer_{i}"] == pytest.approx(first, rel=1e-5)


def test_padded_keys_and_queries_are_left_out():
    """A padded batch gives what its rows give unpadded, one by one (counted per real query)."""
    m = model(position="rope")
    ids, mask = inputs()
    whole = recorded(m, ids, mask)
    rec = AttentionRecorder(m)
    for r in range(ids.shape[0]):
        n = int(mask[r].sum())
        with torch.no_grad(), rec.recording({"decoder": None}):
            m(ids[r:r + 1, :n])
    alone = rec.results()
    assert whole.keys() == alone.keys()
    for k in whole:
        assert whole[k] == pytest.approx(alone[k], rel=1e-5), k


def test_outputs_are_bit_identical_with_diagnostics_off_on_and_after():
    for kernel in ("sdpa", "explicit"):
        m = model(position="rope", attention_kernel=kernel)
        ids, mask = inputs()
        with torch.no_grad():
            before = m(ids, attention_mask=mask).logits
            rec = AttentionRecorder(m)
            with rec.recording({"decoder": mask}):
                during = m(ids, attention_mask=mask).logits
            after = m(ids, attention_mask=mask).logits
        assert torch.equal(before, during) and torch.equal(before, after)
        assert all(mod.recorder is None for mod in m.modules() if isinstance(mod, MultiHeadAttention))


def test_diagnostics_land_in_metrics_csv_per_layer(tmp_path):
    from arch_zoo.experiment import load
    from arch_zoo.training.run import run_one

    cfg = load({"name": "t", "model": tiny(n_layers=2, max_seq_len=32),
                "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
                "train": {"max_steps": 4, "batch_size": 4, "val_every": 2, "val_batches": 2, "log_every": 2,
                          "progress_bar": False, "exact_match_samples": 0, "attention_diagnostics": True,
                          "attention_diagnostics_every": 2}})
    result = run_one(cfg, tmp_path / "run", quiet=True)
    assert result.status == "completed"
    rows = list(csv.DictReader((tmp_path / "run" / "metrics.csv").open()))
    for stage in ("val", "train"):
        for kind in ("attn_entropy", "attn_max_logit"):
            for i in range(2):
                values = [float(r[f"{stage}/{kind}/layer_{i}"]) for r in rows if r.get(f"{stage}/{kind}/layer_{i}")]
                assert len(values) == 2 and all(math.isfinite(x) for x in values), (stage, kind, i)
    assert all(0 < float(r["val/attn_entropy/layer_0"]) <= math.log(32) for r in rows if r.get("val/attn_entropy/layer_0"))
