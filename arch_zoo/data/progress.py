"""A prepare's progress on stderr: a tqdm bar where someone watches (a terminal), else one plain line
every ``EVERY`` seconds (as ``datasets`` writes into logs), so a long build in a job's or a sweep's
log is not silent. BPE training, the longest phase, reports the characters it has read and then, while
the trainer learns its merges (in Rust, without the GIL), how long it has been at it."""
from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Iterable, Iterator, Optional

from ..formatting import si

EVERY = 5.0  # seconds between progress lines when stderr is not a terminal
Log = Callable[[str], None]


def interactive() -> bool:
    """A progress bar only where someone watches: stderr is a terminal."""
    return sys.stderr.isatty()


class Progress:
    """Bytes read (and tokens written) of one phase: a bar on a terminal, else a line now and then."""

    def __init__(self, enabled: bool, total: int, what: str, log: Log, unit: str = "B"):
        self.bar, self.log, self.what, self.total, self.unit = None, None, what, total, unit
        if enabled and interactive():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit=unit, unit_scale=True, desc=what, file=sys.stderr, leave=False)
        elif enabled:
            self.log = log
        self.done = self.tokens = 0
        self.began = self.last = time.perf_counter()
        self.said = False  # a line was written: the phase was long enough to say when it is done

    def _rate(self) -> str:
        if not self.tokens:
            return ""
        return f", {self.tokens / max(time.perf_counter() - self.began, 1e-9) / 1e6:.2f}M tok/s"

    def tick(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.log is not None and time.perf_counter() - self.last >= EVERY:
            self.last, self.said = time.perf_counter(), True
            share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
            self.log(f"{self.what}: {si(self.done)}{self.unit} of {si(self.total)}{self.unit}{share}{self._rate()}")

    def add_tokens(self, n: int) -> None:
        self.tokens += n
        if self.bar is not None:
            self.bar.set_postfix_str(self._rate()[2:], refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.log is not None and self.said:
            self.log(f"{self.what}: done, {si(self.done)}{self.unit} in {time.perf_counter() - self.began:.1f}s"
                     f"{self._rate()}")


def counted(texts: Iterable[str], progress: Progress, then: Callable[[], None] = lambda: None) -> Iterator[str]:
    """``texts``, ticking ``progress`` by each one's characters as the consumer takes it; when they run
    out, the progress closes and ``then`` runs (the consumer works on what it read)."""
    for text in texts:
        progress.tick(len(text))
        yield text
    progress.close()
    then()


class Heartbeat:
    """A line every ``EVERY`` seconds, from ``start`` until the ``with`` block ends, for a call that
    gives no progress of its own (BPE's merges)."""

    def __init__(self, enabled: bool, what: str, log: Log):
        self.enabled, self.what, self.log = enabled, what, log
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _beat(self, began: float) -> None:
        while not self._stop.wait(EVERY):
            self.log(f"{self.what} ({time.perf_counter() - began:.0f}s)")

    def start(self) -> None:
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._beat, args=(time.perf_counter(),), daemon=True)
            self._thread.start()

    def __enter__(self) -> "Heartbeat":
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def quiet(_: str) -> None:
    pass


def stderr_log(line: str) -> None:
    print(f"arch-zoo: {line}", file=sys.stderr)
