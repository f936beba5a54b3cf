"""What each model kind has: its stacks, cross-attention, token types, the objective that trains it to
generate. Code that differs by kind reads these declarations instead of comparing the kind's name,
so a new kind is a row here (and its model class), not a search for every ``kind == ...``.

A leaf: plain data, importable by any layer (config, data, models, describe, testing)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class Kind:
    name: str
    stacks: Tuple[str, ...]  # the stacks it has, in the order they run: "encoder" (bidirectional), "decoder" (causal)
    cross_attention: bool  # the decoder attends to the encoder's output: it reads a source and a target
    token_types: bool  # token-type (segment) embeddings can be added to the tokens' (BERT)
    generative_objective: Optional[str]  # the objective that trains it to generate (source -> target tasks)

    def has(self, stack: str) -> bool:
        return stack in self.stacks

    @property
    def decodes(self) -> bool:
        """It generates token by token through a causal decoder (a decoding state, a decoding step's FLOPs)."""
        return self.has("decoder")

    @property
    def decoder_only(self) -> bool:
        """One causal sequence: a source is a prompt in the same sequence as its answer."""
        return self.stacks == ("decoder",)


KINDS: Dict[str, Kind] = {k.name: k for k in (
    Kind("encoder", ("encoder",), cross_attention=False, token_types=True, generative_objective=None),
    Kind("decoder", ("decoder",), cross_attention=False, token_types=False, generative_objective="lm"),
    Kind("encoder_decoder", ("encoder", "decoder"), cross_attention=True, token_types=False,
         generative_objective="seq2seq"),
)}


def kind_of(m) -> Kind:
    """The declarations of ``m``'s kind (``m``: a ModelConfig, or anything with a ``kind``)."""
    return KINDS[m.kind]
