"""Tokenizers: char, word, byte, and BPE trained locally with Hugging Face ``tokenizers``.

Every tokenizer reserves the same special ids (pad 0, bos 1, eos 2, sep 3, mask 4, unk 5), is
built from the training text alone (``fit``), and saves to / loads from one JSON file so a run
directory can decode its own outputs."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from ..registry import NoOptions, Registry

TOKENIZERS = Registry("tokenizers", "tokenizer")

SPECIALS = ["<pad>", "<bos>", "<eos>", "<sep>", "<mask>", "<unk>"]
PAD, BOS, EOS, SEP, MASK, UNK = range(len(SPECIALS))
TOKENIZER_FILE = "tokenizer.json"


class Tokenizer:
    """Base class. A task asks a tokenizer class what it can do (``lossless``, ``joiner``,
    ``count_tokens``), never what it is called, so a registered tokenizer works with every task
    its capabilities fit."""

    name = "?"
    pad_id, bos_id, eos_id, sep_id, mask_id, unk_id = PAD, BOS, EOS, SEP, MASK, UNK
    lossless = False  # decode(encode(text)) == text for text made of what it was fitted on, whitespace included
    joiner = ""  # what separates symbols written as text so that each is its own token; decode joins by it

    @classmethod
    def count_tokens(cls, text: str) -> Optional[int]:
        """How many tokens ``text`` becomes, known before fitting; None when it depends on the fit (BPE)."""
        return None

    @classmethod
    def from_state(cls, state: dict) -> "Tokenizer":
        """Rebuild a fitted tokenizer from its ``state()`` (what ``save`` wrote)."""
        raise TypeError(f"tokenizer '{cls.name}' cannot be restored: it defines no from_state")

    @property
    def vocab_size(self) -> int:
        raise TypeError("abstract")

    def fit(self, texts: Iterable[str]) -> "Tokenizer":
        return self

    def encode(self, text: str) -> List[int]:
        raise TypeError("abstract")

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        raise TypeError("abstract")

    def state(self) -> dict:
        return {}

    def save(self, directory: Path) -> Path:
        path = Path(directory) / TOKENIZER_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"name": self.name, "state": self.state()}))
        tmp.replace(path)
        return path


class _Vocabulary(Tokenizer):
    """Shared by char and word: a symbol table learned from the training text."""

    def __init__(self, options=None, symbols: Optional[List[str]] = None):
        self.symbols: List[str] = list(SPECIALS)
        self.index: Dict[str, int] = {s: i for i, s in enumerate(self.symbols)}
        for s in symbols or []:
            self._add(s)

    def _add(self, symbol: str) -> None:
        if symbol not in self.index:
            self.index[symbol] = len(self.symbols)
            self.symbols.append(symbol)

    @staticmethod
    def split(text: str) -> List[str]:
        raise TypeError("abstract")

    @classmethod
    def count_tokens(cls, text):
        return len(cls.split(text))

    @classmethod
    def from_state(cls, state):
        return cls(symbols=state["symbols"])

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def fit(self, texts):
        for symbol in sorted({s for t in texts for s in self.split(t)}):
            self._add(symbol)
        return self

    def encode(self, text):
        return [self.index.get(s, UNK) for s in self.split(text)]

    def decode(self, ids, skip_special=True):
        n = len(SPECIALS)
        return self.joiner.join(self.symbols[i] for i in ids if not (skip_special and i < n))

    def state(self):
        return {"symbols": self.symbols[len(SPECIALS):]}


@TOKENIZERS.register("char", NoOptions, "one token per character seen in the training text")
class CharTokenizer(_Vocabulary):
    name = "char"
    lossless = True

    @staticmethod
    def split(text):
        return list(text)


@TOKENIZERS.register("word", NoOptions, "one token per whitespace-separated word (SCAN-style vocabularies)")
class WordTokenizer(_Vocabulary):
    name = "word"
    joiner = " "  # whitespace is dropped, so not lossless

    @staticmethod
    def split(text):
        return text.split()


@TOKENIZERS.register("byte", NoOptions, "one token per UTF-8 byte; never unknown")
class ByteTokenizer(Tokenizer):
    name = "byte"
    lossless = True

    def __init__(self, options=None):
        pass

    @classmethod
    def count_tokens(cls, text):
        return len(text.encode("utf-8"))

    @classmethod
    def from_state(cls, state):
        return cls()

    @property
    def vocab_size(self):
        return len(SPECIALS) + 256

    def encode(self, text):
        return [b + len(SPECIALS) for b in text.encode("utf-8")]

    def decode(self, ids, skip_special=True):
        n = len(SPECIALS)
        data = bytes(i - n for i in ids if n <= i < n + 256)
        return data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class BPEOptions:
    vocab_size: int = 1024

    def __post_init__(self):
        # the byte-level alphabet (256 symbols) is always in the vocabulary; below that no merge is learned
        # and the vocabulary would silently come out larger than asked
        if self.vocab_size <= len(SPECIALS) + 256:
            raise ValueError(f"vocab_size must exceed {len(SPECIALS) + 256} (the {len(SPECIALS)} special tokens "
                             f"and 256 byte symbols), got {self.vocab_size}")


@TOKENIZERS.register("bpe", BPEOptions, "byte-level BPE trained locally on the training text (HF tokenizers)")
class BPETokenizer(Tokenizer):
    name = "bpe"
    lossless = True  # byte-level: every character survives

    @classmethod
    def from_state(cls, state):
        return cls(BPEOptions(**state["options"]), serialized=state["serialized"])

    def __init__(self, options: BPEOptions = BPEOptions(), serialized: Optional[str] = None):
        self.options = options
        self._tok = None
        if serialized is not None:
            from tokenizers import Tokenizer as HFTokenizer

            self._tok = HFTokenizer.from_str(serialized)

    @property
    def vocab_size(self):
        return self._tok.get_vocab_size()

    def fit(self, texts):
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        tok = HFTokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=self.options.vocab_size, special_tokens=SPECIALS,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(list(texts), trainer=trainer)
        self._tok = tok
        return self

    def encode(self, text):
        return self._tok.encode(text).ids

    def decode(self, ids, skip_special=True):
        return self._tok.decode(list(ids), skip_special_tokens=skip_special)

    def state(self):
        return {"options": {"vocab_size": self.options.vocab_size}, "serialized": self._tok.to_str()}


def build_tokenizer(spec) -> Tokenizer:
    return TOKENIZERS.build(spec)


def load_tokenizer(directory: Path) -> Tokenizer:
    """The tokenizer a run saved beside its checkpoint."""
    path = Path(directory) / TOKENIZER_FILE
    data = json.loads(path.read_text())
    return TOKENIZERS.get(data["name"]).factory.from_state(data["state"])
