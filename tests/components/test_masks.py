import torch

from arch_zoo.components.masks import causal, cross_attention_mask, self_attention_mask


def test_causal_mask_with_offset():
    m = causal(2, 5, 3)
    assert m.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


def test_padding_and_causal_combine_and_mark_empty_rows():
    mask = self_attention_mask(torch.tensor([[0, 1, 1]]), 3, 0, True)
    assert mask.keep.flatten().tolist() == [0.0, 1.0, 1.0]
    allowed = mask.allowed[0, 0]
    assert allowed[1].tolist() == [False, True, False]
    assert allowed[2].tolist() == [False, True, True]


def test_unmasked_causal_stays_implicit_for_the_fused_path():
    mask = self_attention_mask(None, 4, 0, True)
    assert mask.allowed is None and mask.is_causal


def test_cross_mask_uses_source_padding_only():
    mask = cross_attention_mask(torch.tensor([[1, 1, 0]]), 2)
    assert mask.allowed.shape == (1, 1, 2, 3)
    assert mask.allowed[0, 0].tolist() == [[True, True, False]] * 2
