"""Issue 26 §2: `arch-zoo prepare FILE... --tokenizer T` with no config; a cache hit says "cached" with
the store's path; progress lines when stderr is not a terminal (BPE training's too); `arch-zoo cache
list|clean` shows and removes stores and stale lock files, and never a store another process is building
(a real lock, held by another process)."""
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import arch_zoo.data.progress as progress
from arch_zoo.cli import main
from arch_zoo.locks import acquire, is_held
from arch_zoo.data.prepare import prepare
from arch_zoo.data.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


@pytest.fixture
def corpus(tmp_path):
    rng = np.random.default_rng(0)
    f = tmp_path / "book.txt"
    f.write_text("".join(" ".join(rng.choice(WORDS, 8)) + ".\n" for _ in range(3000)))
    return f


def _stores(cache: Path):
    return sorted(p.name for p in cache.iterdir() if p.is_dir() and not p.name.startswith("."))


def test_prepare_files_without_a_config_then_cached(corpus, tmp_path, capsys):
    """The store is the one a task naming the same files and tokenizer reads; the second time it is a hit."""
    cache = tmp_path / "cache"
    assert main(["prepare", str(corpus), "--tokenizer", "bpe:300", "--cache-dir", str(cache), "--quiet"]) == 0
    first = capsys.readouterr()
    task = TASKS.parse({"name": "char_lm", "files": [str(corpus)], "tokenizer": {"name": "bpe", "vocab_size": 300}},
                       "task").options
    store = prepare(task, cache)
    assert store.built_seconds is None and _stores(cache) == [store.root.name]
    assert first.out.startswith("prepared in ") and first.out.splitlines()[0].endswith(f"s: {store.root}")
    assert "bpe tokenizer, vocab 300" in first.out and first.err == ""
    assert f"unigram loss {store.info()['unigram_loss']:.4f} nats" in first.out
    assert main(["prepare", str(corpus), "--tokenizer", "bpe:300", "--cache-dir", str(cache)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"cached: {store.root}"
    assert main(["prepare", str(corpus), "--max-chars", "1000", "--cache-dir", str(cache), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"read 1,000 of {len(corpus.read_text()):,} characters (max_chars: 1,000)" in out


def test_progress_lines_when_stderr_is_not_a_terminal(corpus, tmp_path, capsys, monkeypatch):
    """As `datasets` does in logs: lines, every EVERY seconds (here 0: every update), for each phase,
    BPE's reading and its merges (a heartbeat while the trainer works without reporting)."""
    monkeypatch.setattr(progress, "EVERY", 0.0)
    merges = threading.Event()
    real = progress.Heartbeat.start
    monkeypatch.setattr(progress.Heartbeat, "start", lambda self: (merges.set(), real(self)))
    assert not sys.stderr.isatty()
    assert main(["prepare", str(corpus), "--tokenizer", "bpe:2000", "--cache-dir", str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any(line.startswith("arch-zoo: scan: ") and line.endswith("(100%)") for line in err), err
    assert any(line.startswith("arch-zoo: fit bpe: ") and " chars of " in line for line in err), err
    assert any(line.startswith("arch-zoo: tokenize: ") and "tok/s" in line for line in err), err
    assert merges.is_set() and any(line.startswith("arch-zoo: fit bpe: learning from what it read (") for line in err)
    assert err[-1].startswith("arch-zoo: prepared ")


def test_a_failed_prepare_leaves_no_lock_file(tmp_path, capsys):
    """filelock kept its 0-byte lock file after every prepare, failed ones too."""
    (tmp_path / "empty.txt").write_text("")
    cache = tmp_path / "cache"
    cache.mkdir()
    assert main(["prepare", str(tmp_path / "empty.txt"), "--cache-dir", str(cache)]) == 2
    assert "files: the corpus is empty" in capsys.readouterr().err
    assert list(cache.iterdir()) == []


def test_a_lock_whose_file_was_removed_is_taken_again(tmp_path):
    """The holder removes the file before it lets go; a waiter that then wins the old file's lock sees
    the path no longer names it, and locks the new one: never two holders."""
    path = tmp_path / "k.lock"
    first = acquire(path)
    got = []
    waiter = threading.Thread(target=lambda: got.append(acquire(path)))
    waiter.start()
    time.sleep(0.2)
    assert not got and is_held(path)
    first.release()
    waiter.join(10)
    assert got and os.fstat(got[0]._fd).st_ino == os.stat(path).st_ino
    assert acquire(path, blocking=False) is None  # the waiter holds it now
    got[0].release()
    assert not path.exists() and not is_held(path)


HOLD = """
import sys, time
from pathlib import Path
if sys.argv[1] == "filelock":
    from filelock import FileLock
    lock = FileLock(sys.argv[2])
    lock.acquire()
else:
    from arch_zoo.locks import acquire
    lock = acquire(Path(sys.argv[2]))
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("holder", ["filelock", "arch_zoo"])
def test_cache_clean_never_removes_a_store_being_built(holder, corpus, tmp_path, capsys):
    cache = tmp_path / "cache"
    done = prepare(TASKS.parse({"name": "char_lm", "files": [str(corpus)]}, "task").options, cache)
    busy = "0123456789abcdef0123"
    (cache / f".tmp-{busy}-1a2b3c4d").mkdir()
    (cache / f".tmp-{busy}-1a2b3c4d" / "train.000.bin").write_bytes(b"\0" * 64)
    (cache / "fedcba98765432100000.lock").write_bytes(b"")  # stale: a failed prepare's, nobody holds it
    (cache / "builds.jsonl").write_text("{}\n")  # not a store's: never touched
    proc = subprocess.Popen([sys.executable, "-c", HOLD, holder, str(cache / f"{busy}.lock")],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "held"
        assert main(["cache", "list", "--cache-dir", str(cache)]) == 0
        listed = capsys.readouterr().out
        assert f"{busy}  building now (another process holds {busy}.lock)" in listed
        assert "fedcba98765432100000  stale lock fedcba98765432100000.lock" in listed
        assert f"{done.root.name}  " in listed and "char vocab" in listed and str(corpus) in listed
        assert main(["cache", "clean", "--cache-dir", str(cache)]) == 0
        out = capsys.readouterr()
        assert f"left {busy}: another process is building it" in out.err
        assert f"removed store {done.root.name}" in out.out and "removed stale lock fedcba98765432100000.lock" in out.out
        assert sorted(p.name for p in cache.iterdir()) == [f".tmp-{busy}-1a2b3c4d", f"{busy}.lock", "builds.jsonl"]
    finally:
        proc.kill()
        proc.wait()
    assert main(["cache", "clean", busy, "--cache-dir", str(cache)]) == 0  # its builder is gone: stale now
    assert f"removed temporary directory .tmp-{busy}-1a2b3c4d" in capsys.readouterr().out
    assert sorted(p.name for p in cache.iterdir()) == ["builds.jsonl"]


def test_cache_clean_stale_keeps_the_stores(corpus, tmp_path, capsys):
    cache = tmp_path / "cache"
    done = prepare(TASKS.parse({"name": "char_lm", "files": [str(corpus)]}, "task").options, cache)
    (cache / f"{done.root.name}.lock").write_bytes(b"")
    assert main(["cache", "clean", "--stale", "--cache-dir", str(cache)]) == 0
    assert capsys.readouterr().out.startswith(f"removed stale lock {done.root.name}.lock")
    assert _stores(cache) == [done.root.name] and not (cache / f"{done.root.name}.lock").exists()
    assert main(["cache", "list", "--cache-dir", str(tmp_path / "none")]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'none'}: no token stores\n"
