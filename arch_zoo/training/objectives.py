"""Training objectives, one registered class each: how a batch reaches the model, which head output
the loss needs, the loss and the metrics, and how a prompt is decoded. A task names its objective
(``TaskData.objective``); callers ask the objective and never branch on its name or the model's
kind, so a new objective is one class and one registration.

Metrics are accumulated as sums and counts and divided once per evaluation, so the result does not
depend on how batches split."""
from __future__ import annotations

import math
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..components.heads import SEQUENCE_CLASSES, TOKEN_CLASSES, VOCAB_LOGITS
from ..components.moe import router_aux_loss, update_selection_biases
from ..data.tasks.base import IGNORE
from ..errors import ConfigError
from ..metrics import base_name, unit_of
from ..registry import NoOptions, Registry

OBJECTIVES = Registry("objectives", "objective")


def loss_fn(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE,
                           label_smoothing=label_smoothing, reduction=reduction)


def target_bytes(labels: Tensor, token_bytes: Tensor) -> Tensor:
    """UTF-8 bytes of text the scored targets in ``labels`` cover (``token_bytes``: bytes per id)."""
    scored = labels != IGNORE
    return token_bytes.to(labels.device)[labels[scored]].sum()


def z_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean over scored positions of log(sum exp(logits))^2, the squared log-normaliser of the output
    softmax (PaLM, Chowdhery et al. 2022; Wortsman et al. 2023): it keeps the logits from drifting up
    together, which the softmax alone cannot see."""
    lse = torch.logsumexp(logits.float(), dim=-1)
    scored = labels != IGNORE
    return lse[scored].square().sum() / scored.sum().clamp(min=1)


def documents(batch: Mapping[str, Tensor]) -> Dict[str, Tensor]:
    """The model keywords that keep a batch's packed documents apart (``task.documents: separate``)."""
    return {"document_ids": batch["document_ids"]} if "document_ids" in batch else {}


class Objective:
    """Token-level prediction over the encoder's input (the base for every objective)."""

    needs = VOCAB_LOGITS  # what a head must produce (checked before a run starts; see components.heads)
    label_offset = 0  # labels[label_offset:] are the ones predicted (lm: the first token is never a target)
    decoder_inputs = False  # examples carry decoder_input_ids too (FLOPs are counted at both lengths)
    accuracy_name = "token_accuracy"
    language_model = True  # perplexity (and bits per character) mean something
    per_example = False  # one label per example: count examples too

    def __init__(self, options=None):
        self.options = options

    def forward(self, model, batch: Mapping[str, Tensor]) -> Tuple[Tensor, Tensor]:
        """(logits, labels), aligned: logits[..., i, :] predicts labels[..., i]."""
        return model(batch["input_ids"], batch["attention_mask"], **documents(batch)).logits, batch["labels"]

    def stack_masks(self, batch: Mapping[str, Tensor]) -> Dict[str, Optional[Tensor]]:
        """The real tokens of each stack the forward ran (the router load-balancing loss counts them)."""
        return {"encoder": batch.get("attention_mask"), "decoder": batch.get("attention_mask")}

    def aux_loss(self, model, batch: Mapping[str, Tensor]) -> Optional[Tensor]:
        """The router load-balancing loss of the training forward just run (None without mixture-of-experts
        layers); routers with aux-loss-free balancing update their selection bias from its load here."""
        masks = self.stack_masks(batch)
        update_selection_biases(model, masks)
        return router_aux_loss(model, masks)

    def metric_sums(self, logits: Tensor, labels: Tensor, token_bytes: Optional[Tensor] = None) -> Dict[str, float]:
        """Sums for loss (unsmoothed, per target token or sequence) and accuracy; with ``token_bytes``
        (UTF-8 bytes per token id, a text task's), the bytes of text the scored targets cover."""
        loss_sum = loss_fn(logits, labels, reduction="sum").item()
        valid = labels != IGNORE
        correct = (logits.argmax(-1) == labels) & valid
        sums = {"loss": loss_sum, "count": float(valid.sum()), "correct": float(correct.sum())}
        if self.per_example:
            sums["examples"] = float(labels.numel())
        if token_bytes is not None and self.language_model:
            sums["bytes"] = float(target_bytes(labels, token_bytes))
        return sums

    def finish(self, sums: Mapping[str, float], chars_per_token: float = 0.0) -> Dict[str, float]:
        """Turn accumulated sums into metrics. Bits per byte are the summed loss over the summed bytes
        of the scored targets (so a split's long and short windows weigh by their text, not equally)."""
        n = max(sums.get("count", 0.0), 1.0)
        loss = sums["loss"] / n
        out = {"loss": loss, self.accuracy_name: sums["correct"] / n}
        if self.language_model:
            out["perplexity"] = math.exp(min(loss, 50.0))
            if chars_per_token:
                out["bpc"] = loss / math.log(2) / chars_per_token
            if sums.get("bytes"):
                out["bpb"] = sums["loss"] / math.log(2) / sums["bytes"]
        return out

    def metric_names(self, chars_per_token: float = 0.0, bytes_known: bool = False) -> List[str]:
        """What ``finish`` returns, without data (a sweep checks its metric against these before training)."""
        sums = {"loss": 1.0, "count": 1.0, "correct": 1.0, **({"bytes": 1.0} if bytes_known else {})}
        return list(self.finish(sums, chars_per_token))

    def unit(self, metric: str) -> Optional[str]:
        """What ``metric`` is an average over (summary.json's ``units``; metrics.UNITS): one label per
        example makes the loss per example."""
        if self.per_example and base_name(metric) in ("loss", "perplexity", "accuracy"):
            return "example"
        return unit_of(metric)

    def decoder_start(self, bos: int) -> Optional[int]:
        """The token a decoder starts from when generating for a prompt (None: the prompt itself)."""
        return None


@OBJECTIVES.register("lm", NoOptions, "next-token prediction: position i predicts token i + 1 (decoder)")
class LanguageModelling(Objective):
    label_offset = 1

    def forward(self, model, batch):
        logits = model(batch["input_ids"], batch["attention_mask"], **documents(batch)).logits
        labels = batch["labels"][:, 1:]
        if "document_ids" in batch:  # a document's first token is, like a window's, predicted from nothing of it
            ids = batch["document_ids"]
            labels = labels.masked_fill(ids[:, 1:] != ids[:, :-1], IGNORE)
        return logits[:, :-1], labels


@OBJECTIVES.register("seq2seq", NoOptions, "source -> target through an encoder and a decoder (teacher forcing)")
class SequenceToSequence(Objective):
    decoder_inputs = True

    def forward(self, model, batch):
        out = model(batch["input_ids"], batch["decoder_input_ids"], batch["attention_mask"],
                    batch["decoder_attention_mask"])
        return out.logits, batch["labels"]

    def stack_masks(self, batch):
        return {"encoder": batch.get("attention_mask"), "decoder": batch.get("decoder_attention_mask")}

    def decoder_start(self, bos: int) -> Optional[int]:
        return bos


@OBJECTIVES.register("mlm", NoOptions, "masked tokens predicted from both sides (encoder; BERT)")
class MaskedLanguageModelling(Objective):
    pass


@OBJECTIVES.register("classification", NoOptions, "one class per sequence (a pooled head)")
class Classification(Objective):
    needs = SEQUENCE_CLASSES
    accuracy_name = "accuracy"
    language_model = False
    per_example = True


@OBJECTIVES.register("token_classification", NoOptions, "one class per token (tagging)")
class TokenClassification(Objective):
    needs = TOKEN_CLASSES
    accuracy_name = "accuracy"
    language_model = False


def objective(name: str) -> Objective:
    """The objective a task names; a task naming none that is registered is the task's mistake."""
    try:
        entry = OBJECTIVES.get(name, "task")
    except ConfigError as exc:
        raise ConfigError("task", f"the task's objective: {exc.message}") from None
    return entry.factory(NoOptions())


@torch.no_grad()
def greedy_outputs(model, prompts, targets, objective: Objective, bos: int, eos: int, pad: int, batch_size: int,
                   compile: bool = False, tokenizer_size: Optional[int] = None) -> List[Tuple[List[int], bool]]:
    """Each prompt's greedy decoding (at most len(target) + 1 tokens), without its eos, and
    whether it ended with eos, in the order given. Prompts are decoded grouped by length (then by
    target length), so a batch pads little and stops as soon as its longest target allows; each
    output is cut to its own budget, so it does not depend on the batch it was decoded in.
    ``compile``: through the static cache and compiled step, every batch ``batch_size`` rows (the
    last filled up with copies of its first prompt, whose outputs are dropped) so that one compiled
    step serves every batch of a cache length. ``tokenizer_size``: no id past it is chosen (rows an
    imported checkpoint padded its vocabulary with)."""
    from ..generation import generate

    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), len(targets[i])))
    rows = min(batch_size, len(prompts))
    outputs: List[Tuple[List[int], bool]] = [([], False)] * len(prompts)
    for start in range(0, len(order), rows):
        group = order[start:start + rows]
        chunk = [prompts[i] for i in group]
        if compile:
            chunk += [chunk[0]] * (rows - len(chunk))
        longest = max(len(targets[i]) for i in group) + 1
        out = generate(model, chunk, strategy="greedy", max_new_tokens=longest, eos_token_id=eos, pad_token_id=pad,
                       decoder_start_token_id=objective.decoder_start(bos), compile=compile,
                       tokenizer_size=tokenizer_size)
        for i, hyps in zip(group, out.to_lists()):
            hyp = hyps[0][:len(targets[i]) + 1]  # its own budget, whatever its batch's longest target
            ended = hyp[-1:] == [eos]
            outputs[i] = (hyp[:-1] if ended else hyp, ended)
    return outputs


def exact_match(outputs: Sequence[Tuple[List[int], bool]], targets) -> float:
    """Share of held-out examples whose greedy decoding equals the target exactly (then eos)."""
    hits = sum(int(ended and hyp == list(target)) for (hyp, ended), target in zip(outputs, targets))
    return hits / max(len(targets), 1)
