"""The streaming passes that turn a corpus into split token shards, in bounded memory.

1. ``scan``: characters, the text's sha256, and (split_by: documents) each document's split.
2. the tokenizer is fitted on the training text's first ``fit_chars`` characters, streamed.
3. ``segments`` -> ``batches`` -> ``encoded`` (``encode_batch`` in a worker thread) -> ``ShardWriter``:
   text is cut into segments of about ``SEGMENT`` characters, never across a split (nor a document,
   split_by: documents), and -- for tokenizers whose tokens depend on context (BPE) -- only where the
   text reads ``X\\nY`` with X and Y not whitespace: the byte-level pre-tokenizer always starts a new
   piece there, so the ids equal those of encoding the whole split in one call (what a run tokenized
   before the store existed). Prompt-completion records (``fields`` a pair) are also cut where the
   prompt ends, so the completion's first token starts exactly there; each split records, per
   document, the token where scoring starts (``score_starts``)."""
from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from .sources import Fields, Input, stream
from .unigram import entropy

FRACTIONS = (0.9, 0.05)  # train, val; test gets the rest
SEGMENT = 1 << 20  # characters per encoded segment
BATCH = 1 << 23  # characters per encode_batch call (the HF tokenizers encode a batch on every core)
SHARD_TOKENS = 1 << 28  # ids per shard file


@dataclass
class Scan:
    chars: int = 0
    sha: "hashlib._Hash" = field(default_factory=hashlib.sha256)
    labels: bytearray = field(default_factory=bytearray)  # split_by documents: split index of each document
    used: List[int] = field(default_factory=list)  # inputs read (max_chars may stop early)
    left_out: int = 0  # characters past the max_chars cut (counted, not read into the store)

    def bounds(self) -> Tuple[int, int]:
        return int(self.chars * FRACTIONS[0]), int(self.chars * sum(FRACTIONS))


def doc_split(digest: bytes) -> int:
    """A document's split from its content hash: deterministic, independent of order, and equal
    documents (duplicates) always land in the same split, so none leaks from train into val."""
    u = int.from_bytes(digest[:8], "little") / 2.0 ** 64
    return 0 if u < FRACTIONS[0] else 1 if u < sum(FRACTIONS) else 2


def scan(inputs: List[Input], text_field: Fields, max_chars: Optional[int], by_documents: bool,
         tick=lambda n: None) -> Scan:
    out = Scan()
    doc = hashlib.blake2b(digest_size=8)
    rest = [0]
    for piece, end, _ in stream(inputs, text_field, max_chars, out.used, rest, tick):
        data = piece.encode("utf-8", "surrogatepass")
        out.chars += len(piece)
        out.sha.update(data)
        tick(len(data))
        if by_documents:
            doc.update(data)
            if end:
                out.labels.append(doc_split(doc.digest()))
                doc = hashlib.blake2b(digest_size=8)
    out.left_out = rest[0]
    return out


def safe_cut(text: str, context_free: bool, limit: Optional[int] = None) -> int:
    """The longest prefix of ``text``, of at most ``limit`` characters, that encodes on its own exactly
    as inside the whole (0: none)."""
    end = len(text) if limit is None else min(len(text), limit)
    if context_free:
        return end
    i = end  # a cut after the newline at i needs i + 1 <= end
    while i > 0:
        i = text.rfind("\n", 0, i)
        if i <= 0:
            return 0
        if i + 1 < len(text) and not text[i - 1].isspace() and not text[i + 1].isspace():
            return i + 1
    return 0


Segment = Tuple[int, str, bool, bool, bool]  # (split index, text, starts a document, ends it, is scored)


def segments(inputs: List[Input], text_field: Fields, max_chars: Optional[int], sc: Scan, by_documents: bool,
             context_free: bool, tick=lambda n: None) -> Iterator[Segment]:
    a, b = sc.bounds()
    pos, doc = 0, 0
    buf: List[str] = []
    prompts = not isinstance(text_field, str)  # records of a prompt (not scored) and a completion
    size, split, starts, scored = 0, 0, True, not prompts

    def prompt_end() -> Segment:  # a hard cut: the completion is encoded on its own, its tokens start here
        nonlocal buf, size, starts, scored
        seg = (split, "".join(buf), starts, False, False)
        buf, size, starts, scored = [], 0, False, True
        return seg

    def flush(final: bool):
        nonlocal buf, size, starts, scored
        text = "".join(buf)
        # about SEGMENT characters: a batch then holds several segments, and every core gets an equal share
        cut = len(text) if final else safe_cut(text, context_free, SEGMENT) or safe_cut(text, context_free)
        if not final and cut == 0 and size < 8 * SEGMENT:  # no safe place yet: read on (a hard cut only past 8 segments)
            return None
        cut = cut or len(text)
        seg = (split, text[:cut], starts, final, scored)
        buf, size, starts = ([text[cut:]] if cut < len(text) else []), len(text) - cut, final
        if final:
            scored = not prompts  # the next record starts with its prompt
        return seg

    def full() -> Iterator[Segment]:  # while the buffer holds a segment's worth
        while size >= SEGMENT:
            seg = flush(False)
            if seg is None:
                return
            yield seg

    for piece, end, _ in stream(inputs, text_field, max_chars):
        tick(len(piece.encode("utf-8", "surrogatepass")))
        if by_documents:
            split = sc.labels[doc]
            buf.append(piece)
            size += len(piece)
            yield from full()
            if end:  # the document's last segment (empty when the text ended at a cut, or an empty document)
                yield flush(True)
                doc += 1
            elif prompts:  # (every record is exactly a prompt piece, then a completion piece: sources.py)
                yield prompt_end()
            continue
        while piece:
            split = 0 if pos < a else 1 if pos < b else 2
            limit = (a, b, sc.chars)[split]
            take = piece[: limit - pos]
            piece = piece[len(take):]
            pos += len(take)
            buf.append(take)
            size += len(take)
            yield from full()
            if pos == limit:  # this split's text is complete: its last segment ends exactly here
                yield flush(True)


def batches(segs: Iterator[Segment], chars: int) -> Iterator[List[Segment]]:
    """Consecutive segments in groups of at least ``chars`` characters (the last one may hold fewer)."""
    batch: List[Segment] = []
    size = 0
    for seg in segs:
        batch.append(seg)
        size += len(seg[1])
        if size >= chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def encoded(encode_batch: Callable[[List[str]], List[np.ndarray]],
            groups: Iterator[List[Segment]]) -> Iterator[Tuple[List[Segment], List[np.ndarray]]]:
    """Each batch with its ids, in order. A worker thread encodes batch k+1 while the caller writes batch
    k and this generator reads and cuts batch k+2: the HF tokenizers release the GIL while they encode,
    so the cores are not idle while Python cuts, converts and writes. At most three batches of text and
    two of ids are held; an error on either side stops both."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="arch-zoo-encode")
    clean = False
    try:
        last = None
        for batch in groups:
            job = (batch, pool.submit(encode_batch, [seg[1] for seg in batch]))
            if last is not None:
                yield last[0], last[1].result()
            last = job
        if last is not None:
            yield last[0], last[1].result()
        clean = True
    finally:
        # after an error (a full disk, Ctrl-C) the queued batch is dropped and the running one is not
        # waited for: the caller removes its temporary store at once
        pool.shutdown(wait=clean, cancel_futures=True)


class ShardWriter:
    """Appends one split's ids to ``{split}.NNN.bin`` shards, hashing as it writes."""

    def __init__(self, root: Path, split: str, dtype: np.dtype, unk_id: int, vocab_size: int,
                 scores: bool = False):
        self.root, self.split, self.dtype, self.unk_id = root, split, dtype, unk_id
        self.scores = scores  # record each document's first scored token (prompt-completion records)
        self.score_starts: List[int] = []
        self._awaiting = False  # the current document's first scored token is not written yet
        self.counts = np.zeros(vocab_size, dtype=np.int64)  # how often each id occurs: the unigram loss
        self.shards: List[Dict[str, object]] = []
        self.tokens = self.unk = 0
        self.doc_starts: List[int] = []
        self._file = None

    def _open(self):
        name = f"{self.split}.{len(self.shards):03d}.bin"
        self._file = open(self.root / name, "wb")
        self._hash = hashlib.sha256()
        self.shards.append({"file": name, "tokens": 0, "sha256": None})

    def _end_document(self) -> None:
        if self._awaiting:  # a document cut inside its prompt (max_chars): nothing of it is scored
            self.score_starts.append(self.tokens)
            self._awaiting = False

    def write(self, ids: np.ndarray, starts_document: bool = False, scored: bool = True) -> None:
        if starts_document:
            self._end_document()
            self.doc_starts.append(self.tokens)
            self._awaiting = self.scores
        if scored and self._awaiting:
            self.score_starts.append(self.tokens)
            self._awaiting = False
        self.unk += int(np.count_nonzero(ids == self.unk_id))
        if ids.size:
            self.counts += np.bincount(ids, minlength=len(self.counts))[: len(self.counts)]
        while ids.size:
            if self._file is None or self.shards[-1]["tokens"] >= SHARD_TOKENS:
                self._close()
                self._open()
            n = min(ids.size, SHARD_TOKENS - int(self.shards[-1]["tokens"]))
            data = ids[:n].astype(self.dtype).tobytes()
            self._file.write(data)
            self._hash.update(data)
            self.shards[-1]["tokens"] += n
            self.tokens += n
            ids = ids[n:]

    def _close(self):
        if self._file is not None:
            self._file.close()
            self.shards[-1]["sha256"] = self._hash.hexdigest()
            self._file = None

    def close(self) -> Dict[str, object]:
        if not self.shards:
            self._open()  # an empty split still has its (empty) shard, so every split reads alike
        self._close()
        self._end_document()
        entry = {"tokens": self.tokens, "unk_tokens": self.unk, "shards": self.shards, "doc_starts": None,
                 "documents": len(self.doc_starts) or None, "unigram_loss": entropy(self.counts)}
        if self.doc_starts:
            entry["doc_starts"] = f"{self.split}.docs.npy"
            np.save(self.root / entry["doc_starts"], np.asarray(self.doc_starts, dtype=np.int64))
        if self.scores:  # (only such stores have the key: every other manifest reads as it always did)
            entry["score_starts"] = f"{self.split}.scored.npy"
            np.save(self.root / entry["score_starts"], np.asarray(self.score_starts, dtype=np.int64))
        return entry
