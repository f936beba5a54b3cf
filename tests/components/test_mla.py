"""Multi-head latent attention against a float64 loop written from the DeepSeek-V2 equations, its
latent decoding state, the absorbed decode against the plain one, and its bad options."""
import math

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.components.masks import AttentionMask
from arch_zoo.components.mixers import MIXERS, MixerInputs
from arch_zoo.components.positions import POSITIONS, PositionContext
from arch_zoo.config.loading import model_config
from arch_zoo.generation.api import generate
from arch_zoo.models import build_model
from arch_zoo.testing import check_component
from tests.conftest import tiny

D, H, L = 16, 2, 7
RANKS = {"kv_lora_rank": 6, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 3}


def build(q_lora_rank):
    cfg = model_config({"d_model": D, "n_heads": H, "n_layers": 1, "norm": "rmsnorm", "position": "rope",
                        "mixer": {"name": "mla", "q_lora_rank": q_lora_rank, **RANKS}})
    mixer = MIXERS.build(cfg.mixer, cfg, None).double().eval()
    with torch.no_grad():  # norm gains and biases off their init too: their wiring is tested
        for p in mixer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    scheme = POSITIONS.build(cfg.position, PositionContext(D, H, RANKS["qk_rope_head_dim"], 32, True)).double()
    return cfg, mixer, scheme


def rms(x, norm):
    return x / torch.sqrt((x * x).mean() + norm.eps) * norm.weight


def rope(x, t, base=10000.0):
    """Su et al.: the halves (x_i, x_{i + d/2}) turned by t * base^(-2i/d)."""
    half = x.shape[-1] // 2
    out = x.clone()
    for i in range(half):
        a = t * base ** (-2 * i / x.shape[-1])
        out[i] = x[i] * math.cos(a) - x[i + half] * math.sin(a)
        out[i + half] = x[i + half] * math.cos(a) + x[i] * math.sin(a)
    return out


def mla_loop(m, x, probs=None):
    """DeepSeek-V2 sec. 2.1, one row, position by position: c_t = norm(W_DKV x_t), k_t^h = [W_UK^h c_t,
    RoPE(W_KR x_t)], v_t^h = W_UV^h c_t, q_t^h = [W_UQ^h c'_t, RoPE(W_QR^h c'_t)] with c'_t the query latent."""
    nope, rope_d, dv, r = RANKS["qk_nope_head_dim"], RANKS["qk_rope_head_dim"], RANKS["v_head_dim"], RANKS["kv_lora_rank"]
    w_kb = m.kv_b.weight.view(H, nope + dv, r)
    keys, values, outs = [], [], []
    for t in range(len(x)):
        a = m.kv_a.weight @ x[t] + m.kv_a.bias
        c, k_rope = rms(a[:r], m.kv_norm), rope(a[r:], t)
        keys.append([torch.cat((w_kb[h, :nope] @ c, k_rope)) for h in range(H)])
        values.append([w_kb[h, nope:] @ c for h in range(H)])
        q_in = x[t] if not hasattr(m, "q_a") else rms(m.q_a.weight @ x[t] + m.q_a.bias, m.q_norm)
        q_w = m.q_proj.weight if hasattr(m, "q_proj") else m.q_b.weight
        q = (q_w @ q_in).view(H, nope + rope_d)
        heads = []
        for h in range(H):
            qh = torch.cat((q[h, :nope], rope(q[h, nope:], t)))
            s = torch.stack([qh @ keys[j][h] for j in range(t + 1)]) / math.sqrt(nope + rope_d)
            p = torch.softmax(s, 0)
            if probs is not None:
                probs.append(p)
            heads.append(sum(p[j] * values[j][h] for j in range(t + 1)))
        outs.append(m.out.weight @ torch.cat(heads) + m.out.bias)
    return torch.stack(outs)


@pytest.mark.parametrize("q_lora_rank", [None, 5])
@pytest.mark.parametrize("kernel", ["sdpa", "explicit"])
def test_mla_matches_a_float64_loop_of_the_paper_s_equations(q_lora_rank, kernel):
    cfg, mixer, scheme = build(q_lora_rank)
    from arch_zoo.components.attention import KERNELS
    mixer.backend = KERNELS.build(model_config({"attention_kernel": kernel}).attention_kernel, mixer.backend.scale, None)
    x = torch.randn(2, L, D, dtype=torch.float64)
    pos = torch.arange(L).unsqueeze(0)
    inputs = MixerInputs(AttentionMask(None, True, None), scheme.rotator(pos, pos))
    got = mixer(x, inputs)
    for b in range(2):
        # float64 but for the rotary tables, which the scheme keeps in float32
        torch.testing.assert_close(got[b], mla_loop(mixer, x[b]), atol=1e-6, rtol=0)


def test_mla_state_holds_the_latent_and_the_rope_key_only():
    cfg, mixer, scheme = build(None)
    x = torch.randn(1, L, D, dtype=torch.float64)
    pos = torch.arange(L).unsqueeze(0)
    state = mixer.new_state()
    mixer(x, MixerInputs(AttentionMask(None, True, None), scheme.rotator(pos, pos)), state)
    r, rope_d = RANKS["kv_lora_rank"], RANKS["qk_rope_head_dim"]
    assert [tuple(t.shape[:2]) + tuple(t.shape[-1:]) for t in (state.k, state.v)] == [(1, 1, r), (1, 1, rope_d)]
    a = mixer.kv_a(x[0])
    torch.testing.assert_close(state.k[0, 0], torch.stack([rms(row[:r], mixer.kv_norm) for row in a]))
    torch.testing.assert_close(state.v[0, 0, 3], rope(a[3, r:], 3))
    assert mixer.state_elements(L) == (r + rope_d) * L


@pytest.mark.parametrize("attention", ["global", {"name": "sliding_window", "window": 3}])
def test_absorbed_decoding_gives_the_plain_decoding_s_tokens_and_logits(attention):
    cfg = tiny(d_model=32, n_heads=4, position="rope", norm="rmsnorm", attention=attention,
               mixer={"name": "mla", "q_lora_rank": 12, **RANKS})
    # float64: the two forms round differently, and the comparison is of the algebra
    plain = build_model(cfg, 40).double().eval()
    absorbed = build_model({**cfg, "mixer": {**cfg["mixer"], "absorb": True}}, 40).double().eval()
    absorbed.load_state_dict(plain.state_dict())
    with torch.no_grad():
        plain.head.proj.weight.mul_(8.0)  # (tied or not, the same scaled head in both)
        absorbed.head.proj.weight.copy_(plain.head.proj.weight)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13]]
    a = generate(plain, prompts, max_new_tokens=8, return_logits=True)
    b = generate(absorbed, prompts, max_new_tokens=8, return_logits=True)
    assert torch.equal(a.tokens, b.tokens)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-9, rtol=0)


def test_absorbed_mla_keeps_every_invariant():
    assert "cache_parity [decoder]" in check_component("mixers", "mla", {**RANKS, "absorb": True}, position="rope")


@pytest.mark.parametrize("override,expected", [
    ("model.mixer.qk_rope_head_dim=3", "model.mixer.qk_rope_head_dim: must be even (RoPE rotates pairs), got 3"),
    ("model.mixer.kv_lora_rank=0", "model.mixer.kv_lora_rank: must be a positive integer, got 0"),
    ("model.mixer.q_lora_rank=-4", "model.mixer.q_lora_rank: must be a positive integer, got -4"),
    ("model.mixer.v_head_dim=0", "model.mixer.v_head_dim: must be a positive integer, got 0"),
    ("model.head_dim=6", "model.mixer.qk_rope_head_dim: must be even (RoPE rotates pairs); null takes head_dim / 2 = 3"),
    ("model.qk_norm=rmsnorm", "model.qk_norm: mla normalises its latents"),
])
def test_mla_ranks_that_do_not_fit_are_one_line_errors(override, expected, capsys):
    code = main(["describe", "preset:llama-tiny", "model.mixer=mla", *override.split(" ")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err, err


@pytest.mark.parametrize("q_lora_rank", [None, 12])
@pytest.mark.parametrize("interleaved", [True, False])
def test_mla_equals_transformers_deepseek_v3_attention(q_lora_rank, interleaved):
    """DeepseekV3Attention's pure-torch code (eager), a random tiny config, nothing downloaded: the
    layer's output to 1e-5 on the same weights and positions."""
    from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

    hf_cfg = DeepseekV3Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=q_lora_rank,
                              rope_interleave=interleaved, attention_bias=True, max_position_embeddings=32,
                              rms_norm_eps=1e-6, **RANKS)
    hf_cfg._attn_implementation = "eager"
    ref = DeepseekV3Attention(hf_cfg, layer_idx=0).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    cfg = model_config({"d_model": 32, "n_heads": 4, "n_layers": 1, "norm": "rmsnorm",
                        "position": {"name": "rope", "interleaved": interleaved},
                        "mixer": {"name": "mla", "q_lora_rank": q_lora_rank, **RANKS}})
    ours = MIXERS.build(cfg.mixer, cfg, None).eval()
    names = {"q_proj": "q_proj", "q_a": "q_a_proj", "q_norm": "q_a_layernorm", "q_b": "q_b_proj",
             "kv_a": "kv_a_proj_with_mqa", "kv_norm": "kv_a_layernorm", "kv_b": "kv_b_proj", "out": "o_proj"}
    state = {k: v for k, v in ref.state_dict().items()}
    ours.load_state_dict({ours_name + key[len(hf_name):]: state[key] for ours_name, hf_name in names.items()
                          for key in state if key.split(".")[0] == hf_name})
    x = torch.randn(2, L, 32)
    pos = torch.arange(L).unsqueeze(0)
    cos_sin = DeepseekV3RotaryEmbedding(hf_cfg)(x, pos)
    causal = torch.full((L, L), float("-inf")).triu(1).view(1, 1, L, L)
    want, _ = ref(x, cos_sin, causal)
    scheme = POSITIONS.build(cfg.position, PositionContext(32, 4, RANKS["qk_rope_head_dim"], 32, True))
    got = ours(x, MixerInputs(AttentionMask(None, True, None), scheme.rotator(pos, pos)))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("absorb", [False, True])
def test_attention_diagnostics_read_mla_s_scores(absorb):
    """Entropy and first-token mass of an MLA layer equal the float64 loop's softmax weights; the
    absorbed form (used while decoding) scores the same."""
    from arch_zoo.components.attention_diagnostics import AttentionRecorder

    cfg = tiny(d_model=D, n_heads=H, position="rope", norm="rmsnorm", attention_kernel="explicit",
               mixer={"name": "mla", "absorb": absorb, **RANKS})
    model = build_model(cfg, 20).double().eval()
    mixer = model.decoder.layers[0].mixer.sublayer
    with torch.no_grad():
        for p in mixer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    xs = []
    hook = mixer.register_forward_pre_hook(lambda mod, args: xs.append(args[0]))
    ids = torch.randint(1, 20, (1, L))
    rec = AttentionRecorder(model)
    with torch.no_grad(), rec.recording({"decoder": None}):
        model(ids, cache=model.new_cache())  # a cached pass: the absorbed form runs where asked
    hook.remove()
    probs = []
    with torch.no_grad():
        mla_loop(mixer, xs[0][0], probs)
    got = rec.results()
    entropy = sum(float(-(p * p.log()).sum()) for p in probs) / len(probs)
    assert got["attn_entropy/layer_0"] == pytest.approx(entropy, rel=1e-5)
    assert got["attn_first_token/layer_0"] == pytest.approx(sum(float(p[0]) for p in probs) / len(probs), rel=1e-5)



@pytest.mark.parametrize("mup", [False, True])
def test_describe_prints_the_attention_scale_mla_applies(mup, capsys):
    """deepseek-v3-tiny's q.k sums over qk_nope_head_dim + qk_rope_head_dim = 12 + 8, not head_dim
    (16): describe prints the scale its layers' kernel holds, 1/sqrt(20), or µP's 1/20."""
    from arch_zoo.experiment import load

    overrides = ['model.parametrization={"name":"mup","base_width":32}'] if mup else []
    model = build_model(load("preset:deepseek-v3-tiny", overrides).model, 20)
    scale = model.decoder.layers[0].mixer.sublayer.backend.scale
    assert scale == pytest.approx(1 / 20 if mup else 20 ** -0.5)
    assert main(["describe", "preset:deepseek-v3-tiny", *overrides, "--vocab-size", "20"]) == 0
    out = capsys.readouterr().out
    if mup:
        assert f"q.k scaled by {scale:g} (the parametrization's, mup)" in out
    else:
        assert "q.k scaled by 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) = 1/sqrt(20)\n" in out
