"""Losses and per-batch metric sums for each task objective. Metrics are accumulated as sums and
counts and divided once per evaluation, so the result does not depend on how batches split."""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..components.moe import router_aux_loss
from ..data.tasks.base import IGNORE
from ..components.heads import SEQUENCE_CLASSES, TOKEN_CLASSES, VOCAB_LOGITS

# What each objective needs a head to produce (checked before a run starts; see models.heads).
NEEDS = {"lm": VOCAB_LOGITS, "seq2seq": VOCAB_LOGITS, "mlm": VOCAB_LOGITS, "classification": SEQUENCE_CLASSES,
         "token_classification": TOKEN_CLASSES}


def forward(model, batch: Dict[str, Tensor], objective: str) -> Tuple[Tensor, Tensor]:
    """(logits, labels), aligned: logits[..., i, :] predicts labels[..., i]."""
    if objective == "seq2seq":
        out = model(batch["input_ids"], batch["decoder_input_ids"], batch["attention_mask"],
                    batch["decoder_attention_mask"])
        return out.logits, batch["labels"]
    logits = model(batch["input_ids"], batch["attention_mask"]).logits
    if objective == "lm":  # next-token prediction: position i predicts token i + 1
        return logits[:, :-1], batch["labels"][:, 1:]
    return logits, batch["labels"]


def aux_loss(model, batch: Dict[str, Tensor], objective: str) -> Optional[Tensor]:
    """The router load-balancing loss of the forward just run (None without mixture-of-experts layers),
    over the real tokens of each stack."""
    decoder_mask = batch.get("decoder_attention_mask") if objective == "seq2seq" else batch.get("attention_mask")
    return router_aux_loss(model, {"encoder": batch.get("attention_mask"), "decoder": decoder_mask})


def loss_fn(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE,
                           label_smoothing=label_smoothing, reduction=reduction)


def metric_sums(logits: Tensor, labels: Tensor, objective: str) -> Dict[str, float]:
    """Sums for loss (unsmoothed, per target token or sequence), token accuracy and, for sequence
    tasks, sequences whose every target token is right under teacher forcing."""
    loss_sum = loss_fn(logits, labels, reduction="sum").item()
    valid = labels != IGNORE
    correct = (logits.argmax(-1) == labels) & valid
    sums = {"loss": loss_sum, "count": float(valid.sum()), "correct": float(correct.sum())}
    if objective == "classification":
        sums["examples"] = float(labels.numel())
    return sums


def finish(sums: Dict[str, float], objective: str, chars_per_token: float = 0.0) -> Dict[str, float]:
    """Turn accumulated sums into metrics."""
    n = max(sums.get("count", 0.0), 1.0)
    loss = sums["loss"] / n
    out = {"loss": loss}
    if objective == "classification":
        out["accuracy"] = sums["correct"] / n
        return out
    out["token_accuracy" if objective != "token_classification" else "accuracy"] = sums["correct"] / n
    if objective in ("lm", "seq2seq", "mlm"):
        out["perplexity"] = math.exp(min(loss, 50.0))
        if chars_per_token:
            out["bpc"] = loss / math.log(2) / chars_per_token
    return out


@torch.no_grad()
def greedy_outputs(model, prompts, targets, objective: str, bos: int, eos: int, pad: int, batch_size: int
                   ) -> List[Tuple[List[int], bool]]:
    """Each prompt's greedy decoding (at most len(target) + 1 tokens), without its eos, and
    whether it ended with eos."""
    from ..generation import generate

    outputs = []
    for i in range(0, len(prompts), batch_size):
        chunk, wanted = prompts[i:i + batch_size], targets[i:i + batch_size]
        longest = max(len(t) for t in wanted) + 1
        out = generate(model, chunk, strategy="greedy", max_new_tokens=longest, eos_token_id=eos, pad_token_id=pad,
                       decoder_start_token_id=bos if objective == "seq2seq" else None)
        for tokens in out.to_lists():
            hyp = tokens[0]
            ended = hyp[-1:] == [eos]
            outputs.append((hyp[:-1] if ended else hyp, ended))
    return outputs


def exact_match(outputs: Sequence[Tuple[List[int], bool]], targets) -> float:
    """Share of held-out examples whose greedy decoding equals the target exactly (then eos)."""
    hits = sum(int(ended and hyp == list(target)) for (hyp, ended), target in zip(outputs, targets))
    return hits / max(len(targets), 1)
