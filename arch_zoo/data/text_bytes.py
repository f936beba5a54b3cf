"""How much text a token stands for: the UTF-8 bytes of a split's tokens, and so its bytes per token.

Bits per byte (the unit lm-eval's ``bits_per_byte`` and small-scale tokenizer comparisons use) divide
a sum of token losses by the bytes those tokens cover; bytes per token tell a budget how much text a
variant reads, and a report whether two variants' tokens mean the same text."""
from __future__ import annotations

from typing import Optional

import numpy as np

EXACT_UP_TO = 1 << 26  # tokens counted one by one; a larger split is measured on evenly spaced chunks
CHUNK = 1 << 20


def split_bytes(ids, token_bytes: np.ndarray) -> float:
    """UTF-8 bytes of a split's tokens (``ids``: anything with ``len`` and ``read(start, stop)``, a
    store's ``TokenArray``): exact up to ``EXACT_UP_TO`` tokens, else 64 evenly spaced chunks scaled
    to the split's length (the mean bytes per token of a large corpus varies little between chunks)."""
    n = len(ids)
    if n == 0:
        return 0.0
    if n <= EXACT_UP_TO:
        starts, scale = range(0, n, CHUNK), 1.0
    else:
        starts = [i * (n - CHUNK) // 63 for i in range(64)]
        scale = n / (64 * CHUNK)
    total = 0
    for start in starts:
        chunk = ids.read(start, min(n, start + CHUNK))
        total += int(np.bincount(chunk, minlength=len(token_bytes)) @ token_bytes)
    return float(total * scale)


def bytes_per_token(ids, token_bytes: Optional[np.ndarray]) -> Optional[float]:
    """Mean UTF-8 bytes per token of a split; None when the tokenizer cannot say (``token_bytes``)."""
    if token_bytes is None or not len(ids):
        return None
    return split_bytes(ids, token_bytes) / len(ids)
