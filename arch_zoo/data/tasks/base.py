"""The task interface and registry.

A task turns its options and a seed into tokenized ``Example`` lists for the train, val and
test splits (plus optional extra evaluation splits such as ``val@1024``), deterministically. It
declares the model kinds it suits and the objective its examples follow; the training module
only looks at the objective, never at the task's name.

Objectives and what an Example holds for them (ids are token ids, -100 labels are ignored):

* ``lm``                   decoder-only: ``input_ids``; ``labels`` aligned with input_ids (the
                           module shifts them for next-token prediction).
* ``seq2seq``              encoder-decoder: ``input_ids`` (source), ``decoder_input_ids``
                           (bos + target), ``labels`` (target + eos).
* ``mlm``                  encoder: ``input_ids`` with masked tokens, ``labels`` the originals.
* ``classification``       encoder: ``input_ids``, ``labels`` one class id.
* ``token_classification`` encoder: ``input_ids``, ``labels`` one class id per token.

For generation-scored tasks (``exact_match``), ``prompt_ids`` is what the model is given
(decoder-only: bos + prompt + sep; seq2seq: the source) and ``target_ids`` the answer without eos.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ...registry import Registry
from ..example import IGNORE, Example
from ..tokenizers import Tokenizer

TASKS = Registry("tasks", "task")
OBJECTIVES = ("lm", "seq2seq", "mlm", "classification", "token_classification")


@dataclass
class TaskData:
    """What a task hands to training: the tokenizer, the objective and the tokenized splits."""

    tokenizer: Tokenizer
    objective: str
    splits: Dict[str, Sequence[Example]]  # "train", "val", "test", extra eval splits "val@L"; corpus tasks: lazy Windows
    n_classes: Optional[int] = None  # classification tasks
    metrics: Tuple[str, ...] = ()  # extra metrics: "exact_match", "bpc", "bpb", "accuracy"
    info: Dict[str, object] = field(default_factory=dict)  # provenance: files, text hash, sizes
    token_bytes: Optional[np.ndarray] = None  # text tasks: UTF-8 bytes per token id (bits per byte; text_bytes.py)

    @property
    def eval_splits(self) -> List[str]:
        return ["val"] + sorted((k for k in self.splits if k.startswith("val@")), key=lambda k: int(k[4:]))


class Task:
    """Base class. Subclasses set ``kinds`` and implement ``build``."""

    kinds: Tuple[str, ...] = ()

    def __init__(self, options, seed: int, model_kind: str, max_seq_len: int):
        self.options, self.seed, self.model_kind, self.max_seq_len = options, seed, model_kind, max_seq_len

    @classmethod
    def check(cls, options, model_kind: str, max_seq_len: int, key: str = "task") -> None:
        """Raise ``ConfigError(key_path, message)`` for what is wrong before building (missing files,
        unknown tokenizer, sequences longer than ``max_seq_len``). Nothing to check by default."""

    def build(self) -> TaskData:
        raise TypeError("Task is abstract; use a registered task")

    @classmethod
    def prepare(cls, options, cache_dir=None, log=None, progress: bool = False):
        """Tokenize the task's corpus into its token store and return it (``arch-zoo prepare``, and
        a sweep before it dispatches); None for a task that generates its data (nothing to prepare)."""
        return None

    @classmethod
    def encode_prompt(cls, tokenizer: Tokenizer, text: str, model_kind: str) -> List[int]:
        """A user's prompt (``arch-zoo generate``) laid out as this task lays out its inputs; by
        default the plain text, which a language model continues."""
        return tokenizer.encode(text)


def _pad(rows: Sequence[Sequence[int]], value: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def collate(examples: Sequence[Example], pad_id: int) -> Dict[str, torch.Tensor]:
    """Right-pad a batch into tensors with HF names: input_ids, attention_mask, labels, ..."""
    batch = {"input_ids": _pad([e.input_ids for e in examples], pad_id)}
    batch["attention_mask"] = _pad([[1] * len(e.input_ids) for e in examples], 0)
    if isinstance(examples[0].labels, int):
        batch["labels"] = torch.tensor([e.labels for e in examples], dtype=torch.long)
    else:
        batch["labels"] = _pad([e.labels for e in examples], IGNORE)
    if examples[0].document_ids is not None:  # padding is a document of its own (id -1)
        batch["document_ids"] = _pad([e.document_ids for e in examples], -1)
    if examples[0].decoder_input_ids is not None:
        batch["decoder_input_ids"] = _pad([e.decoder_input_ids for e in examples], pad_id)
        batch["decoder_attention_mask"] = _pad([[1] * len(e.decoder_input_ids) for e in examples], 0)
    return batch
