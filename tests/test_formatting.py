"""One number format for human text (CLI summaries, report tables): significant digits throughout.

Issue: numbers mixed `7.184e-05` with `0.0001` and `40k` with `39.2k`."""
import math

import numpy as np
import pytest

from arch_zoo.formatting import number, plural, si


@pytest.mark.parametrize("value,text", [
    (7.184e-05, "7.184e-05"), (0.0001, "1.000e-04"),  # below 1e-3 both scientific, both 4 digits
    (0.0012, "0.001200"), (0.02986, "0.02986"), (0.881, "0.8810"), (2.1034, "2.103"), (73.2718, "73.27"),
    (12345.6, "12350"), (123456.0, "1.235e+05"), (-3.5, "-3.500"), (0.0, "0.000"), (1.0, "1.000"),
    (np.float32(0.25), "0.2500"), (np.float64(2.5), "2.500"),
    (5, "5"), (np.int64(3), "3"), ("rope", "rope"), (True, "True"),
    (None, ""), (float("nan"), ""), (math.inf, "inf"),
])
def test_number_keeps_significant_digits(value, text):
    assert number(value) == text


def test_number_digits_and_rounding_up_to_the_next_power():
    assert number(2.1034, digits=3) == "2.10"
    assert number(9.99996) == "10.00"  # rounding to 4 digits crosses a power of ten: still 4 digits
    assert number(0.00099996) == "0.001000"


def test_a_column_of_small_numbers_never_mixes_notations():
    texts = [number(v) for v in (7.184e-05, 1e-4, 3.3e-4, 9.9e-4)]
    assert all("e-" in t and len(t.split("e")[0]) == 5 for t in texts), texts


@pytest.mark.parametrize("value,text", [
    (40000, "40.0k"), (39200, "39.2k"), (40928.0, "40.9k"), (999999, "1.00M"), (1.5e9, "1.50G"), (1e12, "1.00T"),
    (512, "512"), (12.5, "12.5"), (0, "0"), (None, ""), (float("nan"), ""),
])
def test_si_keeps_three_significant_digits(value, text):
    assert si(value) == text


def test_plural():
    assert [plural(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]
    assert plural(1, "local worker") == "1 local worker" and plural(3, "index", "indices") == "3 indices"


def test_report_table_cells_share_the_format(tmp_path):
    """The comparison table's means, intervals and Δ all use ``number`` (no `-0.0867` beside `-0.07232`)."""
    import re

    from arch_zoo.reports import load_runs, summarize, terminal_table
    from tests.reports.sweeps import write_sweep

    text = terminal_table(summarize(load_runs([write_sweep(tmp_path / "s")])))
    rope = next(line for line in text.splitlines() if " rope " in line)
    stats = rope[rope.index("2.0"):rope.rindex("]") + 1]  # mean ± std, CI, Δ and its CI (p has its own style)
    numbers = re.findall(r"-?\d+\.\d+(?:e[+-]\d+)?", stats)
    assert len(numbers) == 7, rope
    for value in numbers:
        digits = value.lstrip("-").split("e")[0].replace(".", "").lstrip("0")
        assert len(digits) == 4, (value, rope)
    assert re.search(r" \d+\.\d\dk ", rope)  # SI counts at 3 digits: 1.00k, not 1k


def test_a_setting_reads_as_it_was_set():
    """Varied settings (a learning rate) keep the user's digits; metrics get the fixed 4-digit rule."""
    from arch_zoo.formatting import setting

    assert [setting(v) for v in (0.001, 3e-4, 3e-5, 0.5, 4, "rope", True)] == [
        "0.001", "0.0003", "3e-05", "0.5", "4", "rope", "True"]
