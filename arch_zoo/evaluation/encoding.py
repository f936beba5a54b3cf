"""How lm_eval's text becomes the tokens a run scores, and which token starts an empty context or a
rolling window: the two choices that decide every loglikelihood.

A run imported from Hugging Face follows lm_eval's ``hf`` model, so that its scores equal the ones
users publish with ``lm_eval --model hf``: the tokenizer's BOS is the prefix (its EOS when it names no
BOS) and text is encoded with the special tokens the tokenizer adds by itself (a Llama tokenizer's
``<s>``), except a text that already starts with the prefix. A run trained here joined its training
documents with EOS and never saw a token it did not put in the text: the prefix is EOS and nothing is
added. ``add_bos_token`` and ``prefix_token_id`` (model arguments, as for ``hf``) change either rule."""
from __future__ import annotations

from typing import List, Optional

from ..errors import ConfigError
from ..generation.prompts import decoder_start_id

TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _flag(key: str, value) -> Optional[bool]:
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE + FALSE:
        return text in TRUE
    raise ConfigError(key, f"expected true or false, got {value!r}")


class Encoding:
    """``declared``: the Hugging Face special tokens an import kept with the tokenizer (None for a run
    trained here)."""

    def __init__(self, tokenizer, add_bos_token=None, prefix_token_id=None):
        self.tokenizer = tokenizer
        self.declared = getattr(tokenizer, "declared", None)
        self.add_bos_token = _flag("add_bos_token", add_bos_token)
        if prefix_token_id is not None:
            try:
                self.prefix_token_id = int(prefix_token_id)
            except (TypeError, ValueError):
                raise ConfigError("prefix_token_id", f"expected a token id, got {prefix_token_id!r}") from None
            if not 0 <= self.prefix_token_id < tokenizer.vocab_size:
                raise ConfigError("prefix_token_id", f"{self.prefix_token_id} is outside the vocabulary "
                                  f"(0..{tokenizer.vocab_size - 1})")
        elif self.declared is not None and self.declared.get("bos_token") is not None:
            self.prefix_token_id = tokenizer.token_id(self.declared["bos_token"])
        else:
            self.prefix_token_id = tokenizer.eos_id
        self.prefix_text = tokenizer.decode([self.prefix_token_id], skip_special=False)
        self.decoder_start_id = decoder_start_id(tokenizer)

    @property
    def rule(self) -> str:
        """One line for logs and results: which convention scored the run."""
        origin = "Hugging Face's (imported run)" if self.declared is not None else "arch_zoo's (trained here)"
        return (f"{origin}: prefix token {self.prefix_token_id} ({self.prefix_text!r}), special tokens "
                f"{'added' if self.adds(None) else 'not added'}")

    def adds(self, add_special_tokens: Optional[bool], text: str = "") -> bool:
        if add_special_tokens is not None:
            return add_special_tokens
        if self.prefix_text and text.startswith(self.prefix_text):
            return False  # the text carries its own prefix (as hf checks)
        return self.add_bos_token if self.add_bos_token is not None else self.declared is not None

    def encode(self, text: str, add_special_tokens: Optional[bool] = None) -> List[int]:
        add = self.adds(add_special_tokens, text)
        if self.declared is not None:
            return list(self.tokenizer.encode(text, add_special_tokens=add))
        ids = list(self.tokenizer.encode(text))
        return [self.tokenizer.bos_id] + ids if add else ids
