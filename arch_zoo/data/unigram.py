"""The unigram loss: the entropy (nats) of the training split's token distribution, i.e. the loss of
a model that predicts every token by its frequency alone. A run whose loss ends there learned nothing
about context; the report flags such variants instead of ranking them (``reports/task_notes.py``).
A token store counts its train split while it writes it; a generated task's examples are counted at
train time, over the positions its objective scores."""
from __future__ import annotations

from collections import Counter
from typing import Iterable, Optional

import numpy as np

IGNORE = -100  # (tasks/base.py's: a label no loss reads)


def entropy(counts: np.ndarray) -> Optional[float]:
    """Entropy in nats of the distribution ``counts`` describe (None when there is nothing counted)."""
    counts = np.asarray(counts)
    total = int(counts.sum())
    if total == 0:
        return None
    p = counts[counts > 0] / total
    return float(-(p * np.log(p)).sum())


def unigram_loss(examples: Iterable, label_offset: int = 0) -> Optional[float]:
    """The entropy of the labels a loss reads in ``examples``: a class per example, or every label
    but IGNORE from ``label_offset`` on (the objective's: ``lm`` never predicts a row's first)."""
    counts: Counter = Counter()
    for example in examples:
        labels = example.labels
        if isinstance(labels, int):
            counts[labels] += 1
        else:
            counts.update(x for x in labels[label_offset:] if x != IGNORE)
    return entropy(np.fromiter(counts.values(), dtype=np.int64, count=len(counts)))
