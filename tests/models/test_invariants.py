"""Invariants across the whole registry grid: a new component is covered automatically."""
import itertools

import pytest
import torch

from arch_zoo.models import build_model
from arch_zoo.catalog import all_registries
from tests.conftest import tiny

REG = all_registries()
POSITIONS = REG["positions"].choices()
NORMS = REG["norms"].choices()
FFNS = REG["feedforward"].choices()
KINDS = ["encoder", "decoder", "encoder_decoder"]
VOCAB = 23


def run(model, ids, mask=None, dec_ids=None, dec_mask=None):
    if model.config.kind == "encoder_decoder":
        return model(ids, dec_ids if dec_ids is not None else ids, mask, dec_mask).logits
    return model(ids, mask).logits


GRID = list(itertools.product(KINDS, POSITIONS, NORMS, ["pre", "post"], FFNS))


TRAIN_STEPS = 8


def _token_loss(logits, labels, mask):
    per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    return (per_token * mask).sum() / mask.sum()


@pytest.mark.outcome
@pytest.mark.parametrize("kind,position,norm,placement,ffn", GRID, ids=["-".join(g) for g in GRID])
def test_every_combination_runs_and_trains(kind, position, norm, placement, ffn):
    """README, Tests: "every position x norm x placement x ffn x kind trains".

    Every parameter gets a finite, non-zero gradient, and eight Adam steps on a tiny learnable task
    (each position predicts its own token, padding ignored) cut the loss by more than 40%: a wiring
    bug that blocks learning (a detached branch, a norm that zeroes its input) fails here. The
    median cell cuts it by 85%, the slowest by 60% (checked under the default and avx2 kernels, 1 and
    2 threads)."""
    torch.manual_seed(0)
    cfg = tiny(kind=kind, position=position, norm=norm, norm_placement=placement, ffn=ffn, d_model=8, d_ff=8,
               n_kv_heads=1)
    model = build_model(cfg, VOCAB)
    ids = torch.randint(1, VOCAB, (4, 5))
    mask = torch.ones(4, 5, dtype=torch.long)
    mask[1, 3:] = 0
    dec_ids, dec_mask = ids[:, :4], mask[:, :4]
    labels, weight = (dec_ids, dec_mask) if kind == "encoder_decoder" else (ids, mask)
    logits = run(model, ids, mask, dec_ids=dec_ids, dec_mask=dec_mask)
    assert logits.shape == (4, 5 if kind != "encoder_decoder" else 4, VOCAB)
    assert torch.isfinite(logits).all()
    first = _token_loss(logits, labels, weight)
    first.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing, f"no gradient for {missing}"
    dead = [n for n, p in model.named_parameters() if p.dim() > 1 and p.grad.abs().sum() == 0
            and "position.table" not in n and ".experts." not in n]  # an expert no token was routed to
    assert not dead, f"all-zero gradient for {dead}"
    opt = torch.optim.Adam(model.parameters(), lr=5e-2)
    for _ in range(TRAIN_STEPS):
        opt.step()
        opt.zero_grad()
        loss = _token_loss(run(model, ids, mask, dec_ids=dec_ids, dec_mask=dec_mask), labels, weight)
        loss.backward()
    assert torch.isfinite(loss)
    assert loss.item() < 0.6 * first.item(), (first.item(), loss.item())


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("kind", ["decoder", "encoder_decoder"])
def test_causal_mask_never_leaks_the_future(kind, position):
    """README, Tests: "causal masks never leak the future": changing tokens after t leaves outputs up to t unchanged."""
    torch.manual_seed(0)
    model = build_model(tiny(kind=kind, position=position, n_layers=2), VOCAB).eval()
    ids = torch.randint(1, VOCAB, (2, 8))
    changed = ids.clone()
    t = 4
    changed[:, t + 1:] = (changed[:, t + 1:] + 7) % VOCAB
    with torch.no_grad():
        if kind == "decoder":
            a, b = model(ids).logits, model(changed).logits
        else:
            src = torch.randint(1, VOCAB, (2, 6))
            a, b = model(src, ids).logits, model(src, changed).logits
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, t + 1:], b[:, t + 1:])  # the test can see a change


def _scramble_padding(ids, mask):
    out = ids.clone()
    out[mask == 0] = (out[mask == 0] + 5) % VOCAB
    return out


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("kind,side", [("encoder", "right"), ("decoder", "right"), ("decoder", "left")])
def test_padding_never_changes_real_tokens(kind, side, position):
    """README, Tests: "padding never changes real tokens": whatever sits under the padding mask."""
    torch.manual_seed(0)
    model = build_model(tiny(kind=kind, position=position, n_layers=2), VOCAB).eval()
    ids = torch.randint(1, VOCAB, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    if side == "right":
        mask[0, 4:] = 0
    else:
        mask[0, :3] = 0
    with torch.no_grad():
        a = model(ids, mask).logits
        b = model(_scramble_padding(ids, mask), mask).logits
    real = mask.bool()
    torch.testing.assert_close(a[real], b[real], atol=1e-6, rtol=0)
    assert torch.isfinite(a).all()


@pytest.mark.parametrize("position", POSITIONS)
def test_source_padding_never_leaks_through_cross_attention(position):
    """README, Tests: "padding never changes real tokens", for the source seen through cross-attention."""
    torch.manual_seed(0)
    model = build_model(tiny(kind="encoder_decoder", position=position, n_layers=2), VOCAB).eval()
    src = torch.randint(1, VOCAB, (2, 7))
    src_mask = torch.ones(2, 7, dtype=torch.long)
    src_mask[1, 3:] = 0
    tgt = torch.randint(1, VOCAB, (2, 5))
    with torch.no_grad():
        a = model(src, tgt, src_mask).logits
        b = model(_scramble_padding(src, src_mask), tgt, src_mask).logits
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_a_whole_padded_row_is_finite():
    model = build_model(tiny(kind="encoder"), VOCAB).eval()
    out = model(torch.randint(1, VOCAB, (2, 4)), torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])).logits
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("position", POSITIONS)
def test_encoder_is_permutation_equivariant_only_without_positions(position):
    torch.manual_seed(0)
    model = build_model(tiny(kind="encoder", position=position, n_layers=2), VOCAB).eval()
    if position == "t5_bias":  # std-0.02 initial biases barely move outputs; make them count
        torch.nn.init.normal_(model.encoder.position.bias.weight, std=1.0)
    ids = torch.randint(1, VOCAB, (1, 6))
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    with torch.no_grad():
        a = model(ids).logits[:, perm]
        b = model(ids[:, perm]).logits
    if position == "none":
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    else:
        assert not torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_backends_agree_on_whole_models(kind, position):
    """README, Tests: "`sdpa` and `explicit` agree to 1e-5", on whole models of every kind and position scheme."""
    torch.manual_seed(0)
    cfg = tiny(kind=kind, position=position, n_layers=2, n_heads=4, n_kv_heads=2)
    a = build_model({**cfg, "attention_kernel": "sdpa"}, VOCAB).eval()
    b = build_model({**cfg, "attention_kernel": "explicit"}, VOCAB).eval()
    b.load_state_dict(a.state_dict())
    ids = torch.randint(1, VOCAB, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[0, 4:] = 0
    with torch.no_grad():
        torch.testing.assert_close(run(a, ids, mask), run(b, ids, mask), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["decoder", "encoder_decoder"])
def test_logits_to_keep_projects_only_the_last_positions(kind):
    torch.manual_seed(0)
    model = build_model(tiny(kind=kind, dropout=0.0), VOCAB).eval()
    ids = torch.randint(1, VOCAB, (2, 6))
    if kind == "decoder":
        full, last = model(ids).logits, model(ids, logits_to_keep=2).logits
    else:
        memory = model.encode(ids)
        full, last = model.decode(ids, memory).logits, model.decode(ids, memory, logits_to_keep=2).logits
    assert last.shape == (2, 2, VOCAB)
    torch.testing.assert_close(last, full[:, -2:])


@pytest.mark.parametrize("position", POSITIONS)
def test_models_move_between_dtypes_and_still_run(position):
    model = build_model(tiny(kind="decoder", position=position), VOCAB).to(torch.float64)
    ids = torch.randint(1, VOCAB, (2, 5))
    assert model(ids).logits.dtype == torch.float64
