"""The mixers of the 2025-26 hybrids (LFM2's ``short_conv``, Griffin's ``rg_lru``, xLSTM's ``mlstm``): each equals
transformers' own module for the layer on its weights (and maps back to them), equals a float64 loop
of its paper's recurrence written here (with a left-padded row), decodes after a prefill at every split
point as one full forward does, keeps alive the bytes it reports, and passes the invariant grid."""
import math

import pytest
import torch
import torch.nn.functional as F

from arch_zoo import testing
from arch_zoo.components.masks import AttentionMask
from arch_zoo.components.mixers import MixerInputs, mlstm, rg_lru, short_conv
from arch_zoo.config.loading import model_config
from arch_zoo.errors import ConfigError
from arch_zoo.models import build_model
from arch_zoo.models.flops import decoding_state_bytes
from tests.conftest import tiny

from .mixer_checks import (D, L, assert_a_prefill_then_steps_equal_one_full_forward,
                           assert_chunked_gradients_equal_the_one_position_chunks,
                           assert_the_state_keeps_alive_what_it_reports, inputs, randomised, run)
from .test_mixers_numerics import conv_loop

NAMES = ["short_conv", "rg_lru", "mlstm"]
OPTIONS = {"short_conv": {"conv_size": 4, "bias": True}, "rg_lru": {"width": 15, "n_heads": 3, "conv_size": 3,
                                                                   "chunk_size": 4},
           "mlstm": {"n_heads": 3, "chunk_size": 4, "bias": True, "gate_soft_cap": 2.0}}
WIDTH = {"mlstm": 18}  # 3 heads: q, k 3 wide, v 6 wide (a capped gate: the cap's wiring shows)


def build(name, n_heads=1, **options):
    d = WIDTH.get(name, D)
    return randomised(model_config(tiny(d_model=d, n_heads=n_heads, mixer={"name": name, **OPTIONS[name], **options})))


# ---- transformers' modules, from tiny random configs of odd sizes

def hf_short_conv(bias):
    from transformers import Lfm2Config
    from transformers.models.lfm2.modeling_lfm2 import Lfm2ShortConv

    cfg = Lfm2Config(hidden_size=D, conv_L_cache=4, conv_bias=bias, num_hidden_layers=1, layer_types=["conv"],
                     num_attention_heads=1, num_key_value_heads=1, intermediate_size=16, vocab_size=11)
    return Lfm2ShortConv(cfg, 0).double().eval()


def hf_rg_lru():
    from transformers import RecurrentGemmaConfig
    from transformers.models.recurrent_gemma.modeling_recurrent_gemma import RecurrentGemmaRecurrentBlock

    cfg = RecurrentGemmaConfig(hidden_size=D, lru_width=15, num_attention_heads=3, conv1d_width=3,
                               num_hidden_layers=1, intermediate_size=16, vocab_size=11)
    return RecurrentGemmaRecurrentBlock(cfg, 0).double().eval()


def hf_mlstm(bias):
    from transformers import xLSTMConfig
    from transformers.models.xlstm.modeling_xlstm import xLSTMLayer

    # inference mode, a chunk longer than the sequence: its recurrent kernel (states in float32 at best)
    cfg = xLSTMConfig(hidden_size=18, num_heads=3, use_bias=bias, gate_soft_cap=2.0, weight_mode="single",
                      mode="inference", chunk_size=64, num_hidden_layers=1, vocab_size=11)
    return xLSTMLayer(cfg).double().eval()


def _randomise(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.3 * torch.randn_like(p))


def test_short_conv_equals_transformers_lfm2_short_conv():
    for bias in (True, False):
        hf = hf_short_conv(bias)
        _randomise(hf)
        mixer = build("short_conv", bias=bias)
        mixer.load_state_dict(short_conv.from_hf_layer(hf))
        x, tokens = inputs()
        with torch.no_grad():
            torch.testing.assert_close(run(mixer, x), hf(x), rtol=0, atol=1e-12)
            if not bias:  # transformers zeroes a padded input: with no bias, the same as zeroing B * x
                got, want = run(mixer, x, tokens), hf(x, attention_mask=tokens.long())
                torch.testing.assert_close(got[tokens], want[tokens], rtol=0, atol=1e-12)
        back = short_conv.to_hf_layer(mixer)  # and back, bit for bit
        assert back.keys() == hf.state_dict().keys()
        assert all(torch.equal(back[k], v) for k, v in hf.state_dict().items())


def test_rg_lru_equals_transformers_recurrent_gemma_recurrent_block():
    """transformers accumulates the recurrence in float32 even in float64: 1e-5."""
    hf = hf_rg_lru()
    _randomise(hf)
    mixer = build("rg_lru")
    mixer.load_state_dict(rg_lru.from_hf_layer(hf))
    x, _ = inputs()
    positions = torch.arange(L).expand(2, L)
    with torch.no_grad():
        want = hf(x, positions, None, use_cache=False)[0]
    torch.testing.assert_close(run(mixer, x), want, rtol=0, atol=1e-5)
    back = rg_lru.to_hf_layer(mixer)
    assert back.keys() == hf.state_dict().keys()
    assert all(torch.equal(back[k], v) for k, v in hf.state_dict().items())


def test_mlstm_equals_transformers_xlstm_layer():
    """transformers keeps the recurrent state in float32 even in float64: 1e-5."""
    for bias in (True, False):
        hf = hf_mlstm(bias)
        _randomise(hf)
        mixer = build("mlstm", bias=bias)
        mixer.load_state_dict(mlstm.from_hf_layer(hf))
        x, _ = inputs(d=18)
        with torch.no_grad():
            torch.testing.assert_close(run(mixer, x), hf(x)[0], rtol=0, atol=1e-5)
        back = mlstm.to_hf_layer(mixer)
        assert back.keys() == hf.state_dict().keys()
        assert all(torch.equal(back[k], v) for k, v in hf.state_dict().items())


HF = {  # name: (transformers' module, the weight map, its forward over unpadded rows)
    "short_conv": (lambda: hf_short_conv(True), short_conv.from_hf_layer, lambda hf, x: hf(x)),
    "rg_lru": (hf_rg_lru, rg_lru.from_hf_layer,
               lambda hf, x: hf(x, torch.arange(x.shape[1]).expand(x.shape[0], -1), None, use_cache=False)[0]),
    "mlstm": (lambda: hf_mlstm(True), mlstm.from_hf_layer, lambda hf, x: hf(x)[0]),
}


@pytest.mark.parametrize("name", NAMES)
def test_a_left_padded_row_gets_what_transformers_gives_the_row_unpadded(name):
    """Padding never reaches the state: the real positions of a left-padded row equal transformers' module
    run on those positions alone (the families' left-padding parity rests on it)."""
    make, mapping, call = HF[name]
    hf = make()
    _randomise(hf)
    mixer = build(name)
    mixer.load_state_dict(mapping(hf))
    x, tokens = inputs(d=WIDTH.get(name, D))
    with torch.no_grad():
        torch.testing.assert_close(run(mixer, x, tokens)[1, 3:], call(hf, x[1:, 3:])[0], rtol=0, atol=1e-5)


# ---- float64 loops of the papers' recurrences, one row, padding skipped

def short_conv_loop(m, x, keep):
    """LFM2: B, C, h = in_proj(x); y = C * conv(B * h); out_proj(y)."""
    proj = [m.in_proj(x[t]).split(D) for t in range(len(x))]
    conv = conv_loop(m.conv, [b * h for b, _, h in proj], keep, silu=False)
    return torch.stack([m.out(c * y) for (_, c, _), y in zip(proj, conv)])


def rg_lru_loop(m, x, keep):
    """De et al. 2024, eq. (3)-(6): r = sigma(W_a u + b_a), i = sigma(W_x u + b_x), a = exp(-8 r softplus(L)),
    h = a h + sqrt(1 - a^2) (i u), unnormalised at the row's first real token; times gelu(W_y x)."""
    H, bw = m.h, m.w // m.h
    u = conv_loop(m.conv, [m.linear_x(x[t]) for t in range(len(x))], keep, silu=False)
    h = torch.zeros(m.w, dtype=x.dtype)
    seen, out = False, []
    for t in range(len(x)):
        ub = u[t].view(H, bw)
        r = torch.sigmoid(torch.stack([ub[j] @ m.recurrent_gate_weight[j] for j in range(H)]) + m.recurrent_gate_bias)
        i = torch.sigmoid(torch.stack([ub[j] @ m.input_gate_weight[j] for j in range(H)]) + m.input_gate_bias)
        a = torch.exp(-8 * r.flatten() * F.softplus(m.recurrent_param))
        norm = torch.ones_like(a) if not seen else torch.sqrt(1 - a * a)
        if keep[t]:
            h, seen = a * h + norm * i.flatten() * u[t], True
        out.append(m.out(h * F.gelu(m.linear_y(x[t]), approximate="tanh")))
    return torch.stack(out)


def mlstm_loop(m, x, keep):
    """Beck et al. 2025 (xLSTM-7B), the stabilised mLSTM per head: m = max(log sigma(f) + m, i),
    C = exp(log sigma(f) + m_old - m) C + exp(i - m) k v^T, n likewise, h = C^T q / (max(|n.q|, exp(-m)) + eps);
    layer norm per head, times sigma(o), out_proj. Padding skips the update."""
    H, dk, dv = m.h, m.dk, m.dv
    cap = lambda u: m.cap * torch.tanh(u / m.cap)  # noqa: E731
    C, n, M = torch.zeros(H, dk, dv, dtype=x.dtype), torch.zeros(H, dk, dtype=x.dtype), torch.zeros(H, dtype=x.dtype)
    out = []
    for t in range(len(x)):
        q, k, v = m.q(x[t]).view(H, dk) / math.sqrt(dk), m.k(x[t]).view(H, dk), m.v(x[t]).view(H, dv)
        i, f = cap(m.igate_preact(x[t])), F.logsigmoid(cap(m.fgate_preact(x[t])))
        heads = []
        for h in range(H):
            if keep[t]:
                M_new = torch.maximum(f[h] + M[h], i[h])
                C[h] = torch.exp(f[h] + M[h] - M_new) * C[h] + torch.exp(i[h] - M_new) * torch.outer(k[h], v[h])
                n[h] = torch.exp(f[h] + M[h] - M_new) * n[h] + torch.exp(i[h] - M_new) * k[h]
                M[h] = M_new
            o = C[h].T @ q[h] / (torch.maximum((n[h] @ q[h]).abs(), torch.exp(-M[h])) + m.eps)
            heads.append((o - o.mean()) / torch.sqrt(o.var(unbiased=False) + m.norm_eps))
        normed = torch.cat(heads) * m.multihead_norm.weight + m.multihead_norm.bias
        out.append(m.out(torch.sigmoid(m.ogate_preact(x[t])) * normed))
    return torch.stack(out)


LOOPS = {"short_conv": short_conv_loop, "rg_lru": rg_lru_loop, "mlstm": mlstm_loop}


def _loop(mixer, name, x, tokens):
    with torch.no_grad():
        return torch.stack([LOOPS[name](mixer, x[b], tokens[b].double()) for b in range(x.shape[0])])


@pytest.mark.parametrize("name", NAMES)
def test_the_parallel_form_equals_a_float64_loop_of_the_recurrence(name):
    """At every chunk size that matters: one position, chunks that do not divide L, the whole sequence."""
    for chunk in ((1, 2, 3, 4, L) if "chunk_size" in OPTIONS[name] else (None,)):
        mixer = build(name, **({} if chunk is None else {"chunk_size": chunk}))
        x, tokens = inputs(d=WIDTH.get(name, D))
        got, want = run(mixer, x, tokens), _loop(mixer, name, x, tokens)
        torch.testing.assert_close(got[tokens], want[tokens], rtol=0, atol=1e-10, msg=f"chunk {chunk}")


@pytest.mark.parametrize("name", ["rg_lru", "mlstm"])
def test_chunked_gradients_equal_the_one_position_chunks(name):
    """Training runs the chunked form's backward: with a padded row, every parameter's gradient is the
    one of chunks of one position (the recurrence step by step), in float64."""
    assert_chunked_gradients_equal_the_one_position_chunks(build, name, *inputs(d=WIDTH.get(name, D)))


@pytest.mark.parametrize("name", NAMES)
def test_a_prefill_then_steps_equal_one_full_forward_at_every_split(name):
    """Prefill positions [0, s) (the left-padded row's first s may all be padding), then one position at a
    time; also through the static state a compiled step writes in place."""
    mixer = build(name)
    assert_a_prefill_then_steps_equal_one_full_forward(mixer, *inputs(d=WIDTH.get(name, D)))


@pytest.mark.parametrize("name", NAMES)
def test_the_state_keeps_alive_the_bytes_it_reports_after_a_prefill(name):
    """nbytes = the sizes of the distinct storages its tensors hold (a view of the prompt's activations
    would keep all of them alive), = 8 x state_elements per row, for any prompt length."""
    mixer = build(name)
    for length in (1, L):
        assert_the_state_keeps_alive_what_it_reports(mixer, length, WIDTH.get(name, D), mixer.state_elements(length))


# what each mixer's state holds and costs per token, counted by hand (2 FLOPs a multiply-add)
COUNTS = {
    # the window of 3 inputs B * x over d channels
    "short_conv": lambda d: (d * 3, 2 * d * 4 + 2 * d),  # 4 taps; the gates B * x and C * y
    # the window of 2 inputs over the 15 channels, h, one "started" flag; conv 3 taps, 2 gates of 3 blocks of
    # 5 x 5, the recurrence a * h + b
    "rg_lru": lambda d: (15 * 2 + 15 + 1, 2 * 15 * 3 + 2 * 2 * 3 * 5 * 5 + 2 * 15),
    # 3 heads of C (3 x 6), n (3) and m (1); per head decay, write and read C (5 x 3 x 6) and n (5 x 3)
    "mlstm": lambda d: (3 * (3 * 6 + 3 + 1), 3 * (5 * 3 * 6 + 5 * 3)),
}


@pytest.mark.parametrize("name", NAMES)
def test_state_elements_and_flops_are_hand_counts(name):
    mixer = build(name)
    d = WIDTH.get(name, D)
    elements, per_token = COUNTS[name](d)
    for length in (1, 7, 64):
        assert mixer.state_elements(length) == elements
        assert mixer.mixing_flops(length, True) == length * per_token
        assert mixer.step_mixing_flops(length) == per_token
    model = build_model(tiny(d_model=d, n_layers=2, n_heads=1, mixer={"name": name, **OPTIONS[name]}), 11)
    assert decoding_state_bytes(model, 9) == 2 * 4 * elements  # two layers, float32


@pytest.mark.parametrize("name", NAMES)
def test_the_invariant_grid_passes(name):
    ran = testing.check_component("mixers", name)
    assert {"cache_parity [decoder]", "padding_invariance (left) [decoder]", "trains [decoder]"} <= set(ran)


@pytest.mark.parametrize("name", NAMES)
def test_a_causal_only_mixer_in_an_encoder_is_one_config_error(name):
    with pytest.raises(ConfigError, match=f"mixer '{name}' cannot serve a bidirectional encoder"):
        model_config(tiny(kind="encoder", mixer=name))


def test_rg_lru_refuses_a_width_its_heads_do_not_divide():
    with pytest.raises(ConfigError, match=r"model\.mixer\.width: 14 must be a multiple of n_heads \(3\)"):
        model_config(tiny(d_model=D, n_heads=1, mixer={"name": "rg_lru", "width": 14, "n_heads": 3}))


def test_rg_lru_gradients_stay_finite_where_the_decay_reaches_one():
    """sqrt(1 - a^2) has an infinite slope at a = 1 (padding, a gate at zero): Griffin caps it."""
    mixer = build("rg_lru").train()
    with torch.no_grad():
        mixer.recurrent_param.fill_(-800.0)  # softplus underflows to 0: a = 1 exactly
    x, tokens = inputs()
    mixer(x, MixerInputs(AttentionMask(None, True), tokens=tokens)).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in mixer.parameters())
