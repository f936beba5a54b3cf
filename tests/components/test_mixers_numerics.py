"""Each recurrent mixer's chunked (training, prefill) and recurrent (decoding) forms against a plain
float64 loop over positions written here from the papers' equations, on the mixer's own weights, with
a left-padded row (padding must leave the state as it was) and chunks that do not divide the length."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from arch_zoo.components.mixers import MIXERS, MixerInputs
from arch_zoo.components.masks import AttentionMask
from arch_zoo.config.loading import model_config
from arch_zoo.components.state import RecurrentState

L, D = 11, 16


def build(name, **options):
    cfg = model_config({"d_model": D, "n_heads": 2, "n_layers": 1, "mixer": {"name": name, **options}})
    torch.manual_seed(0)
    mixer = MIXERS.build(cfg.mixer, cfg, None).double().eval()
    with torch.no_grad():  # the init leaves some biases at zero: random ones test their wiring too
        for p in mixer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return mixer


def conv_loop(conv, xs, keep, silu=True):
    """(silu of) the causal depthwise conv, position by position, padding zeroed first."""
    w = conv.conv.weight[:, 0]  # (C, K)
    K = w.shape[1]
    xs = [x * k for x, k in zip(xs, keep)]
    out = []
    for t in range(len(xs)):
        acc = conv.conv.bias.clone() if conv.conv.bias is not None else torch.zeros_like(xs[0])
        for j in range(K):
            s = t - (K - 1) + j
            if s >= 0:
                acc = acc + w[:, j] * xs[s]
        out.append(F.silu(acc) if silu else acc)
    return out


def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean() + eps) * w


def gated_deltanet_loop(m, x, keep):
    """Yang et al. 2025, eq. (gated delta rule), one row: S_t = a_t (I - b_t k k^T) S + b_t k v^T."""
    key, value = m.h * m.dk, m.hv * m.dv
    proj = [m.in_proj(x[t]) for t in range(len(x))]
    conv = conv_loop(m.conv, [p[: 2 * key + value] for p in proj], keep)
    S = torch.zeros(m.hv, m.dk, m.dv, dtype=x.dtype)
    out = []
    for t in range(len(x)):
        q, k, v = conv[t][:key].view(m.h, m.dk), conv[t][key:2 * key].view(m.h, m.dk), conv[t][2 * key:].view(m.hv, m.dv)
        z = proj[t][2 * key + value:].view(m.hv, m.dv)
        ba = m.ba_proj(x[t])
        rows = []
        for h in range(m.hv):
            qh, kh = q[h // (m.hv // m.h)], k[h // (m.hv // m.h)]
            qh, kh = qh / max(qh.norm(), 1e-6) / math.sqrt(m.dk), kh / max(kh.norm(), 1e-6)
            beta = torch.sigmoid(ba[h]) * keep[t]
            g = -math.exp(m.A_log[h]) * F.softplus(ba[m.hv + h] + m.dt_bias[h]) * keep[t]
            Sh = torch.exp(g) * (torch.eye(m.dk, dtype=x.dtype) - beta * torch.outer(kh, kh)) @ S[h] \
                + beta * torch.outer(kh, v[h])
            S[h] = Sh
            o = Sh.T @ qh
            rows.append(rmsnorm(o, m.norm.weight, m.norm.eps) * F.silu(z[h]))
        out.append(m.out(torch.cat(rows)))
    return torch.stack(out)


def mamba2_loop(m, x, keep):
    """Dao & Gu 2024, SSD recurrence per head: h = exp(dt A) h + dt x B^T, y = h C + D x."""
    inner, G, N, P = m.h * m.p, m.groups, m.n, m.p
    proj = [m.in_proj(x[t]) for t in range(len(x))]
    conv = conv_loop(m.conv, [p[inner: inner + m.conv_dim] for p in proj], keep)
    H = torch.zeros(m.h, P, N, dtype=x.dtype)
    out = []
    for t in range(len(x)):
        z, dt_raw = proj[t][:inner], proj[t][inner + m.conv_dim:]
        xs, B, C = conv[t][:inner].view(m.h, P), conv[t][inner:inner + G * N].view(G, N), conv[t][inner + G * N:].view(G, N)
        y = []
        for h in range(m.h):
            dt = F.softplus(dt_raw[h] + m.dt_bias[h]) * keep[t]
            grp = h // (m.h // G)
            H[h] = torch.exp(-dt * torch.exp(m.A_log[h])) * H[h] + dt * torch.outer(xs[h], B[grp])
            y.append(H[h] @ C[grp] + m.D[h] * xs[h])
        gated = torch.cat(y) * F.silu(z)
        normed = torch.cat([rmsnorm(part, w, m.norm.eps) for part, w in
                            zip(gated.split(inner // G), m.norm.weight.split(inner // G))])
        out.append(m.out(normed))
    return torch.stack(out)


def linear_attention_loop(m, x, keep):
    """Katharopoulos et al. 2020, eq. (5)-(6): o = phi(q)^T S / phi(q)^T z over the real keys so far."""
    phi = lambda u: F.elu(u) + 1  # noqa: E731
    S = torch.zeros(m.h, m.d, m.d, dtype=x.dtype)
    Z = torch.zeros(m.h, m.d, dtype=x.dtype)
    out = []
    for t in range(len(x)):
        q, k, v = (u.view(m.h, m.d) for u in m.qkv(x[t]).split(m.h * m.d))
        rows = []
        for h in range(m.h):
            S[h] = S[h] + keep[t] * torch.outer(phi(k[h]), v[h])
            Z[h] = Z[h] + keep[t] * phi(k[h])
            rows.append(phi(q[h]) @ S[h] / (phi(q[h]) @ Z[h] + m.eps))
        out.append(m.out(torch.cat(rows)))
    return torch.stack(out)


def lstm_loop(m, x, keep):
    """The LSTM cell, written out (i, f, g, o gates in torch's order); padding skips the cell."""
    lstm, H = m, m.hidden
    h, c = torch.zeros(H, dtype=x.dtype), torch.zeros(H, dtype=x.dtype)
    out = []
    for t in range(len(x)):
        gates = lstm.weight_ih_l0 @ x[t] + lstm.bias_ih_l0 + lstm.weight_hh_l0 @ h + lstm.bias_hh_l0
        i, f, g, o = gates.split(H)
        c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h2 = torch.sigmoid(o) * torch.tanh(c2)
        if keep[t]:
            h, c = h2, c2
        out.append(m.out(h2 * keep[t]))
    return torch.stack(out)


def gru_loop(m, x, keep):
    """The GRU cell, written out (r, z, n gates in torch's order; r scales the recurrent part of n)."""
    H = m.hidden
    h = torch.zeros(H, dtype=x.dtype)
    out = []
    for t in range(len(x)):
        xr, xz, xn = (m.weight_ih_l0 @ x[t] + m.bias_ih_l0).split(H)
        hr, hz, hn = (m.weight_hh_l0 @ h + m.bias_hh_l0).split(H)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        h2 = (1 - z) * torch.tanh(xn + r * hn) + z * h
        if keep[t]:
            h = h2
        out.append(m.out(h2 * keep[t]))
    return torch.stack(out)


CASES = {
    "gated_deltanet": ({"chunk_size": 4, "n_v_heads": 4, "v_head_dim": 6}, gated_deltanet_loop),
    "mamba2": ({"chunk_size": 4, "state_size": 5, "n_groups": 2, "n_heads": 4}, mamba2_loop),
    "linear_attention": ({"chunk_size": 4}, linear_attention_loop),
    "lstm": ({"hidden_size": 12}, lstm_loop),
    "gru": ({"hidden_size": 12}, gru_loop),
}


def _inputs():
    x = torch.randn(2, L, D, dtype=torch.float64)
    tokens = torch.ones(2, L, dtype=torch.bool)
    tokens[1, :3] = False  # a left-padded row
    return x, tokens


def _reference(mixer, loop, x, tokens):
    with torch.no_grad():
        return torch.stack([loop(mixer, x[b], tokens[b].double()) for b in range(x.shape[0])])


def _mask():
    return AttentionMask(None, True)


@pytest.mark.parametrize("name", list(CASES))
def test_the_chunked_form_equals_a_float64_loop_over_positions(name):
    options, loop = CASES[name]
    mixer = build(name, **options)
    x, tokens = _inputs()
    with torch.no_grad():
        got = mixer(x, MixerInputs(_mask(), tokens=tokens))
    expected = _reference(mixer, loop, x, tokens)
    real = tokens.unsqueeze(-1).expand_as(got)
    torch.testing.assert_close(got[real], expected[real], rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", list(CASES))
def test_the_recurrent_form_and_a_prefill_then_steps_equal_the_loop(name):
    """A prefill of 5 positions (chunked, into the state), then one position at a time (the decoding
    form): the outputs are the loop's, and the state after the prefill is what a static state loads."""
    options, loop = CASES[name]
    mixer = build(name, **options)
    x, tokens = _inputs()
    expected = _reference(mixer, loop, x, tokens)
    state, outs = mixer.new_state(), []
    with torch.no_grad():
        outs.append(mixer(x[:, :5], MixerInputs(_mask(), tokens=tokens[:, :5]), state))
        static = mixer.static_state(2, L, torch.float64, x.device, torch.zeros(1, dtype=torch.long))
        static.load(state, 5)
        for t in range(5, L):
            step = MixerInputs(_mask(), tokens=tokens[:, t:t + 1])
            outs.append(mixer(x[:, t:t + 1], step, state))
            torch.testing.assert_close(mixer(x[:, t:t + 1], step, static), outs[-1], rtol=0, atol=1e-12)
    got = torch.cat(outs, dim=1)
    real = tokens.unsqueeze(-1).expand_as(got)
    torch.testing.assert_close(got[real], expected[real], rtol=0, atol=1e-10)
    assert isinstance(state, RecurrentState) and set(mixer.state_shapes(2)) == {n for n in mixer.state_shapes(2)
                                                                                  if state.read(n) is not None}


def test_bidirectional_linear_attention_reads_every_real_key():
    """In an encoder each query reads the sum over all real keys (padding excluded), in float64."""
    mixer = build("linear_attention")
    x, tokens = _inputs()
    with torch.no_grad():
        got = mixer(x, MixerInputs(AttentionMask(None, False), tokens=tokens, causal=False))
        phi = lambda u: F.elu(u) + 1  # noqa: E731
        for b in range(2):
            q, k, v = (u.view(L, mixer.h, mixer.d) for u in mixer.qkv(x[b]).split(mixer.h * mixer.d, -1))
            w = torch.einsum("qhd,khd->hqk", phi(q), phi(k)) * tokens[b].double()
            o = torch.einsum("hqk,khd->qhd", w, v) / (w.sum(-1).T.unsqueeze(-1) + mixer.eps)
            torch.testing.assert_close(got[b][tokens[b]], mixer.out(o.flatten(1))[tokens[b]], rtol=0, atol=1e-10)


@pytest.mark.parametrize("rule", ["decay", "delta"])
def test_chunked_scan_gradients_equal_the_recurrent_forms(rule):
    """Training runs the chunked form's backward: its gradients with respect to every input and the
    initial state equal those of the position-by-position form (float64; chunks that do not divide L)."""
    from arch_zoo.components.mixers import scan

    B, H, Dk, Dv = 2, 3, 4, 5
    q, k = torch.randn(B, H, L, Dk, dtype=torch.float64), F.normalize(torch.randn(B, H, L, Dk, dtype=torch.float64), dim=-1)
    v, S0 = torch.randn(B, H, L, Dv, dtype=torch.float64), torch.randn(B, H, Dk, Dv, dtype=torch.float64)
    g, beta = -torch.rand(B, H, L, dtype=torch.float64), torch.rand(B, H, L, dtype=torch.float64)
    inputs = [q, k, v, g, beta, S0] if rule == "delta" else [q, k, v, g, S0]
    weights = torch.randn(B, H, L, Dv, dtype=torch.float64), torch.randn(B, H, Dk, Dv, dtype=torch.float64)

    def grads(fn, **kw):
        leaves = [t.clone().requires_grad_(True) for t in inputs]
        out, S = fn(*leaves, **kw)
        ((out * weights[0]).sum() + (S * weights[1]).sum()).backward()
        return [t.grad for t in leaves]

    chunked = getattr(scan, f"{rule}_scan")
    step = getattr(scan, f"{rule}_step")
    for want, got in zip(grads(step), grads(chunked, chunk=4)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("chunk", [1, 3, 4, L, L + 5])
def test_linear_scan_equals_a_float64_loop_and_the_one_channel_decay_scan_it_replaced(chunk):
    """RG-LRU's elementwise recurrence h_t = a_t h_{t-1} + b_t (``scan.linear_scan``, doubling steps within
    a chunk): its outputs, final state and gradients equal a loop over positions, and what ``decay_scan``
    with one channel a head (RG-LRU's form before it) gives, at chunks that do and do not divide L."""
    from arch_zoo.components.mixers import scan

    shape = (2, 5, L)
    a, b, h0 = torch.rand(*shape, dtype=torch.float64), torch.randn(*shape, dtype=torch.float64), torch.randn(2, 5,
                                                                                                           dtype=torch.float64)
    a[0, 0, 3] = 0.0  # a reset: nothing before position 3 reaches past it
    weights = torch.randn(*shape, dtype=torch.float64), torch.randn(2, 5, dtype=torch.float64)

    def loop(a, b, h):
        out = []
        for t in range(L):
            h = a[..., t] * h + b[..., t]
            out.append(h)
        return torch.stack(out, -1), h

    def one_channel(a, b, h):
        ones = torch.ones_like(b).unsqueeze(-1)
        out, S = scan.decay_scan(ones, ones, b.unsqueeze(-1), a.log(), h[..., None, None], chunk=chunk)
        return out.squeeze(-1), S[..., 0, 0]

    def run(fn, a, **kw):
        leaves = [t.clone().requires_grad_(True) for t in (a, b, h0)]
        out, h = fn(*leaves, **kw)
        ((out * weights[0]).sum() + (h * weights[1]).sum()).backward()
        return [out, h] + [t.grad for t in leaves]

    for got, want in zip(run(scan.linear_scan, a, chunk=chunk), run(loop, a)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    positive = a.clamp(min=0.05)  # decay_scan takes log a
    for got, want in zip(run(one_channel, positive), run(scan.linear_scan, positive, chunk=chunk)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    out, h = scan.linear_scan(a, b, chunk=chunk)  # no state: from zeros
    torch.testing.assert_close(out, loop(a, b, torch.zeros(2, 5, dtype=torch.float64))[0], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name,module", [("lstm", nn.LSTM), ("gru", nn.GRU)])
def test_the_torch_rnn_mixers_hold_torch_nn_s_weights_and_compute_its_layer(name, module):
    """``lstm`` and ``gru`` load a torch.nn.LSTM / GRU's state dict as it is (same names and layout)
    and give its outputs, projected back to d_model."""
    mixer = build(name, hidden_size=12)
    reference = module(D, 12, batch_first=True, dtype=torch.float64)
    reference.load_state_dict({k: v for k, v in mixer.state_dict().items() if not k.startswith("out.")})
    x = torch.randn(2, L, D, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(mixer(x, MixerInputs(_mask())), mixer.out(reference(x)[0]), rtol=0, atol=1e-12)
