"""Exact parity with torch.nn.Transformer (1e-5): the encoder alone (post-norm and norm_first) and the
whole encoder-decoder, fed the same embedded inputs; and the vaswani preset against a reference
assembled from nn.Transformer and the paper's sinusoids."""
import math

import pytest
import torch
from torch import nn

from arch_zoo.components.placements import ends_with_norm
from arch_zoo.interop import CheckpointError, from_torch_transformer
from tests.interop.references import VOCAB, cached_greedy, padded_batch, randomize, tiny

pytestmark = [pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors"),
              pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")]

D, HEADS, FF = 32, 4, 64


def embedded(model, embed, stack, ids, mask):
    """What arch_zoo's stack adds its positions to; right padding, so real tokens sit at 0..n-1."""
    return stack.position.embed(embed(ids), (mask.cumsum(-1) - 1).clamp(min=0))


def causal(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # True: may not attend


@pytest.mark.parametrize("final_norm", [False, True])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post", "norm_first"])
def test_transformer_encoder_matches(norm_first, final_norm):
    layer = nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.1, batch_first=True, norm_first=norm_first)
    ref = randomize(nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(D) if final_norm else None,
                                          enable_nested_tensor=False)).eval()
    model = from_torch_transformer(ref, VOCAB)
    assert model.config.norm_placement.name == ("pre" if norm_first else "post")
    assert ends_with_norm(model.config) == final_norm
    ids, mask = padded_batch([6, 9, 2], 9, "right")
    with torch.no_grad():
        x = embedded(model, model.embed, model.encoder, ids, mask)
        expected = ref(x, src_key_padding_mask=~mask.bool())
        hidden = model(ids, mask).hidden
    real = mask.bool()
    torch.testing.assert_close(hidden[real], expected[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post", "norm_first"])
def test_transformer_encoder_decoder_matches(norm_first):
    ref = randomize(nn.Transformer(D, HEADS, 2, 3, FF, dropout=0.1, batch_first=True, norm_first=norm_first)).eval()
    model = from_torch_transformer(ref, VOCAB)
    assert ends_with_norm(model.config)  # nn.Transformer always ends both stacks with a LayerNorm
    src, src_mask = padded_batch([6, 9, 2], 9, "right")
    tgt, tgt_mask = padded_batch([5, 3, 7], 7, "right", seed=2)
    with torch.no_grad():
        s = embedded(model, model.embed, model.encoder, src, src_mask)
        t = embedded(model, model.decoder_embed, model.decoder, tgt, tgt_mask)
        pad_s, pad_t = ~src_mask.bool(), ~tgt_mask.bool()
        memory = ref.encoder(s, src_key_padding_mask=pad_s)
        expected = ref(s, t, tgt_mask=causal(7), src_key_padding_mask=pad_s, tgt_key_padding_mask=pad_t,
                       memory_key_padding_mask=pad_s)
        out = model(src, tgt, src_mask, tgt_mask)
    torch.testing.assert_close(out.extras["memory"][~pad_s], memory[~pad_s], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.hidden[~pad_t], expected[~pad_t], atol=1e-5, rtol=0)


def sinusoids(length, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) -- Vaswani et al. 2017, section 3.5."""
    pe = torch.zeros(length, d)
    for pos in range(length):
        for i in range(0, d, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d))
    return pe


def vaswani_reference():
    m = tiny("vaswani")
    def layer(cls):
        return cls(m.d_model, m.n_heads, m.d_ff, dropout=0.1, batch_first=True)  # ReLU, post-norm
    # the paper has no norm after the last layer; nn.Transformer's default stacks would add one
    ref = nn.Transformer(m.d_model, m.n_heads, batch_first=True,
                         custom_encoder=nn.TransformerEncoder(layer(nn.TransformerEncoderLayer), m.encoder_layers,
                                                              enable_nested_tensor=False),
                         custom_decoder=nn.TransformerDecoder(layer(nn.TransformerDecoderLayer), m.decoder_layers))
    return m, randomize(ref).eval()


def test_vaswani_preset_equals_the_reference():
    m, ref = vaswani_reference()
    model = from_torch_transformer(ref, VOCAB, config="preset:vaswani-tiny")
    assert model.config == m
    # nn.Transformer has no embedding: the table (one for encoder, decoder and output, tied) is drawn
    # here from its own generator, N(0, 1/d_model) as the paper's scaled embedding expects, so the test
    # reads the same table whatever ran before it
    table = model.embed.weight
    with torch.no_grad():
        table.copy_(torch.randn(table.shape, generator=torch.Generator().manual_seed(1)) / math.sqrt(m.d_model))
    table = table.detach()

    def embed(ids):
        return table[ids] * math.sqrt(m.d_model) + sinusoids(ids.shape[1], m.d_model)

    src, src_mask = padded_batch([6, 9, 2], 9, "right")
    tgt, tgt_mask = padded_batch([5, 3, 7], 7, "right", seed=2)
    pad_s, pad_t = ~src_mask.bool(), ~tgt_mask.bool()
    with torch.no_grad():
        hidden = ref(embed(src), embed(tgt), tgt_mask=causal(7), src_key_padding_mask=pad_s,
                     tgt_key_padding_mask=pad_t, memory_key_padding_mask=pad_s)
        expected = hidden @ table.T
        logits = model(src, tgt, src_mask, tgt_mask).logits
    assert expected.abs().max() > 1
    torch.testing.assert_close(logits[~pad_t], expected[~pad_t], atol=1e-4, rtol=0)

    # greedy decoding: reference recomputes everything, arch_zoo decodes through its KV cache
    dec = torch.ones(3, 1, dtype=torch.long)
    for _ in range(6):
        with torch.no_grad():
            h = ref(embed(src), embed(dec), tgt_mask=causal(dec.shape[1]), src_key_padding_mask=pad_s,
                    memory_key_padding_mask=pad_s)
        step = h[:, -1] @ table.T
        top2 = step.topk(2, dim=-1).values
        # every choice clears its runner-up by far more than the logits' tolerance, so the comparison
        # below is about the cache, not about which of two near-equal tokens float rounding picks
        assert (top2[:, 0] - top2[:, 1]).min() > 1e-2
        dec = torch.cat((dec, step.argmax(-1, keepdim=True)), dim=1)
    assert len(set(dec[:, 1:].flatten().tolist())) > 1  # the decoder's input matters: not one token throughout
    assert torch.equal(cached_greedy(model, src, src_mask, dec[:, :1], 6), dec[:, 1:])


def test_unsupported_modules_are_refused():
    with pytest.raises(TypeError, match="expected torch.nn.Transformer"):
        from_torch_transformer(nn.Linear(4, 4), VOCAB)
    odd = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, HEADS, FF, activation=torch.tanh), 1,
                                enable_nested_tensor=False)
    with pytest.raises(CheckpointError, match="activation"):
        from_torch_transformer(odd, VOCAB)
    encoder_only = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), 2,
                                         enable_nested_tensor=False)
    with pytest.raises(CheckpointError, match=r"decoder\.layers\.0\..*missing from the checkpoint"):
        from_torch_transformer(encoder_only, VOCAB, config="preset:vaswani-tiny")
