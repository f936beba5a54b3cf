"""Documents kept apart inside a packed row (issue 58 §4, ``components.mixers.documents``): the document
mask, positions that restart, each attention form and position scheme giving every document the logits
it gets alone, a gradient that stays inside its document, and decoding that never reads across the
last document start of its prompt. (Every registry mixer is held to packed = separate by the oracle,
test_mixer_conformance.py.)"""
import pytest
import torch

from arch_zoo.components.masks import AttentionMask, self_attention_mask, within_documents
from arch_zoo.components.mixers.documents import DocumentRows, positions_within
from arch_zoo.generation import generate
from arch_zoo.models import build_model

SIZES = {"kind": "decoder", "d_model": 16, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "d_ff": 24,
         "max_seq_len": 32}
VOCAB = 29
LENGTHS = (4, 1, 6, 3)  # one row: documents of these lengths, a one-token one among them
DOCS = torch.cat([torch.full((n,), d) for d, n in enumerate(LENGTHS)]).unsqueeze(0)


def model_of(**changes):
    torch.manual_seed(0)
    return build_model({**SIZES, **changes}, VOCAB).double().eval()


def alone(model, ids):
    """Each document's logits run on its own, in packed order."""
    out, start = [], 0
    for n in LENGTHS:
        out.append(model(ids[:, start: start + n]).logits)
        start += n
    return torch.cat(out, dim=1)


def test_the_mask_is_causal_and_block_diagonal_by_document():
    ids = torch.tensor([[0, 0, 1, 1, 1, 2]])
    got = within_documents(AttentionMask(is_causal=True), ids).allowed[0, 0]
    want = [[i >= j and ids[0, i] == ids[0, j] for j in range(6)] for i in range(6)]
    assert got.tolist() == want


def test_the_mask_keeps_the_padding_it_was_given():
    ids = torch.tensor([[0, 0, 1, -1]])  # right padding: a document of its own (id -1), as collate pads it
    mask = within_documents(self_attention_mask(torch.tensor([[1, 1, 1, 0]]), 4, 0, True), ids)
    assert mask.allowed[0, 0, :3].tolist() == [[True, False, False, False], [True, True, False, False],
                                               [False, False, True, False]]
    assert mask.keep.flatten().tolist() == [1.0, 1.0, 1.0, 0.0]  # the padded query reads nothing: zeroed


def test_positions_restart_at_every_document_start():
    ids = torch.tensor([[5, 5, 5, 2, 7, 7], [1, 1, 1, 1, 1, 1]])
    got = positions_within(ids, torch.arange(6).unsqueeze(0))
    assert got.tolist() == [[0, 1, 2, 0, 0, 1], [0, 1, 2, 3, 4, 5]]


def test_rows_put_every_token_back_where_it_came_from():
    ids = torch.tensor([[0, 0, 0, 1], [4, 5, 5, 5]])
    rows = DocumentRows.of(ids)
    x = torch.arange(8.0).view(2, 4, 1)
    per_document = rows.gather(x)
    assert per_document[..., 0].tolist() == [[0, 1, 2], [3, 3, 3], [4, 4, 4], [5, 6, 7]]  # padding repeats
    assert rows.valid.sum(-1).tolist() == [3, 1, 1, 3]
    assert torch.equal(rows.scatter(per_document, 2), x)


@pytest.mark.parametrize("changes", [
    {"position": "learned"}, {"position": "sinusoidal"}, {"position": "rope"}, {"position": "alibi"},
    {"position": "t5_bias"}, {"attention": {"name": "sliding_window", "window": 3}, "position": "rope"},
    {"n_kv_heads": 1, "position": "learned"},  # MQA
    {"mixer": {"name": "differential_attention"}, "position": "rope"},
    {"mixer": {"name": "mla", "q_lora_rank": 12, "kv_lora_rank": 10, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4,
               "v_head_dim": 5}, "position": "rope"},
    {"layers": [{"pattern": [{"mixer": "gated_deltanet"}, {"mixer": "attention"}]}], "position": "learned"},
], ids=["learned", "sinusoidal", "rope", "alibi", "t5_bias", "sliding_window", "mqa", "differential", "mla", "hybrid"])
def test_a_packed_row_gives_each_document_the_logits_it_gets_alone(changes):
    model = model_of(**changes)
    ids = torch.randint(1, VOCAB, (1, sum(LENGTHS)))
    with torch.no_grad():
        want, packed = alone(model, ids), model(ids, document_ids=DOCS).logits
        joined = model(ids).logits
    torch.testing.assert_close(packed, want, rtol=0, atol=1e-10)
    assert (joined - want).abs().max() > 1e-3  # without document_ids they run into each other


def test_a_padded_batch_keeps_its_documents_and_its_padding_apart():
    model = model_of(layers=[{"pattern": [{"mixer": "mamba2"}, {"mixer": "attention"}]}], position="learned")
    ids = torch.randint(1, VOCAB, (2, sum(LENGTHS)))
    docs = torch.cat((DOCS, torch.tensor([[0] * 9 + [-1] * 5])))  # row 1: one document, then padding
    mask = (docs >= 0).long()
    with torch.no_grad():
        packed = model(ids, mask, document_ids=docs).logits
        want = alone(model, ids[:1])
        second = model(ids[1:, :9]).logits
    torch.testing.assert_close(packed[:1], want, rtol=0, atol=1e-10)
    torch.testing.assert_close(packed[1:, :9], second, rtol=0, atol=1e-10)


def test_no_gradient_crosses_a_document_start():
    model = model_of(layers=[{"pattern": [{"mixer": "short_conv"}, {"mixer": "attention"}]}], position="rope")
    x = model.embed(torch.randint(1, VOCAB, (1, sum(LENGTHS)))).detach().requires_grad_(True)
    hidden = model.decoder(x, document_ids=DOCS)
    (hidden[0, 10] * torch.randn(SIZES["d_model"], dtype=hidden.dtype)).sum().backward()  # document 2's last
    reached = x.grad[0].abs().sum(-1) > 0
    assert reached.nonzero().flatten().tolist() == list(range(5, 11))


def test_decoding_state_and_document_ids_do_not_go_together():
    model = model_of()
    with pytest.raises(ValueError, match="document_ids are for a pass that keeps no decoding state"):
        model(torch.ones(1, 3, dtype=torch.long), document_ids=torch.zeros(1, 3, dtype=torch.long),
              cache=model.new_cache())


@pytest.mark.parametrize("mixer", ["attention", "gated_deltanet"])
def test_generation_continues_only_the_prompt_s_last_document(mixer):
    model = model_of(mixer={"name": mixer}, position="learned")
    ids = torch.randint(1, VOCAB, (1, sum(LENGTHS)))
    last = ids[:, -LENGTHS[-1]:]
    kw = dict(max_new_tokens=5, return_logits=True)
    packed, own = generate(model, ids, document_ids=DOCS, **kw), generate(model, last, **kw)
    torch.testing.assert_close(packed.logits, own.logits, rtol=0, atol=1e-10)
    assert torch.equal(packed.tokens, own.tokens)
    assert (generate(model, ids, **kw).logits - own.logits).abs().max() > 1e-3  # the whole prompt reads otherwise


@pytest.mark.parametrize("mixer", ["attention", "linear_attention"])  # a mask; linear attention's own sums
def test_an_encoder_reads_both_ways_within_its_document_only(mixer):
    model = model_of(kind="encoder", head="lm", position="learned", mixer={"name": mixer})
    ids = torch.randint(1, VOCAB, (1, sum(LENGTHS)))
    with torch.no_grad():
        torch.testing.assert_close(model(ids, document_ids=DOCS).logits, alone(model, ids), rtol=0, atol=1e-10)
