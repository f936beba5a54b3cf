"""Log-likelihoods of continuations, batched: under a decoder model (each context run once) and
under an encoder-decoder (the context is the source, the continuation the target).

A multiple-choice question scores every choice after the same context; the context is run once
(left-padded with the other contexts of its batch, into a key/value cache), the cache is copied
to each of its continuations, and only the continuations are run after it. A continuation's first
token is scored by the context's last logits, the rest by the continuation pass. This is the
cached path ``generate`` uses, so it inherits the grid invariants the tests hold it to (padding
never changes real tokens' outputs; cached decoding equals the full forward). An encoder-decoder
scores as lm_eval's ``hf`` model scores a seq2seq model: the encoder reads the context (cut from the
left to ``max_length``), the decoder reads the decoder start token and the continuation but its last
token, and the continuation's log-probabilities are summed.

Torch and the model library only: lm_eval's request objects are unpacked in ``lm.py``."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import torch
from torch import Tensor

from ..generation.prompts import left_pad
from ..models.transformer import DecoderModel, EncoderDecoderModel

Request = Tuple[Sequence[int], Sequence[int]]  # (context tokens, continuation tokens)


def check_request(context: Sequence[int], continuation: Sequence[int], max_length: int) -> None:
    if not context or not continuation:
        raise ValueError("a request needs a non-empty context and continuation")
    if len(continuation) > max_length:
        raise ValueError(f"a continuation of {len(continuation)} tokens is longer than the model's "
                         f"{max_length} positions")


def truncate(context: Sequence[int], continuation: Sequence[int], max_length: int) -> Tuple[tuple, tuple]:
    """Cut the context from the left so that the model reads at most ``max_length`` tokens
    (context + continuation minus its last token), as lm_eval's ``hf`` model does."""
    check_request(context, continuation, max_length)
    keep = max_length + 1 - len(continuation)
    return tuple(context[-keep:]), tuple(continuation)


def _batches(contexts: List[tuple], rows: Dict[tuple, List[int]], batch_size: int) -> List[List[tuple]]:
    """Unique contexts, longest first, grouped so that a batch holds at most ``batch_size``
    continuations (a context with more continuations than that is a batch of its own)."""
    out: List[List[tuple]] = []
    for ctx in sorted(contexts, key=lambda c: (-len(c), c)):
        n = len(rows[ctx])
        if out and sum(len(rows[c]) for c in out[-1]) + n <= batch_size:
            out[-1].append(ctx)
        else:
            out.append([ctx])
    return out


@torch.inference_mode()
def loglikelihoods(model: DecoderModel, requests: Sequence[Request], max_length: int, batch_size: int = 16,
                   pad_token_id: int = 0) -> List[Tuple[float, bool]]:
    """(sum of the continuation's log-probabilities, whether greedy decoding gives it) per request."""
    device = next(model.parameters()).device
    cut = [truncate(c, k, max_length) for c, k in requests]
    rows: Dict[tuple, List[int]] = {}
    for i, (ctx, _) in enumerate(cut):
        rows.setdefault(ctx, []).append(i)
    results: List[Tuple[float, bool]] = [(0.0, False)] * len(cut)
    for group in _batches(list(rows), rows, batch_size):
        ids, mask = left_pad(group, pad_token_id, device)
        cache = model.new_cache()
        first = model(ids, mask, cache=cache, logits_to_keep=1).logits[:, -1].float().log_softmax(-1)
        index = [g for g, ctx in enumerate(group) for _ in rows[ctx]]
        members = [i for ctx in group for i in rows[ctx]]
        conts = [cut[i][1] for i in members]
        gather = torch.tensor(index, device=device)
        first = first.index_select(0, gather)
        logps = [first[r].unsqueeze(0) for r in range(len(members))]
        longest = max(len(c) for c in conts)
        if longest > 1:  # the continuations' own tokens, after their contexts' cache
            cache.reorder(gather)
            rest, rest_mask = _right_pad([c[:-1] for c in conts], pad_token_id, device)
            start = mask.sum(-1).index_select(0, gather)
            positions = start.unsqueeze(1) + torch.arange(longest - 1, device=device)
            full_mask = torch.cat((mask.index_select(0, gather), rest_mask), dim=1)
            more = model(rest, full_mask, positions, cache=cache).logits.float().log_softmax(-1)
            logps = [torch.cat((logps[r], more[r, : len(conts[r]) - 1])) for r in range(len(members))]
        for r, i in enumerate(members):
            target = torch.tensor(conts[r], device=device)
            picked = logps[r].gather(-1, target.unsqueeze(-1)).squeeze(-1)
            results[i] = (float(picked.sum()), bool((logps[r].argmax(-1) == target).all()))
    return results


@torch.inference_mode()
def seq2seq_loglikelihoods(model: EncoderDecoderModel, requests: Sequence[Request], max_length: int,
                           batch_size: int = 16, pad_token_id: int = 0, decoder_start_token_id: int = 0
                           ) -> List[Tuple[float, bool]]:
    """(sum of the continuation's log-probabilities, whether greedy decoding gives it) per request,
    the context as the encoder's source and the continuation as the decoder's target."""
    device = next(model.parameters()).device
    results: List[Tuple[float, bool]] = [(0.0, False)] * len(requests)
    for ctx, cont in requests:
        check_request(ctx, cont, max_length)
    order = sorted(range(len(requests)), key=lambda i: (-len(requests[i][0]), -len(requests[i][1])))
    for start in range(0, len(order), batch_size):
        members = order[start:start + batch_size]
        source, source_mask = _right_pad([tuple(requests[i][0])[-max_length:] for i in members], pad_token_id, device)
        conts = [tuple(requests[i][1]) for i in members]
        target, target_mask = _right_pad([(decoder_start_token_id,) + c[:-1] for c in conts], pad_token_id, device)
        logps = model(source, target, source_mask, target_mask).logits.float().log_softmax(-1)
        for r, i in enumerate(members):
            wanted = torch.tensor(conts[r], device=device)
            scored = logps[r, : len(conts[r])]
            picked = scored.gather(-1, wanted.unsqueeze(-1)).squeeze(-1)
            results[i] = (float(picked.sum()), bool((scored.argmax(-1) == wanted).all()))
    return results


def _right_pad(sequences: Sequence[Sequence[int]], pad_token_id: int, device) -> Tuple[Tensor, Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        if s:
            ids[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
            mask[i, : len(s)] = 1
    return ids.to(device), mask.to(device)
