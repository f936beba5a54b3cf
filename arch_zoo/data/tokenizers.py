"""Tokenizers: char, word, byte, and BPE trained locally with Hugging Face ``tokenizers``.

Every tokenizer reserves the same special ids (pad 0, bos 1, eos 2, sep 3, mask 4, unk 5), is
built from the training text alone (``fit``), and saves to / loads from one JSON file so a run
directory can decode its own outputs."""
from __future__ import annotations

import array
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from ..registry import ComponentSpec, NoOptions, Registry
from ..rundir import TOKENIZER

TOKENIZERS = Registry("tokenizers", "tokenizer")

SPECIALS = ["<pad>", "<bos>", "<eos>", "<sep>", "<mask>", "<unk>"]
PAD, BOS, EOS, SEP, MASK, UNK = range(len(SPECIALS))
TOKENIZER_FILE = TOKENIZER  # the same name in a token store and a run directory


class Tokenizer:
    """Base class. A task asks a tokenizer class what it can do (``lossless``, ``joiner``,
    ``count_tokens``), never what it is called, so a registered tokenizer works with every task
    its capabilities fit."""

    name = "?"
    pad_id, bos_id, eos_id, sep_id, mask_id, unk_id = PAD, BOS, EOS, SEP, MASK, UNK
    lossless = False  # decode(encode(text)) == text for text made of what it was fitted on, whitespace included
    joiner = ""  # what separates symbols written as text so that each is its own token; decode joins by it
    context_free = False  # a text's tokens are the concatenation of its pieces' tokens wherever it is cut
    fit_chars: Optional[int] = None  # fit on at most this many characters of the training text (None: all)
    # a published vocabulary whose checkpoints pad the embedding past it (Pythia, t5-small, Qwen3): a
    # model may have more rows than its tokens; a vocabulary fitted here must match model.vocab_size
    published = False

    @classmethod
    def check(cls, options, key: str) -> None:
        """Raise ConfigError (at ``key``, the tokenizer's) for options it cannot be built with, before a
        task is prepared: a file that is not there, say."""

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

    def encode_batch(self, texts: Sequence[str]) -> List[np.ndarray]:
        """``encode`` of each text as an integer array; subclasses vectorise it (the token store's hot path)."""
        return [np.asarray(self.encode(t), dtype=np.int64) for t in texts]

    def state(self) -> dict:
        return {}

    def token_bytes(self) -> Optional[np.ndarray]:
        """UTF-8 bytes of text each token id stands for (0 for special and unknown tokens): bits per
        byte divide summed losses by the bytes their target tokens cover. None when a token's bytes
        cannot be known exactly (then no run of this tokenizer reports bits per byte)."""
        return None

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

    def token_bytes(self):
        if not self.lossless:  # the whitespace it drops is text no token covers
            return None
        return np.array([0] * len(SPECIALS) + [len(s.encode("utf-8")) for s in self.symbols[len(SPECIALS):]],
                        dtype=np.int64)


@TOKENIZERS.register("char", NoOptions, "one token per character seen in the training text")
class CharTokenizer(_Vocabulary):
    name = "char"
    lossless = True
    context_free = True

    @staticmethod
    def split(text):
        return list(text)

    def fit(self, texts):
        seen = set()
        for t in texts:  # set(t) runs in C: a streamed gigabyte fits in seconds
            seen.update(t)
        for symbol in sorted(seen):
            self._add(symbol)
        self._table = None
        return self

    def _lookup(self) -> np.ndarray:
        """Code point -> id; code points past the table (never seen) map to UNK through the last slot."""
        if getattr(self, "_table", None) is None:
            top = max((ord(s) for s in self.symbols[len(SPECIALS):] if len(s) == 1), default=0)
            table = np.full(top + 2, UNK, dtype=np.int64)
            for s, i in self.index.items():
                if len(s) == 1:
                    table[ord(s)] = i
            self._table = table
        return self._table

    def encode_batch(self, texts):
        table = self._lookup()
        out = []
        for t in texts:
            points = np.frombuffer(t.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            out.append(table[np.minimum(points, len(table) - 1)])
        return out


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
    context_free = True

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

    def encode_batch(self, texts):
        return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8).astype(np.int64) + len(SPECIALS) for t in texts]

    def token_bytes(self):
        return np.array([0] * len(SPECIALS) + [1] * 256, dtype=np.int64)

    def decode(self, ids, skip_special=True):
        n = len(SPECIALS)
        data = bytes(i - n for i in ids if n <= i < n + 256)
        return data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class BPEOptions:
    vocab_size: int = 1024
    train_chars: int = 100_000_000  # merges are learned from a streamed sample: the training text's first N characters

    def __post_init__(self):
        # the byte-level alphabet (256 symbols) is always in the vocabulary; below that no merge is learned
        # and the vocabulary would silently come out larger than asked
        if self.vocab_size <= len(SPECIALS) + 256:
            raise ValueError(f"vocab_size must exceed {len(SPECIALS) + 256} (the {len(SPECIALS)} special tokens "
                             f"and 256 byte symbols), got {self.vocab_size}")
        if isinstance(self.train_chars, bool) or not isinstance(self.train_chars, int) or self.train_chars < 1:
            raise ValueError(f"train_chars must be a positive integer, got {self.train_chars!r}")


def _hf_encode_batch(tok, texts) -> List[np.ndarray]:
    fast = getattr(tok, "encode_batch_fast", tok.encode_batch)  # (no character offsets: not needed here)
    # array.array copies a list of ints 3x faster than numpy does: this runs once per token of a corpus
    return [np.frombuffer(array.array("I", e.ids), dtype=np.uint32) for e in fast(list(texts), add_special_tokens=False)]


@TOKENIZERS.register("bpe", BPEOptions, "byte-level BPE trained locally on the training text (HF tokenizers)")
class BPETokenizer(Tokenizer):
    name = "bpe"
    lossless = True  # byte-level: every character survives

    @classmethod
    def from_state(cls, state):
        return cls(BPEOptions(**state["options"]), serialized=state["serialized"])

    def __init__(self, options: BPEOptions = BPEOptions(), serialized: Optional[str] = None):
        self.options = options
        self.fit_chars = options.train_chars
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
        tok.train_from_iterator(texts, trainer=trainer)  # streamed: the caller cuts the sample
        self._tok = tok
        return self

    def encode(self, text):
        return self._tok.encode(text).ids

    def encode_batch(self, texts):
        return _hf_encode_batch(self._tok, texts)

    def decode(self, ids, skip_special=True):
        return self._tok.decode(list(ids), skip_special_tokens=skip_special)

    def token_bytes(self):
        return byte_level_token_bytes(self._tok)

    def state(self):
        return {"options": {"vocab_size": self.options.vocab_size, "train_chars": self.options.train_chars},
                "serialized": self._tok.to_str()}


def byte_level_token_bytes(tok) -> Optional[np.ndarray]:
    """Bytes per id of a Hugging Face tokenizer whose decoder is byte-level (GPT-2's alphabet: one
    printable character per byte, so a token's bytes are its string's length); added and special
    tokens cover none. None for any other decoder (a token's bytes are then not its string's)."""
    if (json.loads(tok.to_str()).get("decoder") or {}).get("type") != "ByteLevel":
        return None
    added = {t.content for t in tok.get_added_tokens_decoder().values()}
    out = np.zeros(tok.get_vocab_size(with_added_tokens=True), dtype=np.int64)
    for piece, i in tok.get_vocab(with_added_tokens=True).items():
        out[i] = 0 if piece in added else len(piece)
    return out


def parse_tokenizer(value, key: str = "task.tokenizer") -> ComponentSpec:
    return TOKENIZERS.parse(value, key)


def build_tokenizer(spec) -> Tokenizer:
    return TOKENIZERS.build(spec)


def load_tokenizer(directory: Path) -> Tokenizer:
    """The tokenizer a run saved beside its checkpoint."""
    path = Path(directory) / TOKENIZER_FILE
    data = json.loads(path.read_text())
    return TOKENIZERS.get(data["name"]).factory.from_state(data["state"])
