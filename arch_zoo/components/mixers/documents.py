"""Documents kept apart inside a packed batch (``task.documents: separate``).

The stack is given ``document_ids`` (B, L): one id per token, a new id where a document starts. Each
mixer declares how it keeps documents apart (``Mixer.document_boundaries``):

* ``"mask"``: it moves information between positions only through ``inputs.mask`` (softmax attention
  in all its forms: MHA/GQA/MQA, sliding windows, differential, MLA), which the stack has made
  block-diagonal by document; nothing else to do.
* ``"rows"`` (the default, so every plugin is correct without a line of code): the layer cuts the
  packed rows into one row per document (right-padded to the longest, ``inputs.tokens`` marking the
  padding), runs the mixer on those rows with no state, and puts each output back where its token came
  from. A recurrent state or a convolution window then starts from zero at every document start, as
  flash-linear-attention's variable-length ``cu_seqlens`` kernels do, whatever the mixer computes.
* ``"native"``: the mixer reads ``inputs.documents.starts`` (B, L) itself and resets its own state there
  (cheaper than re-packing; the conformance oracle's ``packed_equals_separate`` holds it to the same
  result). ``linear_attention`` does: causal, a log-decay of ``RESET_LOG_DECAY`` at each start empties
  its state (``reset_log_decay``); bidirectional, each query sums over its own document's keys.

Positions restart at every document start, as in fla's variable-length kernels, so absolute schemes
(learned, sinusoidal) give each document the positions, and so the logits, it would get alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from ..masks import document_starts

WAYS = ("mask", "rows", "native")
# A log-decay that empties a state: exp() of it is 0 in every float dtype, and it is finite, so the
# cumulative sums of a chunked scan never meet inf - inf (and stay exact where the other decays are 0).
RESET_LOG_DECAY = -1e4


def positions_within(document_ids: Tensor, positions: Tensor) -> Tensor:
    """``positions`` (B|1, L) counted again from 0 at every document start."""
    starts = document_starts(document_ids)
    index = torch.arange(starts.shape[-1], device=starts.device).expand_as(starts)
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(-1).values  # each token's document start
    positions = positions.expand_as(document_ids)
    return positions - positions.gather(-1, first)


@dataclass
class DocumentRows:
    """The packed rows cut into one row per document: ``index`` (R, W) the packed token (flattened
    B * L) each row position holds (padding repeats a row's first), ``valid`` (R, W) which hold one,
    ``back`` (B * L) where each packed token sits in the flattened rows; ``starts`` (B, L) the packed
    document starts (for a ``"native"`` mixer); ``inputs`` the MixerInputs of the rows (set by the stack)."""

    index: Tensor
    valid: Tensor
    back: Tensor
    starts: Tensor
    inputs: Optional[object] = None

    @classmethod
    def of(cls, document_ids: Tensor) -> "DocumentRows":
        starts = document_starts(document_ids)
        batch, length = starts.shape
        flat = starts.reshape(-1)
        begin = flat.nonzero().squeeze(-1)  # every document's first packed token
        ends = torch.cat((begin[1:], begin.new_tensor([flat.numel()])))
        # a document never runs past its batch row: row starts are document starts
        sizes = ends - begin
        width = int(sizes.max())
        offset = torch.arange(width, device=flat.device)
        valid = offset < sizes[:, None]
        index = torch.where(valid, begin[:, None] + offset, begin[:, None])
        back = torch.empty(flat.numel(), dtype=torch.long, device=flat.device)
        back[index[valid]] = torch.arange(valid.numel(), device=flat.device).view_as(valid)[valid]
        return cls(index, valid, back, starts)

    def gather(self, x: Tensor) -> Tensor:
        """(B, L, ...) packed -> (R, W, ...) one row per document."""
        return x.reshape(-1, *x.shape[2:])[self.index]

    def scatter(self, y: Tensor, batch: int) -> Tensor:
        """(R, W, ...) -> (B, L, ...): each packed token's output from its document's row."""
        return y.reshape(-1, *y.shape[2:])[self.back].view(batch, -1, *y.shape[2:])


def same_document(starts: Tensor) -> Tensor:
    """(B, L, L) in float: 1 where two positions are of one document (``starts`` (B, L) bool)."""
    index = starts.long().cumsum(-1)
    return (index[:, :, None] == index[:, None, :]).float()


def reset_log_decay(inputs, heads: int, like: Tensor) -> Optional[Tensor]:
    """(B, heads, L) in ``like``'s dtype: a log-decay of RESET_LOG_DECAY at every document start, 0
    elsewhere (a ``"native"`` mixer adds it to its own); None without documents."""
    rows = getattr(inputs, "documents", None)
    if rows is None:
        return None
    return (rows.starts.to(like.dtype) * RESET_LOG_DECAY).unsqueeze(1).expand(-1, heads, -1)


def mix(mixer, x: Tensor, inputs, state) -> Tensor:
    """``mixer(x, inputs, state)`` with documents kept apart as the mixer declares (see above)."""
    rows = getattr(inputs, "documents", None)
    if rows is None or getattr(mixer, "document_boundaries", "rows") != "rows":
        return mixer(x, inputs, state)
    return rows.scatter(mixer(rows.gather(x), rows.inputs, None), x.shape[0])
