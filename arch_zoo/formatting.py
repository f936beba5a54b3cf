"""Numbers and counts in human text (CLI output, report tables): one rule everywhere.

A float shows ``digits`` significant digits, in fixed notation between 1e-3 and 1e5 and in
scientific notation outside, so a column never mixes ``7.184e-05`` with ``0.0001``; SI-suffixed
counts keep their significant digits too (``40.0k`` beside ``39.2k``, not ``40k``). Machine
outputs (CSV, Parquet, JSON) keep full precision and never pass through here."""
from __future__ import annotations

import math
import numbers
from typing import Any

FIXED_RANGE = (1e-3, 1e5)  # outside it, fixed notation shows too many zeros or loses digits
SI_UNITS = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(isinstance(v, float) and math.isnan(v)) or str(v) == "<NA>"
    except TypeError:
        return False


def _round_sig(v: float, digits: int) -> float:
    return float(f"{v:.{digits - 1}e}")


def _fixed(v: float, digits: int) -> str:
    """``v`` (already rounded to ``digits`` significant digits) in fixed notation, zeros kept."""
    exponent = math.floor(math.log10(abs(v)))
    return f"{v:.{max(digits - 1 - exponent, 0)}f}"


def number(v: Any, digits: int = 4) -> str:
    """A value for a human: '' when missing, ints as they are, floats at ``digits`` significant
    digits (``2.103``, ``0.02986``, ``1.000e-04``, ``1.235e+05``)."""
    if _missing(v):
        return ""
    if isinstance(v, (bool, numbers.Integral)) or not isinstance(v, numbers.Real):
        return str(v)
    v = float(v)  # numpy scalars too
    if math.isinf(v):
        return str(v)
    if v == 0:
        return f"{0:.{digits - 1}f}"
    r = _round_sig(v, digits)
    if FIXED_RANGE[0] <= abs(r) < FIXED_RANGE[1]:
        return _fixed(r, digits)
    return f"{v:.{digits - 1}e}"


def setting(v: Any) -> str:
    """A configured value as the user would write it: floats at up to 6 significant digits without
    padding zeros (``0.001``, ``0.0003``, ``3e-05``), so a learning rate reads as it was set."""
    if isinstance(v, float) and not _missing(v) and not math.isinf(v):
        return f"{v:.6g}"
    return number(v)


def si(v: Any, digits: int = 3) -> str:
    """A count with an SI suffix at ``digits`` significant digits: 40000 -> '40.0k', 39200 -> '39.2k',
    999999 -> '1.00M', 512 -> '512', 12.5 -> '12.5'."""
    if _missing(v):
        return ""
    v = float(v)
    if v == 0 or math.isinf(v):
        return "0" if v == 0 else str(v)
    r = _round_sig(v, digits)
    for size, unit in SI_UNITS:
        if abs(r) >= size:
            return _fixed(_round_sig(r / size, digits), digits) + unit
    return _fixed(r, digits) if abs(r) >= 1 else number(v, digits)


def plural(n: int, word: str, many: str = "") -> str:
    """'1 run', '2 runs', '0 runs'; ``many`` for irregular plurals."""
    return f"{n} {word if n == 1 else (many or word + 's')}"
