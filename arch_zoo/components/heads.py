"""Output heads: what a model does with its final hidden states.

Each head declares ``kinds`` (the model kinds it fits) and ``produces`` (what its output is); a
training objective asks for what it needs, never for a head's name, so a registered head trains
on every task whose objective needs what it produces."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import Registry

HEADS = Registry("heads", "head")

# What a head's output is (its ``produces``).
VOCAB_LOGITS = "vocabulary logits per position"
SEQUENCE_CLASSES = "class logits per sequence"
TOKEN_CLASSES = "class logits per token"
EMBEDDING = "a pooled vector per sequence"


@dataclass(frozen=True)
class HeadContext:
    d_model: int
    vocab_size: int
    bias: bool


def pool(hidden: Tensor, attention_mask: Optional[Tensor], pooling: str) -> Tensor:
    """(B, L, d) -> (B, d): the first token ('cls') or the mean over real tokens ('mean')."""
    if pooling == "cls":
        return hidden[:, 0]
    if attention_mask is None:
        return hidden.mean(dim=1)
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


@dataclass(frozen=True)
class LMHeadOptions:
    bias: bool = False
    scale_input: bool = False  # multiply the hidden states by d_model**-0.5 first (T5, whose output is tied)


@HEADS.register("lm", LMHeadOptions, "vocabulary logits per position (causal LM, seq2seq, or masked LM)")
class LMHead(nn.Module):
    kinds = ("encoder", "decoder", "encoder_decoder")
    produces = VOCAB_LOGITS

    def __init__(self, options: LMHeadOptions, ctx: HeadContext):
        super().__init__()
        self.proj = nn.Linear(ctx.d_model, ctx.vocab_size, bias=options.bias)
        self.scale = ctx.d_model ** -0.5 if options.scale_input else None

    def tie(self, embedding: nn.Embedding) -> None:
        self.proj.weight = embedding.weight

    def forward(self, hidden: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:
        return self.proj(hidden if self.scale is None else hidden * self.scale)


ACTIVATIONS = {"gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu}


@dataclass(frozen=True)
class MLMHeadOptions:
    activation: Literal["gelu", "gelu_tanh", "relu"] = "gelu"
    norm_eps: float = 1e-12  # the transform's LayerNorm

    def __post_init__(self):
        if self.norm_eps <= 0:
            raise ValueError(f"norm_eps must be positive, got {self.norm_eps}")


@HEADS.register("mlm", MLMHeadOptions, "masked-LM head: dense, activation, LayerNorm, then vocabulary logits "
                "with a bias (BERT)")
class MLMHead(nn.Module):
    kinds = ("encoder",)
    produces = VOCAB_LOGITS

    def __init__(self, options: MLMHeadOptions, ctx: HeadContext):
        super().__init__()
        self.transform = nn.Linear(ctx.d_model, ctx.d_model)
        self.act = ACTIVATIONS[options.activation]
        self.norm = nn.LayerNorm(ctx.d_model, eps=options.norm_eps)
        self.proj = nn.Linear(ctx.d_model, ctx.vocab_size)

    def tie(self, embedding: nn.Embedding) -> None:
        self.proj.weight = embedding.weight

    def forward(self, hidden: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:
        return self.proj(self.norm(self.act(self.transform(hidden))))


@dataclass(frozen=True)
class ClassifierOptions:
    n_classes: int = 2
    pooling: Literal["cls", "mean"] = "cls"

    def __post_init__(self):
        if self.n_classes < 1:
            raise ValueError(f"n_classes must be >= 1, got {self.n_classes}")


@HEADS.register("sequence_classification", ClassifierOptions, "one label per sequence from pooled states")
class SequenceClassificationHead(nn.Module):
    kinds = ("encoder",)
    produces = SEQUENCE_CLASSES

    def __init__(self, options: ClassifierOptions, ctx: HeadContext):
        super().__init__()
        self.pooling = options.pooling
        self.proj = nn.Linear(ctx.d_model, options.n_classes)

    def forward(self, hidden, attention_mask=None):
        return self.proj(pool(hidden, attention_mask, self.pooling))


@dataclass(frozen=True)
class TokenClassifierOptions:
    n_classes: int = 2

    def __post_init__(self):
        if self.n_classes < 1:
            raise ValueError(f"n_classes must be >= 1, got {self.n_classes}")


@HEADS.register("token_classification", TokenClassifierOptions, "one label per token")
class TokenClassificationHead(nn.Module):
    kinds = ("encoder",)
    produces = TOKEN_CLASSES

    def __init__(self, options: TokenClassifierOptions, ctx: HeadContext):
        super().__init__()
        self.proj = nn.Linear(ctx.d_model, options.n_classes)

    def forward(self, hidden, attention_mask=None):
        return self.proj(hidden)


@dataclass(frozen=True)
class EmbeddingOptions:
    pooling: Literal["cls", "mean"] = "mean"
    normalize: bool = True  # unit L2 norm, ready for cosine similarity


@HEADS.register("embedding", EmbeddingOptions, "one pooled vector per sequence (sentence embedding)")
class EmbeddingHead(nn.Module):
    kinds = ("encoder",)
    produces = EMBEDDING

    def __init__(self, options: EmbeddingOptions, ctx: HeadContext):
        super().__init__()
        self.options = options

    def forward(self, hidden, attention_mask=None):
        pooled = pool(hidden, attention_mask, self.options.pooling)
        return torch.nn.functional.normalize(pooled, dim=-1) if self.options.normalize else pooled
