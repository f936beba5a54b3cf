"""Prompt batches: token-id lists become left-padded (ids, attention_mask) tensors, checked once."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from ..components.positions import Learned
from ..errors import ConfigError

Prompts = Union[Tensor, Sequence[int], Sequence[Sequence[int]]]


def decoder_start_id(tokenizer) -> int:
    """The token an encoder-decoder's output starts from: the one its checkpoint names, for a run
    imported from Hugging Face (T5's <pad>, kept as ``declared["decoder_start_token"]``), else BOS,
    as training here starts it."""
    start = (getattr(tokenizer, "declared", None) or {}).get("decoder_start_token")
    return tokenizer.token_id(start) if start is not None else tokenizer.bos_id


def left_pad(sequences: Sequence[Sequence[int]], pad_token_id: int = 0, device=None) -> Tuple[Tensor, Tensor]:
    """Token-id lists -> (ids, attention_mask), both (B, longest) int64, padding on the left, mask 1 = real."""
    rows = [list(map(int, s)) for s in sequences]
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row):] = 1
    return ids.to(device), mask.to(device)


def as_batch(prompts: Prompts, attention_mask: Optional[Tensor], pad_token_id: int, device) -> Tuple[Tensor, Tensor]:
    """A tensor (B, L) or (L,), one token list, or a list of token lists -> checked (ids, mask) on ``device``."""
    if isinstance(prompts, Tensor):
        ids = prompts.unsqueeze(0) if prompts.dim() == 1 else prompts
        if ids.dim() != 2 or ids.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            raise ConfigError("prompts", f"expected integer token ids of shape (batch, length), got "
                              f"{tuple(prompts.shape)} {prompts.dtype}")
        mask = torch.ones_like(ids) if attention_mask is None else attention_mask.reshape(ids.shape[0], -1)
        if mask.shape != ids.shape:
            raise ConfigError("attention_mask", f"shape {tuple(attention_mask.shape)} does not match prompts "
                              f"{tuple(ids.shape)}")
    else:
        if attention_mask is not None:
            raise ConfigError("attention_mask", "only goes with a prompts tensor; token lists are padded here")
        rows = list(prompts)
        if rows and not isinstance(rows[0], (list, tuple, Tensor)):
            rows = [rows]  # one prompt given as a flat list of ids
        if not rows:
            raise ConfigError("prompts", "no prompts given")
        ids, mask = left_pad(rows, pad_token_id)
    if ids.shape[0] == 0:
        raise ConfigError("prompts", "no prompts given")
    lengths = mask.sum(-1)
    empty = (lengths == 0).nonzero().flatten().tolist()
    if empty:
        raise ConfigError("prompts", f"prompt {empty[0]} is empty; every prompt needs at least one token")
    return ids.to(device=device, dtype=torch.long), mask.to(device=device, dtype=torch.long)


def check_left_padded(mask: Tensor) -> None:
    """Decoder-only models continue from the last column, so every row must end in a real token."""
    if mask.shape[1] > 1 and bool((mask[:, 1:] < mask[:, :-1]).any()):
        raise ConfigError("attention_mask", "decoder-only prompts must be left-padded (padding before the tokens); "
                          "build them with arch_zoo.generation.left_pad")


def learned_positions(stack: nn.Module) -> Optional[int]:
    """Size of a stack's learned position table, or None when its scheme has no length limit."""
    scheme = stack.position
    return scheme.table.num_embeddings if isinstance(scheme, Learned) else None


def check_positions(model: nn.Module, mask: Tensor, max_new_tokens: int, encoder_decoder: bool) -> None:
    """Learned tables cannot extrapolate: fail before decoding rather than at the first step past the table."""
    longest = int(mask.sum(-1).max())
    if encoder_decoder:
        src_limit, tgt_limit = learned_positions(model.encoder), learned_positions(model.decoder)
        if src_limit is not None and longest > src_limit:
            raise ConfigError("prompts", f"a source of {longest} tokens is longer than the encoder's learned "
                              f"position table ({src_limit} positions)")
        if tgt_limit is not None and max_new_tokens > tgt_limit:
            raise ConfigError("max_new_tokens", f"{max_new_tokens} is more than the decoder's learned position "
                              f"table allows ({tgt_limit} positions, start token included)")
        return
    limit = learned_positions(model.decoder)
    if limit is None:
        return
    if longest > limit:
        raise ConfigError("prompts", f"a prompt of {longest} tokens is longer than the learned position table "
                          f"({limit} positions)")
    if longest + max_new_tokens - 1 > limit:  # the last new token is returned, never fed back
        raise ConfigError("max_new_tokens", f"a prompt of {longest} tokens + {max_new_tokens} new tokens needs "
                          f"{longest + max_new_tokens - 1} positions; the learned position table has {limit}")


def unknown_pieces(tokenizer, text: str) -> List[str]:
    """The pieces of ``text`` (characters, words: whatever the tokenizer splits on) that it maps to
    its unknown token, in order of first appearance; [] for byte-level tokenizers, which have none."""
    unk = getattr(tokenizer, "unk_id", None)
    if unk is None or unk not in tokenizer.encode(text):
        return []
    split = getattr(tokenizer, "split", list)
    return [p for p in dict.fromkeys(split(text)) if unk in tokenizer.encode(p)]
