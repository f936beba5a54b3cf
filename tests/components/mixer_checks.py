"""What the recurrent mixers' tests share: float64 inputs with a left-padded row, a mixer built with
random weights everywhere, and the checks every such mixer passes (chunked gradients, a prefill then
one-position steps, the state's bytes)."""
from __future__ import annotations

import torch

from arch_zoo.components.masks import AttentionMask
from arch_zoo.components.mixers import MIXERS, MixerInputs

L, D = 11, 13  # odd sizes: nothing lines up by accident


def randomised(cfg):
    """The mixer of model config ``cfg`` in float64, eval mode, its weights moved at random (the init
    leaves biases at zero and gains at one, which would hide their wiring)."""
    mixer = MIXERS.build(cfg.mixer, cfg, None).double().eval()
    with torch.no_grad():
        for p in mixer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return mixer


def inputs(batch=2, d=D):
    x = torch.randn(batch, L, d, dtype=torch.float64)
    tokens = torch.ones(batch, L, dtype=torch.bool)
    tokens[1, :3] = False  # a left-padded row
    return x, tokens


def run(mixer, x, tokens=None, state=None):
    with torch.no_grad():
        return mixer(x, MixerInputs(AttentionMask(None, True), tokens=tokens), state)


def assert_chunked_gradients_equal_the_one_position_chunks(build, name, x, tokens):
    """With a padded row, every parameter's gradient at chunk size 4 is the one of chunks of one position
    (the recurrence step by step); ``build(name, chunk_size=...)`` makes the mixer."""
    weights = torch.randn(x.shape[0], L, x.shape[-1], dtype=torch.float64) * tokens.unsqueeze(-1)
    grads, weights_of = [], build(name).state_dict()
    for chunk in (4, 1):
        mixer = build(name, chunk_size=chunk).train()
        mixer.load_state_dict(weights_of)
        (mixer(x, MixerInputs(AttentionMask(None, True), tokens=tokens)) * weights).sum().backward()
        grads.append({n: p.grad for n, p in mixer.named_parameters()})
    for n, g in grads[0].items():
        assert torch.isfinite(g).all(), n
        torch.testing.assert_close(g, grads[1][n], rtol=1e-9, atol=1e-10, msg=n)


def assert_a_prefill_then_steps_equal_one_full_forward(mixer, x, tokens):
    """At every split s: prefill [0, s), then one position at a time, through the state and through the
    static state a compiled step writes in place."""
    full = run(mixer, x, tokens)
    for s in range(1, L):
        state = mixer.new_state()
        outs = [run(mixer, x[:, :s], tokens[:, :s], state)]
        static = mixer.static_state(2, L, torch.float64, x.device, torch.zeros(1, dtype=torch.long))
        static.load(state, s)
        for t in range(s, L):
            outs.append(run(mixer, x[:, t:t + 1], tokens[:, t:t + 1], state))
            torch.testing.assert_close(run(mixer, x[:, t:t + 1], tokens[:, t:t + 1], static), outs[-1], rtol=0,
                                       atol=1e-12)
        got = torch.cat(outs, dim=1)
        torch.testing.assert_close(got[tokens], full[tokens], rtol=0, atol=1e-10, msg=f"split at {s}")


def assert_the_state_keeps_alive_what_it_reports(mixer, length, d, elements):
    """After a prefill of ``length`` positions, nbytes = the sizes of the distinct storages its tensors
    hold = 8 bytes x ``elements`` per row."""
    state = mixer.new_state()
    run(mixer, torch.randn(3, length, d, dtype=torch.float64), None, state)
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in state.tensors()}
    assert state.nbytes == sum(storages.values()) == 3 * 8 * elements
