"""The live progress lines (arch_zoo/progress.py): redrawn in place on a terminal (a real pty), plain
lines at a bounded rate elsewhere, and what a line says."""
import io
import os
import pty
import re
import threading

from arch_zoo.progress import LiveLines, duration, progress_line

RECORD = {"step": 120, "max_steps": 400, "loss": 3.21449, "tokens_per_s": 1234.4, "eta_s": 45.4}


def test_a_line_says_step_of_max_loss_tokens_per_second_and_time_left():
    assert progress_line("rope s0", RECORD) == "rope s0  step 120/400  loss 3.2145  1,234 tok/s  ETA 0:45"
    # before the first logged loss and the first timed batch: what is known
    assert progress_line("x", {"step": 0, "max_steps": 10, "loss": None, "tokens_per_s": 0.0, "eta_s": None}) == \
        "x  step 0/10"
    assert [duration(s) for s in (0, 59.6, 61, 3600 + 62)] == ["0:00", "1:00", "1:01", "1:01:02"]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_plain_lines_come_at_most_every_few_seconds_and_at_least_every_half_minute():
    """Not a terminal (a CI log, `| tee`): nothing in a run's first 10 s; then a line when it has done
    another tenth of its steps (10 s apart at least) or 30 s have passed, whichever is first."""
    out, clock = io.StringIO(), Clock()
    lines = LiveLines(out, terminal=False, clock=clock)
    for t in range(0, 121):  # a tick a second for two minutes; 1 step a second of 1,000: no tenth is done
        clock.now = float(t)
        lines.show({"a": ("a", {**RECORD, "step": t, "max_steps": 1000})})
    shown = [int(re.search(r"step (\d+)/", line).group(1)) for line in out.getvalue().splitlines()]
    assert shown == [10, 40, 70, 100]
    out2, clock = io.StringIO(), Clock()
    lines = LiveLines(out2, terminal=False, clock=clock)
    for t in range(0, 61):  # 5 steps a second of 100: a tenth every 2 s, shown 10 s apart
        clock.now = float(t)
        lines.show({"b": ("b", {**RECORD, "step": min(100, 5 * t), "max_steps": 100})})
    assert [int(re.search(r"step (\d+)/", line).group(1)) for line in out2.getvalue().splitlines()] == \
        [50, 100, 100]  # after 10 s, 20 s, then only the 30 s rule (no tenth left to reach)
    assert "\x1b" not in out.getvalue() + out2.getvalue()  # no cursor movement in a log


def screen(data: str) -> list:
    """What a terminal shows after ``data``: text, newlines, cursor up N lines to column 0 (ESC [N F) and
    erase to the end of the screen (ESC [J), the only controls the live lines use."""
    rows, row = [""], 0
    for token in re.findall(r"\x1b\[(\d*)([FJ])|(\r?\n)|([^\x1b\r\n]+)", data):
        count, code, newline, text = token
        if code == "F":
            row -= int(count or 1)
        elif code == "J":
            del rows[row + 1:]
            rows[row] = ""
        elif newline:
            row += 1
            if row == len(rows):
                rows.append("")
        else:
            rows[row] = text
    return rows[:-1] if rows[-1] == "" else rows


def _pty_stream():
    master, slave = pty.openpty()
    stream = os.fdopen(slave, "w", encoding="utf-8")
    got = []
    reader = threading.Thread(target=lambda: _drain(master, got), daemon=True)
    reader.start()
    return stream, got, reader


def _drain(fd, got):
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the slave side closed
            return
        if not chunk:
            return
        got.append(chunk)


def test_on_a_terminal_the_lines_are_redrawn_in_place_under_the_lines_printed_for_good(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    stream, got, reader = _pty_stream()
    lines = LiveLines(stream)
    assert lines.terminal  # found out from the pty itself
    a, b = {**RECORD, "step": 1}, {**RECORD, "step": 2}
    lines.log("sweep s: 2 runs")
    for step in range(1, 6):  # five redraws: still one line per run
        lines.show({"a": ("a", {**a, "step": step}), "b": ("b", {**b, "step": 10 * step})})
    lines.log("[1/2] a: completed")
    lines.show({"b": ("b", {**b, "step": 60})})
    assert screen_of(stream, got)[-3:] == ["sweep s: 2 runs", "[1/2] a: completed",
                                           progress_line("b", {**b, "step": 60})]
    lines.close()  # the command's results come next, where the live lines stood
    stream.write("table\n")
    assert screen_of(stream, got)[-3:] == ["sweep s: 2 runs", "[1/2] a: completed", "table"]
    stream.close()
    reader.join(timeout=5)


def screen_of(stream, got) -> list:
    stream.flush()
    seen, still = -1, 0
    while still < 5:  # until the reader thread has had everything written: no new bytes for 5 polls
        threading.Event().wait(0.02)
        size = sum(map(len, got))
        still, seen = (still + 1, seen) if size == seen else (0, size)
    return screen(b"".join(got).decode())


def test_a_terminal_that_cannot_move_its_cursor_gets_plain_lines(monkeypatch):
    monkeypatch.setenv("TERM", "dumb")  # an editor's output pane
    stream, got, reader = _pty_stream()
    assert not LiveLines(stream).terminal
    stream.close()
    reader.join(timeout=5)
