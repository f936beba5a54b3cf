"""Language modelling on a real text corpus: ``char_lm`` (decoder) and ``mlm`` (encoder, BERT masking).

The corpus is the user's ``files`` (files, directories, globs; plain text, JSON Lines, Parquet or
Hugging Face datasets), or by default the Python standard library's own ``.py`` files on this
machine (nothing to download). ``max_chars`` (default ``auto``) reads the user's files whole and the
standard library up to 2,000,000 characters; any cut is counted and said (prepare, train,
summary.json's ``task``, the report). It is tokenized once into a token store
(``arch_zoo.data.prepare``) that every run with the same corpus, tokenizer and split options
shares; a run reads its windows of ``seq_len`` tokens from it by offset. ``split_by: text`` cuts
the text contiguously 90/5/5 into train/val/test; ``split_by: documents`` sends whole documents,
each followed by the eos token, to a split chosen by their content hash. ``windows: documents``
starts every window at a document (padded by the batch); ``documents: separate`` keeps the documents
a window packs apart (each gets what it would get alone: ``components.mixers.documents``); ``scored: completion`` (char_lm) reads
prompt-completion records and scores only the completions (``windows.py``). The tokenizer is fitted
on the train part. ``TaskData.info`` records the files, a sha256 of the text, the store and each
split's characters per token (bits per character = loss / ln 2 / chars_per_token) and UTF-8 bytes per
token; ``TaskData.token_bytes`` gives each token's bytes, so bits per byte are exact sums (objectives.py)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from ...errors import ConfigError
from ...registry import component_field
from ..prepare import AUTO, DTYPES, STDLIB_CHARS
from ..prepare import prepare as prepare_store
from ..progress import interactive, quiet, stderr_log
from ..sources import sorted_py_files
from ..text_bytes import bytes_per_token
from ..tokenizers import SPECIALS, TOKENIZERS
from ..windows import DocumentWindows, LMExample, ScoredSpans, Windows
from .base import IGNORE, TASKS, Example, Task, TaskData
from .common import check_fits, check_tokenizer, positive, validate_tokenizer

KEEPS_EVERY_CHARACTER = " (it needs every character kept)"
SPLIT_BY = ("text", "documents")
WINDOWS = ("stream", "documents")
LONG_DOCUMENTS = ("truncate", "split")
DOCUMENTS = ("joined", "separate")
SCORED = ("all", "completion")
EVAL_MASK_SEED = 1234  # mlm: val/test masks are the same for every run, so runs evaluate alike
_sorted_py_files = sorted_py_files  # (the name tests and older code import)


def keeps_every_character(tokenizer) -> bool:  # a word tokenizer drops the whitespace
    return tokenizer.lossless


@dataclass(frozen=True)
class CorpusOptions:
    files: List[str] = field(default_factory=list)  # files, directories, globs, hf:NAME; empty: the stdlib corpus
    max_chars: Union[int, str, None] = AUTO  # at most N characters; null: all; auto: files whole, the stdlib 2M
    seq_len: Optional[int] = None  # tokens per training window (null: the model's max_seq_len)
    tokenizer: Any = component_field("tokenizers", "char")  # char, byte, {name: bpe, vocab_size: N}, {name: pretrained, path: P}
    text_field: str = "text"  # JSON Lines, Parquet and datasets: the field holding each document's text
    split_by: str = "text"  # text: contiguous 90/5/5 of the joined text; documents: whole documents by content hash
    dtype: str = "auto"  # token store ids: auto (uint16 when the vocabulary fits), uint16, uint32
    windows: str = "stream"  # stream: seq_len windows across documents from a seeded offset; documents: each window starts at a document, padded (needs split_by: documents)
    long_documents: str = "truncate"  # windows: documents, a document longer than seq_len: truncate (its first seq_len tokens) or split (into seq_len windows, the last shorter)
    documents: str = "joined"  # joined: a window's documents run into each other (GPT-2); separate: each is on its own (masked attention, states reset; needs split_by: documents)

    def __post_init__(self):
        if not isinstance(self.files, (list, tuple)) or not all(isinstance(f, str) for f in self.files):
            raise ValueError(f"files must be a list of paths, got {self.files!r}")
        if isinstance(self.max_chars, str) and self.max_chars != AUTO:
            raise ConfigError("max_chars", f"expected a number of characters, null (all) or {AUTO} (a user's "
                              f"files whole, the default corpus's first {STDLIB_CHARS:,}), got {self.max_chars!r}")
        if self.max_chars not in (None, AUTO):
            positive("max_chars", self.max_chars)
        if self.seq_len is not None:
            positive("seq_len", self.seq_len, 2)
        if not isinstance(self.text_field, str) or not self.text_field:
            raise ValueError(f"text_field must name a field, got {self.text_field!r}")
        if self.split_by not in SPLIT_BY:
            raise ConfigError("split_by", f"unknown split '{self.split_by}'; choices: {', '.join(SPLIT_BY)}")
        if self.dtype not in DTYPES:
            raise ConfigError("dtype", f"unknown dtype '{self.dtype}'; choices: {', '.join(DTYPES)}")
        for key, choices in (("windows", WINDOWS), ("long_documents", LONG_DOCUMENTS), ("documents", DOCUMENTS)):
            if getattr(self, key) not in choices:
                raise ConfigError(key, f"unknown choice '{getattr(self, key)}'; choices: {', '.join(choices)}")
        if self.windows == "documents" and self.split_by != "documents":
            raise ConfigError("windows", "documents needs split_by: documents (only a store split by documents "
                              "records where each document starts)")
        if self.documents == "separate" and self.split_by != "documents":
            raise ConfigError("documents", "separate needs split_by: documents (only a store split by documents "
                              f"records where each document starts); choices: {', '.join(DOCUMENTS)}")
        validate_tokenizer(self.tokenizer, keeps_every_character, KEEPS_EVERY_CHARACTER)


class CorpusTask(Task):
    """Opens (or prepares) the corpus's token store; subclasses turn token windows into examples."""

    objective = "?"
    metrics: Tuple[str, ...] = ()
    progress = True  # show a store's build (run_one sets it false for a quiet run)

    @classmethod
    def check(cls, options: CorpusOptions, model_kind: str, max_seq_len: int, key: str = "task") -> None:
        spec = check_tokenizer(options.tokenizer, key, keeps_every_character, KEEPS_EVERY_CHARACTER)
        for i, f in enumerate(options.files):
            path = Path(f).expanduser()
            if f.startswith("hf:") or any(c in f for c in "*?["):
                continue  # resolved when preparing (a glob may match files written later)
            if not path.exists():
                raise ConfigError(f"{key}.files[{i}]", f"file not found: {f}")
        TOKENIZERS.get(spec.name).factory.check(spec.options, f"{key}.tokenizer")
        if options.seq_len is not None:
            check_fits(options.seq_len, max_seq_len, f"{key}.seq_len", "windows of seq_len tokens")

    @classmethod
    def prepare(cls, options, cache_dir=None, log=None, progress: bool = False):
        return prepare_store(options, cache_dir, log, progress)

    @property
    def seq_len(self) -> int:
        return self.options.seq_len or self.max_seq_len

    def build(self) -> TaskData:
        self.check(self.options, self.model_kind, self.max_seq_len)
        store = self.prepare(self.options, progress=self.progress, log=stderr_log if self.progress else quiet)
        if store.built_seconds is None and self.progress and interactive():
            stderr_log(f"cached {store.root}")
        tok = store.tokenizer
        ids = {name: store.split(name) for name in ("train", "val", "test")}
        n = len(ids["train"])
        by_docs = self.options.windows == "documents"
        offset = random.Random(self.seed).randrange(self.seq_len) if n >= 2 * self.seq_len and not by_docs else 0
        make = self.example_maker(tok)
        splits = {"train": self.split_windows(store, ids["train"], "train", self.seq_len, make("train", 0), offset)}
        if not splits["train"]:
            raise ConfigError("task.files", f"the corpus is too small: its train part has {n} tokens, less than "
                              f"one window of seq_len={self.seq_len}")
        for i, name in enumerate(("val", "test"), 1):
            splits[name] = self.split_windows(store, ids[name], name, self.seq_len, make(name, i), keep_tail=True)
        splits.update(self.extra_splits(store, ids["val"], make))
        tokens, chars = store.counts("tokens"), store.counts("chars")
        token_bytes = tok.token_bytes()
        per_token = {name: bytes_per_token(ids[name], token_bytes) for name in ids}
        info = store.info()
        info.update(
            tokenizer=tok.name, vocab_size=tok.vocab_size, seq_len=self.seq_len, train_offset=offset, tokens=tokens,
            unk_tokens=store.counts("unk_tokens"), sizes={name: len(rows) for name, rows in splits.items()},
            chars_per_token={name: chars[name.split("@")[0]] / tokens[name.split("@")[0]] for name in splits},
            windows=self.options.windows, scored=getattr(self.options, "scored", "all"),
        )
        if self.options.documents == "separate":  # (absent: joined, as every run before the option)
            info["documents"] = "separate"
        if by_docs:  # what happened to documents longer than a window (summary.json's task)
            info["long_documents"] = {name: {"documents": rows.documents, "longer_than_window": rows.long,
                                             "handled": self.options.long_documents}
                                      for name, rows in splits.items()}
        if token_bytes is not None:  # the text each split's tokens cover (budgets in bytes; reports' rankings)
            info["bytes_per_token"] = {name: per_token[name.split("@")[0]] for name in splits}
        return TaskData(tok, self.objective, splits, metrics=self.metrics, info=info, token_bytes=token_bytes)

    def split_windows(self, store, ids, split: str, length: int, make, offset: int = 0, keep_tail: bool = False):
        """A split's windows as ``task.windows`` says, with the store's scored spans where it has them."""
        split = split.split("@")[0]
        doc_starts, score_starts = store.doc_starts(split), store.score_starts(split)
        scored = ScoredSpans(doc_starts, score_starts) if score_starts is not None else None
        documents = doc_starts if self.options.documents == "separate" else None
        if self.options.windows == "documents":
            return DocumentWindows(ids, doc_starts, length, make, self.options.long_documents == "split", scored,
                                   documents)
        return Windows(ids, length, make, offset, keep_tail, scored, documents)

    def extra_splits(self, store, val_ids, make) -> Dict[str, Windows]:
        return {}

    def example_maker(self, tokenizer):
        """``make(split, index)``: the picklable ``(i, ids) -> Example`` for that split's windows."""
        raise TypeError("abstract")


@dataclass(frozen=True)
class CharLMOptions(CorpusOptions):
    eval_lengths: List[int] = field(default_factory=list)  # extra eval splits val@L: val text in L-token windows
    scored: str = "all"  # all: every token; completion: records hold prompt_field and completion_field (TRL's format), only the completion and its eos are scored (needs split_by: documents)
    prompt_field: str = "prompt"  # scored: completion, the field holding each record's prompt (read, never scored)
    completion_field: str = "completion"  # scored: completion, the field holding each record's completion (scored)

    def __post_init__(self):
        super().__post_init__()
        if self.scored not in SCORED:
            raise ConfigError("scored", f"unknown choice '{self.scored}'; choices: {', '.join(SCORED)}")
        if self.scored == "completion" and self.split_by != "documents":
            raise ConfigError("scored", "completion needs split_by: documents (each record is one document, "
                              "sent whole to one split)")
        for key in ("prompt_field", "completion_field"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key):
                raise ConfigError(key, f"must name a field, got {getattr(self, key)!r}")
        if self.prompt_field == self.completion_field:
            raise ConfigError("completion_field", f"is the prompt_field too ('{self.prompt_field}'); a record "
                              "needs two fields")
        for length in self.eval_lengths:
            positive("eval_lengths[]", length, 2)
        if len(set(self.eval_lengths)) != len(self.eval_lengths):
            raise ValueError(f"eval_lengths has duplicates: {list(self.eval_lengths)}")


TASKS.not_everywhere["documents"] = (
    "its examples have no document boundaries to keep apart; documents (choices: " + ", ".join(DOCUMENTS)
    + ") is an option of the corpus tasks char_lm and mlm, whose documents a window packs (with split_by: documents)")


@TASKS.register("char_lm", CharLMOptions, "next-token LM on a text corpus (default: the Python stdlib)")
class CharLMTask(CorpusTask):
    kinds = ("decoder",)
    objective = "lm"
    metrics = ("bpc", "bpb")

    def extra_splits(self, store, val_ids, make):
        out = {}
        for length in self.options.eval_lengths:
            rows = self.split_windows(store, val_ids, f"val@{length}", length, make(f"val@{length}", 0))
            if not rows:
                raise ConfigError("task.eval_lengths", f"the val text has {len(val_ids)} tokens, fewer than one "
                                  f"window of {length}; use more text or shorter eval_lengths")
            out[f"val@{length}"] = rows
        return out

    def example_maker(self, tokenizer):
        return lambda split, index: LMExample()


@dataclass(frozen=True)
class MLMOptions(CorpusOptions):
    mask_prob: float = 0.15  # share of tokens predicted; of those 80% -> <mask>, 10% random, 10% kept

    def __post_init__(self):
        super().__post_init__()
        if not 0 < self.mask_prob < 1:
            raise ValueError(f"mask_prob must be in (0, 1), got {self.mask_prob}")


def bert_mask(window: List[int], prob: float, rng: np.random.Generator, vocab_size: int,
              mask_id: int = SPECIALS.index("<mask>")) -> Example:
    """BERT's masking of one window: every window predicts at least one token."""
    ids = np.asarray(window)
    chosen = rng.random(len(ids)) < prob
    if not chosen.any():
        chosen[rng.integers(len(ids))] = True
    roll = rng.random(len(ids))
    random_ids = rng.integers(len(SPECIALS), max(vocab_size, len(SPECIALS) + 1), len(ids))
    inputs = np.where(chosen & (roll < 0.8), mask_id, ids)
    inputs = np.where(chosen & (roll >= 0.8) & (roll < 0.9), random_ids, inputs)
    labels = np.where(chosen, ids, IGNORE)
    return Example(inputs.tolist(), labels.tolist())


@TASKS.register("mlm", MLMOptions, "masked-LM (BERT 80/10/10 masking) on a text corpus (default: the Python stdlib)")
class MLMTask(CorpusTask):
    kinds = ("encoder",)
    objective = "mlm"  # (the training module reports token accuracy over the masked positions)

    def example_maker(self, tokenizer):
        if not getattr(tokenizer, "has_mask", True):
            raise ConfigError("task.tokenizer", f"mlm needs a mask token; the {tokenizer.name} tokenizer has none "
                              "(<mask> or [MASK])")
        prob, vocab, mask = self.options.mask_prob, tokenizer.vocab_size, tokenizer.mask_id
        return lambda split, index: MaskedExample(prob, vocab, mask, [self.seed % 2**32] if split == "train"
                                                  else [EVAL_MASK_SEED, index])


class MaskedExample:
    """Window i's masks are drawn from a generator seeded by (seed, i): a pure function of the
    window, so any window can be read in any order (train: the run's seed; val/test: fixed)."""

    def __init__(self, prob: float, vocab_size: int, mask_id: int, seed: List[int]):
        self.prob, self.vocab_size, self.mask_id, self.seed = prob, vocab_size, mask_id, seed

    def __call__(self, i: int, ids: List[int]) -> Example:
        rng = np.random.default_rng(self.seed + [i])
        return bert_mask(ids, self.prob, rng, self.vocab_size, self.mask_id)
