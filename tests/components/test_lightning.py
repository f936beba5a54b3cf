"""Lightning attention (``lightning``, MiniMax-01's linear layers): equal to transformers' own
``MiniMaxLightningAttention`` on its weights, its chunked (prompt) path and its cached path (a prefill,
then a block, then single steps), in float32 and float64, with a left-padded row; its decay slopes are
MiniMax's per head and layer; describe states its state (one head_dim x head_dim matrix per head) and
one step's FLOPs as counted by hand."""
import pytest
import torch

from arch_zoo.components.context import LayerContext
from arch_zoo.components.mixers import MIXERS, lightning
from arch_zoo.config import ExperimentConfig
from arch_zoo.config.loading import model_config
from arch_zoo.describe import _fmt, describe_text
from arch_zoo.models import build_model
from tests.conftest import tiny

from .mixer_checks import (D, L, assert_a_prefill_then_steps_equal_one_full_forward,
                           assert_chunked_gradients_equal_the_one_position_chunks,
                           assert_the_state_keeps_alive_what_it_reports, inputs, run)

# odd sizes (transformers rotates an even head_dim only); the second of four layers: a depth factor
# neither 1 nor ~0
H, HD, LAYERS, INDEX = 3, 6, 4, 1


def hf_layer(block_size=4):
    from transformers import MiniMaxConfig
    from transformers.models.minimax.modeling_minimax import MiniMaxLightningAttention

    cfg = MiniMaxConfig(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=H, num_key_value_heads=H,
                        head_dim=HD, vocab_size=11, intermediate_size=8, block_size=block_size,
                        layer_types=["linear_attention"] * LAYERS, pad_token_id=0)
    hf = MiniMaxLightningAttention(cfg, INDEX).double().eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(0.3 * torch.randn_like(p))
    return hf


def ours(hf, chunk_size=4):
    cfg = model_config(tiny(d_model=D, n_heads=H, head_dim=HD, bias=False,
                            mixer={"name": "lightning", "chunk_size": chunk_size}))
    ctx = LayerContext(index=INDEX, depth=LAYERS, stack="decoder", model_kind="decoder", n_encoder_layers=0,
                       n_decoder_layers=LAYERS, d_model=D)
    mixer = MIXERS.build(cfg.mixer, cfg, ctx).double().eval()
    mixer.load_state_dict(lightning.from_hf_layer(hf))
    return mixer


def hf_forward(hf, x, mask=None, cache=None):
    with torch.no_grad():
        return hf(x, None, mask, cache=cache)[0]


def widen_decays(hf):
    """transformers computes its decay buffers in float32 (``.double()`` widens the rounded values);
    recomputed from its float64 slopes so the float64 comparison is not bounded by them."""
    with torch.no_grad():
        for buffer, value in zip(("query_decay", "key_decay", "diagonal_decay"), hf.decay_factors(hf.slope_rate)):
            getattr(hf, buffer).copy_(value)


def test_the_slopes_are_minimax_s_per_head_and_layer():
    hf = hf_layer()
    assert torch.equal(ours(hf).slopes, hf.slope_rate.flatten())  # both float32 values, widened
    # by hand: ALiBi's 2^(-8/H) powers, shrunk by 1 - index / (layers - 1)
    by_hand = torch.tensor([2 ** (-8 / 3 * (h + 1)) for h in range(H)], dtype=torch.float64) * (1 - 1 / 3)
    torch.testing.assert_close(ours(hf).slopes.double(), by_hand, rtol=1e-4, atol=0)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-7)])
def test_equals_transformers_minimax_lightning_attention_chunked_and_cached(dtype, tol):
    """float64 to 1e-7 only (2e-8 measured): transformers' output RMSNorm computes in float32 whatever
    the dtype. Its chunked path (block_size 4 over 11 positions, ours at chunk 3) on the whole sequence and a
    left-padded row; its cached path: a prefill of 4, a block of 3 (its recurrent loop), single steps."""
    from transformers.models.minimax.modeling_minimax import MiniMaxCache

    hf = hf_layer()
    mixer = ours(hf, chunk_size=3)
    hf, mixer = hf.to(dtype), mixer.to(dtype)
    if dtype == torch.float64:
        widen_decays(hf)
    x, tokens = inputs()
    x = x.to(dtype)
    torch.testing.assert_close(run(mixer, x), hf_forward(hf, x), rtol=0, atol=tol)
    padded = run(mixer, x, tokens)
    torch.testing.assert_close(padded[1, 3:], hf_forward(hf, x[1:, 3:])[0], rtol=0, atol=tol)
    torch.testing.assert_close(padded[tokens], hf_forward(hf, x, tokens.long())[tokens], rtol=0, atol=tol)
    cache, state, got, want = MiniMaxCache(), mixer.new_state(), [], []
    for a, b in ((0, 4), (4, 7), (7, 8), (8, 9), (9, L)):
        got.append(run(mixer, x[:, a:b], None, state))
        want.append(hf_forward(hf, x[:, a:b], None, cache))
        torch.testing.assert_close(state.read("kv").to(dtype), cache.get_linear_cache(INDEX), rtol=0, atol=tol)
    torch.testing.assert_close(torch.cat(got, 1), torch.cat(want, 1), rtol=0, atol=tol)


def test_chunked_gradients_equal_the_one_position_chunks():
    hf = hf_layer()
    assert_chunked_gradients_equal_the_one_position_chunks(lambda name, chunk_size=4: ours(hf, chunk_size),
                                                           "lightning", *inputs())


def test_the_weights_map_back_bit_for_bit():
    hf = hf_layer()
    back = lightning.to_hf_layer(ours(hf), hf)
    assert back.keys() == hf.state_dict().keys()
    assert all(torch.equal(back[k], v) for k, v in hf.state_dict().items())


def test_describe_states_the_state_and_a_step_by_hand():
    """Per layer H head_dim x head_dim numbers whatever the context; a step: the decay (d^2), the write
    and the read (2 d^2 each) per head."""
    cfg = tiny(d_model=D, n_heads=H, head_dim=HD, n_layers=2, mixer={"name": "lightning", "chunk_size": 4})
    model = build_model(cfg, 11)
    mixer = next(m for m in model.modules() if isinstance(m, lightning.LightningAttention)).double()
    for length in (1, L):
        assert mixer.state_elements(length) == H * HD * HD
        assert mixer.step_mixing_flops(length) == 5 * H * HD * HD
        assert mixer.mixing_flops(length, True) == length * 5 * H * HD * HD
        assert_the_state_keeps_alive_what_it_reports(mixer, length, D, H * HD * HD)
    text = describe_text(ExperimentConfig(model=model_config(cfg)), vocab_size=11, seq_len=16)
    line = next(l for l in text.splitlines() if l.startswith("  state bytes (float32)"))
    total = 2 * H * HD * HD * 4  # two layers, float32
    assert line.split()[3:] == [_fmt(total), _fmt(total / 16), "per", "token"], line


def test_heads_of_its_own_size_the_layer_and_its_state():
    """``n_heads`` / ``head_dim`` (null: the model's, MiniMax's): 2 heads of 5 in a model of 3 heads of 6;
    q, k, v, the gate and the output projection are 5 x (2 x 5) x D weights, the norm 10 gains, the state
    2 x 5 x 5, and the slopes are those of 2 heads."""
    cfg = model_config(tiny(d_model=D, n_heads=H, head_dim=HD, bias=False,
                            mixer={"name": "lightning", "chunk_size": 4, "n_heads": 2, "head_dim": 5}))
    mixer = MIXERS.build(cfg.mixer, cfg, None).double()
    assert sum(p.numel() for p in mixer.parameters()) == 5 * 10 * D + 10
    assert torch.equal(mixer.slopes, lightning.slopes(2, 0, 1))
    for length in (1, L):
        assert mixer.state_elements(length) == 2 * 5 * 5
        assert_the_state_keeps_alive_what_it_reports(mixer, length, D, 2 * 5 * 5)
    assert_a_prefill_then_steps_equal_one_full_forward(mixer, *inputs())
