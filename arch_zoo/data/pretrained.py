"""A pretrained Hugging Face tokenizer from a local ``tokenizer.json`` (or a directory holding one).

It is not fitted: its vocabulary and special tokens are the file's. Ids the toolkit needs (pad,
bos, eos, sep, mask, unk) are found by the usual names; eos falls back for the others, so a GPT-2
style file with only ``<|endoftext|>`` works. The whole serialized tokenizer is kept in the state,
so a run directory decodes without the original file."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import ConfigError
from .tokenizers import TOKENIZERS, Tokenizer, _hf_encode_batch, byte_level_token_bytes

NAMES = {
    "eos_id": ("</s>", "<|endoftext|>", "<eos>", "<|end_of_text|>", "[SEP]"),
    "bos_id": ("<s>", "<bos>", "<|begin_of_text|>", "[CLS]"),
    "pad_id": ("<pad>", "[PAD]", "<|padding|>"),
    "sep_id": ("<sep>", "[SEP]"),
    "mask_id": ("<mask>", "[MASK]"),
    "unk_id": ("<unk>", "[UNK]"),
}


@dataclass(frozen=True)
class PretrainedOptions:
    path: str = ""  # a tokenizer.json, or a directory holding one (a model's tokenizer directory); required

    def __post_init__(self):
        if not isinstance(self.path, str):
            raise ValueError(f"path must be a file or directory name, got {self.path!r}")


def tokenizer_file(path: str, key: str = "task.tokenizer.path") -> Path:
    if not path:
        raise ConfigError(key, "is empty: give a tokenizer.json or the directory holding one")
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise ConfigError(key, f"file not found: {p}")
    return p


@TOKENIZERS.register("pretrained", PretrainedOptions,
                     "a Hugging Face tokenizer from a local tokenizer.json or tokenizer directory (not fitted)")
class PretrainedTokenizer(Tokenizer):
    name = "pretrained"
    lossless = True  # trusted: the file's own decoder is the reference
    published = True

    def __init__(self, options: Optional[PretrainedOptions] = None, serialized: Optional[str] = None,
                 declared: Optional[dict] = None):
        from tokenizers import Tokenizer as HFTokenizer

        self.options = options
        # the special tokens a Hugging Face checkpoint's tokenizer_config.json names ({"bos_token": "<s>", ...}):
        # kept by an import, so that evaluation can follow Hugging Face's rules for it
        self.declared = dict(declared) if declared is not None else None
        if serialized is None:
            path = tokenizer_file(options.path)
            try:
                serialized = HFTokenizer.from_file(str(path)).to_str()
            except Exception as exc:  # noqa: BLE001 - the Rust parser's errors
                raise ConfigError("task.tokenizer.path", f"{path} is not a Hugging Face tokenizer file "
                                  f"({(str(exc).splitlines() or [type(exc).__name__])[0][:120]})") from None
        self._tok = HFTokenizer.from_str(serialized)
        vocab = self._tok.get_vocab(with_added_tokens=True)
        found = {attr: next((vocab[n] for n in names if n in vocab), None) for attr, names in NAMES.items()}
        for attr, token in (self.declared or {}).items():
            if attr.replace("_token", "_id") in NAMES and token in vocab:
                found[attr.replace("_token", "_id")] = vocab[token]
        if found["eos_id"] is None:
            raise ConfigError("task.tokenizer.path", f"{options.path if options else 'the tokenizer'} has no end-of-"
                              f"text token (one of {', '.join(NAMES['eos_id'])}) to join documents with")
        for attr, value in found.items():
            setattr(self, attr, value if value is not None else found["eos_id"])
        self.has_mask = found["mask_id"] is not None

    @classmethod
    def check(cls, options: PretrainedOptions, key: str) -> None:
        tokenizer_file(options.path, f"{key}.path")

    @classmethod
    def from_state(cls, state):
        return cls(serialized=state["serialized"], declared=state.get("declared"))

    @property
    def vocab_size(self):
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text, add_special_tokens: bool = False):
        """``add_special_tokens``: what the file's post-processor adds (a Llama tokenizer's <s>)."""
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def token_id(self, token: str) -> Optional[int]:
        return self._tok.token_to_id(token)

    def encode_batch(self, texts):
        return _hf_encode_batch(self._tok, texts)

    def decode(self, ids, skip_special=True):
        return self._tok.decode(list(ids), skip_special_tokens=skip_special)

    def token_bytes(self):
        return byte_level_token_bytes(self._tok)

    def state(self):
        state = {"serialized": self._tok.to_str()}
        if self.declared is not None:
            state["declared"] = self.declared
        return state
