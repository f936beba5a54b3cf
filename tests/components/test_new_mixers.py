"""Kimi Delta Attention (``kda``), RWKV-7 (``rwkv7``) and Gated DeltaProduct (``gated_deltaproduct``): KDA
equals transformers' own Kimi Linear layer on its weights (and maps back to them); each equals a
float64 loop of its paper's recurrence written here, step by step (with a left-padded row, at every
chunk size that matters); Gated DeltaProduct with one step is Gated DeltaNet; each decodes after a
prefill at every split as one full forward does, keeps alive the bytes it reports, generates the same
greedy tokens cached and uncached inside a hybrid, and refuses a bad option in one line."""
import math
import re

import pytest
import torch
import torch.nn.functional as F
import yaml

from arch_zoo import testing
from arch_zoo.cli import main
from arch_zoo.components.mixers import MIXERS, kda
from arch_zoo.config.loading import model_config
from arch_zoo.errors import ConfigError
from arch_zoo.generation import generate
from arch_zoo.models import build_model
from arch_zoo.models.flops import decoding_state_bytes
from tests.conftest import tiny

from .mixer_checks import (D, L, assert_a_prefill_then_steps_equal_one_full_forward,
                           assert_chunked_gradients_equal_the_one_position_chunks,
                           assert_the_state_keeps_alive_what_it_reports, inputs, randomised, run)
from .test_mixers_numerics import conv_loop

NAMES = ["kda", "rwkv7", "gated_deltaproduct"]
OPTIONS = {"kda": {"n_heads": 3, "head_dim": 5, "conv_size": 3, "chunk_size": 4},
           "rwkv7": {"n_heads": 3, "head_dim": 5, "decay_rank": 3, "icl_rank": 2, "gate_rank": 4, "chunk_size": 4},
           "gated_deltaproduct": {"n_heads": 2, "n_v_heads": 4, "head_dim": 3, "v_head_dim": 5, "conv_size": 3,
                                  "chunk_size": 4, "n_householder": 3}}


def build(name, **options):
    return randomised(model_config(tiny(d_model=D, n_heads=1, bias=False,
                                        mixer={"name": name, **OPTIONS[name], **options})))


# ---- transformers' Kimi Linear layer

def hf_kda():
    from transformers import KimiLinearConfig
    from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention

    cfg = KimiLinearConfig(hidden_size=D, num_hidden_layers=1, vocab_size=11, intermediate_size=16,
                           num_attention_heads=1, num_key_value_heads=1, pad_token_id=0, bos_token_id=1,
                           eos_token_id=2, linear_attn_config={"num_heads": 3, "head_dim": 5, "kda_layers": [1],
                                                               "short_conv_kernel_size": 3, "full_attn_layers": []})
    hf = KimiLinearDeltaAttention(cfg, 0).double().eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(0.3 * torch.randn_like(p))
    return hf


def test_kda_equals_transformers_kimi_linear_delta_attention():
    """transformers runs the recurrence in float32 even in float64: 1e-5. Its chunked path (the prompt)
    and its recurrent path (a cached step) both; and the weights map back bit for bit."""
    from transformers.models.kimi_linear.modeling_kimi_linear import recurrent_kimi_delta_attention

    hf = hf_kda()
    mixer = build("kda")
    mixer.load_state_dict(kda.from_hf_layer(hf))
    x, tokens = inputs()
    with torch.no_grad():
        torch.testing.assert_close(run(mixer, x), hf(x), rtol=0, atol=1e-5)
        # a left-padded row's real positions: what transformers gives the row alone
        torch.testing.assert_close(run(mixer, x, tokens)[1, 3:], hf(x[1:, 3:])[0], rtol=0, atol=1e-5)
        q, k, v, g, beta = (torch.randn(2, 1, 3, 5, dtype=torch.float64) for _ in range(5))
        S = torch.randn(2, 3, 5, 5, dtype=torch.float64)
        want, want_S = recurrent_kimi_delta_attention(q, k, v, g=-g.abs(), beta=beta[..., 0].sigmoid(), initial_state=S,
                                                      output_final_state=True, use_qk_l2norm_in_kernel=True)
        # in float32 both ways: the same to 1e-5
        torch.testing.assert_close(run(mixer.float(), x.float()), hf.float()(x.float()), rtol=0, atol=1e-5)
    back = kda.to_hf_layer(mixer.double())
    hf.double()
    assert back.keys() == hf.state_dict().keys()
    assert all(torch.equal(back[k], v) for k, v in hf.state_dict().items())
    # transformers' decoding step = this module's step form on the same q, k, v, g, b
    from arch_zoo.components.mixers.dplr import dplr_step
    qn, kn = (kda.unit(t.transpose(1, 2), "rsqrt") for t in (q, k))
    b, gg = beta[..., 0].sigmoid().transpose(1, 2).unsqueeze(-1), -g.abs().transpose(1, 2)
    got, got_S = dplr_step(qn / math.sqrt(5), b * kn, v.transpose(1, 2), -b * kn, gg.exp() * kn, gg, S)
    torch.testing.assert_close(got.transpose(1, 2), want, rtol=0, atol=1e-5)
    torch.testing.assert_close(got_S, want_S.double(), rtol=0, atol=1e-5)


# ---- float64 loops of the papers' recurrences, one row, padding skipped

def kda_loop(m, x, keep):
    """Kimi Linear: S = (I - b k k^T) diag(alpha) S + b k v^T per head, alpha = exp(-exp(A_log) softplus(f)),
    o = S^T q; RMSNorm(o) * w * sigmoid(gate), o_proj."""
    H, dk = m.h, m.dk
    unit = lambda u: u / torch.sqrt((u * u).sum(-1, keepdim=True) + 1e-6)  # noqa: E731  (Kimi Linear's L2 norm)
    qkv = conv_loop(m.conv, [torch.cat((m.q_proj(x[t]), m.k_proj(x[t]), m.v_proj(x[t]))) for t in range(len(x))], keep)
    S, out = torch.zeros(H, dk, dk, dtype=x.dtype), []
    for t in range(len(x)):
        q, k, v = (u.view(H, dk) for u in qkv[t].chunk(3))
        q, k = unit(q) / math.sqrt(dk), unit(k)
        alpha = torch.exp(-m.A_log.exp()[:, None] * F.softplus(m.f_b_proj(m.f_a_proj(x[t])) + m.dt_bias).view(H, dk))
        b = torch.sigmoid(m.b_proj(x[t]))
        o = []
        for h in range(H):
            if keep[t]:
                S[h] = (torch.eye(dk, dtype=x.dtype) - b[h] * torch.outer(k[h], k[h])) @ torch.diag(alpha[h]) @ S[h] \
                    + b[h] * torch.outer(k[h], v[h])
            o.append(S[h].T @ q[h])
        o = torch.stack(o)
        gate = torch.sigmoid(m.g_b_proj(m.g_a_proj(x[t])).view(H, dk))
        normed = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + m.o_norm.eps) * m.o_norm.weight * gate
        out.append(m.out(normed.flatten()))
    return torch.stack(out)


def rwkv7_loop(m, x, keep):
    """Peng et al. 2025, the time mixing of RWKV-7 (no value residual): x_c = x + mu_c (x_{t-1} - x);
    w = exp(-e^-0.5 sigmoid(w0 + tanh(x_w A) B)), a = sigmoid(a0 + x_a A B), g = sigmoid(x_g A) B;
    kappa = normalise(k xi), k~ = k (1 + (a - 1) alpha); wkv = wkv (diag(w) - kappa^T (a kappa)) + v^T k~,
    o = wkv r; group norm per head, + (r k~ rho).sum() v, times g, out."""
    H, dk = m.h, m.dk
    wkv = torch.zeros(H, dk, dk, dtype=x.dtype)  # rows: value channels, columns: key channels
    prev, out = torch.zeros(D, dtype=x.dtype), []
    for t in range(len(x)):
        xt = x[t] * keep[t]
        xr, xw, xk, xv, xa, xg = (xt + mu * (prev - xt) for mu in m.mu)
        prev = xt
        r, k, v = m.r_proj(xr).view(H, dk), m.k_proj(xk).view(H, dk), m.v_proj(xv).view(H, dk)
        w = torch.exp(-math.exp(-0.5) * torch.sigmoid(m.w_lora[1](torch.tanh(m.w_lora[0](xw))))).view(H, dk)
        a = torch.sigmoid(m.a_lora(xa)).view(H, dk)
        g = m.g_lora[1](torch.sigmoid(m.g_lora[0](xg)))
        kappa = F.normalize(k * m.k_k.view(H, dk), dim=-1)
        k = k * (1 + (a - 1) * m.k_a.view(H, dk))
        heads = []
        for h in range(H):
            if keep[t]:
                transition = torch.diag(w[h]) - torch.outer(kappa[h], a[h] * kappa[h])
                wkv[h] = wkv[h] @ transition + torch.outer(v[h], k[h])
            o = wkv[h] @ r[h]
            o = (o - o.mean()) / torch.sqrt(o.var(unbiased=False) + m.ln_x.eps)
            o = o * m.ln_x.weight.view(H, dk)[h] + m.ln_x.bias.view(H, dk)[h]
            heads.append(o + (r[h] * k[h] * m.r_k[h]).sum() * v[h])
        out.append(m.out(torch.cat(heads) * g))
    return torch.stack(out)


def gated_deltaproduct_loop(m, x, keep):
    """Siems et al. 2025: per token S = exp(g) S, then for j = 1..n: S = (I - b_j k_j k_j^T) S + b_j k_j v_j^T;
    o = S^T q (q, k_j L2-normalised, q / sqrt(dk)); gated RMSNorm per value head, out."""
    n, H, Hv, dk, dv = m.n, m.h, m.hv, m.dk, m.dv
    key, value = H * dk, Hv * dv
    proj = [m.in_proj(x[t]) for t in range(len(x))]
    conv = conv_loop(m.conv, [p[:(1 + n) * key + n * value] for p in proj], keep)
    S, out = torch.zeros(Hv, dk, dv, dtype=x.dtype), []
    for t in range(len(x)):
        q, ks, vs = conv[t].split((key, n * key, n * value))
        q = F.normalize(q.view(H, dk), dim=-1, eps=1e-6).repeat_interleave(Hv // H, 0) / math.sqrt(dk)
        ks = F.normalize(ks.view(n, H, dk), dim=-1, eps=1e-6).repeat_interleave(Hv // H, 1)
        vs = vs.view(n, Hv, dv)
        ba = m.ba_proj(x[t])
        b = torch.sigmoid(ba[:n * Hv]).view(n, Hv)
        decay = torch.exp(-m.A_log.exp() * F.softplus(ba[n * Hv:] + m.dt_bias))
        o = []
        for h in range(Hv):
            if keep[t]:
                S[h] = decay[h] * S[h]
                for j in range(n):
                    k = ks[j, h]
                    S[h] = (torch.eye(dk, dtype=x.dtype) - b[j, h] * torch.outer(k, k)) @ S[h] \
                        + b[j, h] * torch.outer(k, vs[j, h])
            o.append(S[h].T @ q[h])
        o, z = torch.stack(o), proj[t][(1 + n) * key + n * value:].view(Hv, dv)
        normed = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + m.norm.eps) * m.norm.weight * F.silu(z)
        out.append(m.out(normed.flatten()))
    return torch.stack(out)


LOOPS = {"kda": kda_loop, "rwkv7": rwkv7_loop, "gated_deltaproduct": gated_deltaproduct_loop}


@pytest.mark.parametrize("name", NAMES)
def test_the_chunked_form_equals_a_float64_loop_of_the_papers_recurrence(name):
    x, tokens = inputs()
    for chunk in (1, 2, 3, L):
        mixer = build(name, chunk_size=chunk)
        with torch.no_grad():
            want = torch.stack([LOOPS[name](mixer, x[b], tokens[b].double()) for b in range(2)])
        got = run(mixer, x, tokens)
        torch.testing.assert_close(got[tokens], want[tokens], rtol=0, atol=1e-10, msg=f"chunk {chunk}")


def test_gated_deltaproduct_with_one_step_is_gated_deltanet_weight_for_weight():
    options = {k: v for k, v in OPTIONS["gated_deltaproduct"].items() if k != "n_householder"}
    product = build("gated_deltaproduct", n_householder=1)
    cfg = model_config(tiny(d_model=D, n_heads=1, bias=False, mixer={"name": "gated_deltanet", **options}))
    net = MIXERS.build(cfg.mixer, cfg, None).double().eval()
    net.load_state_dict(product.state_dict())  # the same parameters, the same shapes
    x, tokens = inputs()
    assert torch.equal(run(product, x, tokens), run(net, x, tokens))
    assert build("gated_deltaproduct").in_proj.out_features == 2 * 3 + 3 * 2 * 3 + 3 * 4 * 5 + 4 * 5  # q, 3 k, 3 v, z


@pytest.mark.parametrize("name", ["kda", "rwkv7"])
def test_chunked_gradients_equal_the_one_position_chunks(name):
    assert_chunked_gradients_equal_the_one_position_chunks(build, name, *inputs())


@pytest.mark.parametrize("name", NAMES)
def test_a_prefill_then_steps_equal_one_full_forward_at_every_split(name):
    mixer = build(name)
    assert_a_prefill_then_steps_equal_one_full_forward(mixer, *inputs())


# what each state holds and one step costs, by hand (2 FLOPs a multiply-add)
COUNTS = {
    # 3 heads of 5 x 5; the conv's last 2 of 3 x 15 channels; the conv (3 taps) and 7 Dk^2 per head
    "kda": (3 * 25 + 45 * 2, 2 * 45 * 3 + 7 * 3 * 25),
    # 3 heads of 5 x 5 and the last input (13); 9 Dk^2 per head and the six token-shift mixes
    "rwkv7": (3 * 25 + D, 9 * 3 * 25 + 2 * 6 * D),
    # 4 value heads of 3 x 5; the conv over q, 3 k (6 wide each), 3 v (20 wide each): 84 channels, 2 kept;
    # per head a decay and the first step (7 Dk Dv), then two more steps (4 Dk Dv each)
    "gated_deltaproduct": (4 * 15 + 84 * 2, 2 * 84 * 3 + (7 + 2 * 4) * 4 * 15),
}


@pytest.mark.parametrize("name", NAMES)
def test_state_bytes_and_flops_are_hand_counts_and_the_bytes_kept_alive(name):
    mixer = build(name)
    elements, per_token = COUNTS[name]
    for length in (1, L):
        assert mixer.state_elements(length) == elements
        assert mixer.step_mixing_flops(length) == per_token and mixer.mixing_flops(length, True) == length * per_token
        assert_the_state_keeps_alive_what_it_reports(mixer, length, D, elements)
    model = build_model(tiny(d_model=D, n_layers=2, n_heads=1, mixer={"name": name, **OPTIONS[name]}), 11)
    assert decoding_state_bytes(model, 9) == 2 * 4 * elements  # two layers, float32


@pytest.mark.parametrize("name", NAMES)
def test_a_hybrid_generates_the_same_greedy_tokens_cached_and_uncached(name):
    torch.manual_seed(0)
    cfg = tiny(d_model=D, n_layers=2, n_heads=1, layers=[{"pattern": [{"mixer": {"name": name, **OPTIONS[name]}}, {}]}])
    model = build_model(cfg, 11).eval()
    prompts = torch.randint(0, 11, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, :2] = 0  # a left-padded prompt
    cached = generate(model, prompts, mask, max_new_tokens=6).tokens
    uncached = generate(model, prompts, mask, max_new_tokens=6, use_cache=False).tokens
    assert cached.shape == (2, 1, 6) and torch.equal(cached, uncached)
    assert type(model.decoder.layers[0].mixer.sublayer).__module__.endswith(name)


@pytest.mark.parametrize("name", NAMES)
def test_the_invariant_grid_passes(name):
    ran = testing.check_component("mixers", name)
    assert {"cache_parity [decoder]", "padding_invariance (left) [decoder]", "trains [decoder]"} <= set(ran)


@pytest.mark.parametrize("name, option, message", [
    ("kda", {"l2norm": "max"}, r"model\.mixer\.l2norm: unknown value 'max'; choices: clamp, rsqrt"),
    ("rwkv7", {"decay_rank": 0}, r"model\.mixer.*decay_rank must be positive, got 0"),
    ("gated_deltaproduct", {"n_householder": 0}, r"model\.mixer.*n_householder must be positive, got 0"),
])
def test_a_bad_option_is_one_line_naming_it_and_exit_2(name, option, message, tmp_path, capsys):
    with pytest.raises(ConfigError, match=message):
        model_config(tiny(mixer={"name": name, **option}))
    with pytest.raises(ConfigError, match=f"mixer '{name}' cannot serve a bidirectional encoder"):
        model_config(tiny(kind="encoder", mixer=name))
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tiny(mixer={"name": name, **option})))
    assert main(["describe", str(path), "--vocab-size", "11"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("arch-zoo: error: ") and re.search(message, err)


@pytest.mark.parametrize("chunk", [1, 3, 4, L])
def test_dplr_scans_factored_form_under_rwkv7s_decay_floor_equals_the_recurrent_form(chunk):
    """RWKV-7's log-decay is bounded (>= LOG_DECAY_FLOOR), so ``dplr_scan`` given that floor runs its pairwise
    sums as matmuls (exp(G_t - G_s) split in two); its outputs, final state and gradients equal the
    position-by-position form's (float64), as the unbounded form's do (KDA's path)."""
    from arch_zoo.components.mixers.dplr import dplr_scan, dplr_step
    from arch_zoo.components.mixers.rwkv7 import LOG_DECAY_FLOOR

    B, H, Dk, Dv = 2, 3, 4, 5
    q, k, a, b = (torch.randn(B, H, L, Dk, dtype=torch.float64) for _ in range(4))
    b = F.normalize(b, dim=-1)
    a = -torch.rand(B, H, L, Dk, dtype=torch.float64) * b
    g = LOG_DECAY_FLOOR * torch.rand(B, H, L, Dk, dtype=torch.float64)
    g[..., 2, :] = LOG_DECAY_FLOOR  # the floor itself
    v, S0 = torch.randn(B, H, L, Dv, dtype=torch.float64), torch.randn(B, H, Dk, Dv, dtype=torch.float64)
    weights = torch.randn(B, H, L, Dv, dtype=torch.float64), torch.randn(B, H, Dk, Dv, dtype=torch.float64)

    def run(fn, **kw):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v, a, b, g, S0)]
        out, S = fn(*leaves, **kw)
        ((out * weights[0]).sum() + (S * weights[1]).sum()).backward()
        return [out, S] + [t.grad for t in leaves]

    want = run(dplr_step)
    for kw in ({"decay_floor": LOG_DECAY_FLOOR}, {}):
        for got, w in zip(run(dplr_scan, chunk=chunk, **kw), want):
            torch.testing.assert_close(got, w, rtol=1e-9, atol=1e-10)
