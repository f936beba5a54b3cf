"""QK-norm: over each head's q and k (Qwen3) or over the whole q and k projections (OLMo 2), before
positions rotate them; against hand-written norms and Hugging Face's Olmo2Attention."""
import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.components.attention import AttentionShape
from arch_zoo.components.masks import self_attention_mask
from arch_zoo.components.positions import POSITIONS, PositionContext
from tests.components.test_attention_variants import D, H, HD, _mha, _reference, _rope

@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_qk_norm_normalises_each_heads_q_and_k_before_rope(norm):
    """README model keys: `qk_norm` — a norm over each head's q and k, before RoPE (Qwen3).
    The norms' gains are random, so normalising after the rotation would give other numbers."""
    torch.manual_seed(0)
    attn = _mha("sdpa", qk_norm=norm)
    with torch.no_grad():
        for n in (attn.q_norm, attn.k_norm):
            n.weight.uniform_(0.5, 2.0)
    assert attn.q_norm.weight.shape == (HD,)  # one gain per head dimension, shared by the heads
    x = torch.randn(2, 6, D)
    rotate = _rope(6)
    out = attn(x, self_attention_mask(None, 6, 0, True), rotate)
    torch.testing.assert_close(out, _reference(attn, x, lambda i, j: j <= i, rotate=rotate), atol=1e-5, rtol=1e-5)
    q = attn.qkv(x)[..., :H * HD].unflatten(-1, (H, HD))
    manual = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) if norm == "rmsnorm" else \
        (q - q.mean(-1, keepdim=True)) / torch.sqrt(q.var(-1, unbiased=False, keepdim=True) + 1e-5)
    torch.testing.assert_close(attn.q_norm(q), manual * attn.q_norm.weight, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("scope", ["head", "projection"])
def test_qk_norm_scope_is_each_head_or_the_whole_projection(scope):
    """`qk_norm_scope: projection` normalises all heads' q (and k) at once, one gain per channel (OLMo 2);
    `head` each head's own (Qwen3). Against the hand-written RMS norm of each, with random gains."""
    torch.manual_seed(0)
    attn = _mha("sdpa", qk_norm="rmsnorm", qk_norm_scope=scope)
    with torch.no_grad():
        for n in (attn.q_norm, attn.k_norm):
            n.weight.uniform_(0.5, 2.0)
    assert attn.q_norm.weight.shape == ((H * HD,) if scope == "projection" else (HD,))
    x = torch.randn(2, 6, D) * torch.tensor([0.2, 3.0]).repeat_interleave(D // 2)  # heads of unequal size
    rotate = _rope(6)
    out = attn(x, self_attention_mask(None, 6, 0, True), rotate)
    torch.testing.assert_close(out, _reference(attn, x, lambda i, j: j <= i, rotate=rotate, qk_rms_over=scope),
                               atol=1e-5, rtol=1e-5)
    if scope == "projection":  # per head, the same gains give other numbers
        gains = [n.weight.view(H, HD) for n in (attn.q_norm, attn.k_norm)]
        assert not torch.allclose(out, _per_head_with(attn, gains, x, rotate), atol=1e-3)


def _per_head_with(attn, gains, x, rotate):
    """``attn`` with its q/k gains (H, HD) applied after a per-head RMS norm instead."""
    q, k, v = attn.qkv(x).split(H * HD, dim=-1)
    q, k, v = (t.unflatten(-1, (H, HD)).transpose(1, 2) for t in (q, k, v))
    q, k = (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * g[:, None] for t, g in zip((q, k), gains))
    q, k = rotate(q, k)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return attn.out(out.transpose(1, 2).flatten(2))


def test_qk_norm_over_the_projection_equals_hugging_face_olmo2_attention():
    """`qk_norm: rmsnorm, qk_norm_scope: projection` is OLMo 2's QK-norm: transformers' Olmo2Attention
    (grouped kv heads, so k's norm is narrower than q's; RoPE; causal) gives the same output."""
    olmo2 = pytest.importorskip("transformers.models.olmo2.modeling_olmo2")
    from transformers import Olmo2Config

    heads, kv_heads, dim = 4, 2, 8
    config = Olmo2Config(hidden_size=D, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=dim)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = olmo2.Olmo2Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        for n in (ref.q_norm, ref.k_norm):
            n.weight.uniform_(0.5, 2.0)
    attn = _mha("sdpa", qk_norm={"name": "rmsnorm", "eps": config.rms_norm_eps}, qk_norm_scope="projection",
                shape=AttentionShape(D, heads, kv_heads, dim, False, 0.0))
    attn.load_state_dict({"qkv.weight": torch.cat([ref.q_proj.weight, ref.k_proj.weight, ref.v_proj.weight]),
                          "out.weight": ref.o_proj.weight, "q_norm.weight": ref.q_norm.weight,
                          "k_norm.weight": ref.k_norm.weight})
    x = torch.randn(2, 7, D)
    pos = torch.arange(7).unsqueeze(0)
    rope = POSITIONS.build(POSITIONS.parse({"name": "rope", "base": config.rope_parameters["rope_theta"]}, "p"),
                           PositionContext(D, heads, dim, 64, True))
    causal = torch.full((7, 7), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        expected, _ = ref(x, olmo2.Olmo2RotaryEmbedding(config)(x, pos), causal)
        out = attn(x, self_attention_mask(None, 7, 0, True), rope.rotator(pos, pos))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_describe_says_what_the_qk_norm_normalises(capsys):
    for scope, words in (("head", "qk-norm rmsnorm(eps=1e-06) per head"),
                         ("projection", "qk-norm rmsnorm(eps=1e-06) over the whole q and k projections")):
        assert main(["describe", "preset:llama-tiny", "model.qk_norm=rmsnorm", f"model.qk_norm_scope={scope}",
                     "--vocab-size", "50"]) == 0
        assert words in capsys.readouterr().out
