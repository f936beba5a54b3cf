"""How long a split's examples are: the lengths training FLOPs are counted at (``models.flops``).

Each example counts at its own length (what the model reads: ``input_ids``, and for seq2seq
``decoder_input_ids`` too), not the padded width of a batch nor ``model.max_seq_len``."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, Sequence, Tuple

from .windows import Windows

SAMPLE = 50_000  # a lazy split longer than this is read at evenly spaced examples


@dataclass(frozen=True)
class SplitLengths:
    counts: Dict[Tuple[int, int], int]  # (input length, decoder input length or 0) -> examples
    examples: int  # in the split
    read: int  # of them, read for ``counts`` (all, or an even sample of a long lazy split)

    def mean(self, side: int) -> float:
        """Mean tokens per example of the input (0) or the decoder input (1)."""
        return sum(n * key[side] for key, n in self.counts.items()) / max(1, sum(self.counts.values()))

    def record(self, split: str, decoder_inputs: bool) -> Dict[str, object]:
        """What summary.json and run.json say the FLOPs were counted at."""
        out: Dict[str, object] = {"split": split, "examples": self.examples}
        if self.read != self.examples:
            out["read"] = self.read
        if decoder_inputs:  # a seq2seq objective's: source and target counted apart
            out.update(mean_source_tokens=self.mean(0), mean_target_tokens=self.mean(1))
        else:
            out["mean_tokens"] = self.mean(0)
        out["lengths"] = "each example at its own length (padding not counted)"
        return out


def split_lengths(split: Sequence) -> SplitLengths:
    if isinstance(split, Windows):  # every window is ``length`` long but the tail: nothing to read
        counts = {(split.length, 0): split.full}
        if split.tail:
            counts[(split.tail, 0)] = 1
        return SplitLengths({k: n for k, n in counts.items() if n}, len(split), len(split))
    n = len(split)
    if isinstance(split, (list, tuple)) or n <= SAMPLE:
        rows, read = split, n
    else:  # a plugin's lazy split: reading it all could mean reading a corpus
        read = SAMPLE
        rows = (split[i * n // SAMPLE] for i in range(SAMPLE))
    counts = Counter((len(e.input_ids), len(e.decoder_input_ids) if e.decoder_input_ids is not None else 0)
                     for e in rows)
    return SplitLengths(dict(counts), n, read)
