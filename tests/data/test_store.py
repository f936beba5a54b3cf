"""The token store (issue 15): prepared once, content-addressed, memory-mapped, read by offset.

Tiny corpora are generated in tmp_path; every test prepares into its own cache directory."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from arch_zoo.data.prepare import prepare
from arch_zoo.data.tasks import TASKS
from arch_zoo.data.tokenizers import EOS
from arch_zoo.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def options(name="char_lm", **kw):
    return TASKS.parse({"name": name, **kw}, "task").options


def text(n_lines=400, seed=0):
    rng = np.random.default_rng(seed)
    return "".join(" ".join(rng.choice(WORDS, 8)) + ".\n" for _ in range(n_lines))


def builds(cache: Path):
    path = cache / "builds.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def corpus(tmp_path):
    f = tmp_path / "book.txt"
    f.write_text(text())
    return f


def test_manifest_records_sources_tokenizer_and_splits(corpus, tmp_path):
    """README: "a JSON manifest: the source files with size, mtime and sha256, the tokenizer and its hash,
    document and split boundaries, token counts, chars per token"; the shards hold exactly the ids."""
    store = prepare(options(files=[str(corpus)], max_chars=None), tmp_path / "cache")
    m = store.manifest
    st = corpus.stat()
    assert [(s["path"], s["size"], s["mtime_ns"]) for s in m["sources"]] == [(str(corpus), st.st_size, st.st_mtime_ns)]
    assert len(m["sources"][0]["sha256"]) == 64 and len(m["tokenizer"]["sha256"]) == 64
    assert m["dtype"] == "uint16" and m["tokenizer"]["name"] == "char"
    body = corpus.read_text()
    a, b = int(0.9 * len(body)), int(0.95 * len(body))
    tok = store.tokenizer
    for split, part in (("train", body[:a]), ("val", body[a:b]), ("test", body[b:])):
        ids = store.split(split).read(0, len(store.split(split)))
        assert ids.tolist() == tok.encode(part) and m["splits"][split]["chars"] == len(part)
        shard = store.root / m["splits"][split]["shards"][0]["file"]
        assert np.fromfile(shard, dtype=np.uint16).tolist() == tok.encode(part)


def test_second_prepare_is_a_cache_hit_and_a_changed_source_rebuilds(corpus, tmp_path):
    """README: "a second prepare of the same config is a cache hit"; "a source file changed after
    preparing is detected and the store rebuilt"."""
    cache = tmp_path / "cache"
    first = prepare(options(files=[str(corpus)]), cache)
    again = prepare(options(files=[str(corpus)], seq_len=16), cache)  # seq_len is read-time: same store
    assert again.root == first.root and len(builds(cache)) == 1
    corpus.write_text(text(seed=1))
    rebuilt = prepare(options(files=[str(corpus)]), cache)
    assert rebuilt.root == first.root and len(builds(cache)) == 2
    assert rebuilt.manifest["sources"][0]["sha256"] != first.manifest["sources"][0]["sha256"]
    os.utime(corpus, ns=(1, 1))  # touched, same bytes: still a hit
    assert prepare(options(files=[str(corpus)]), cache).root == first.root and len(builds(cache)) == 2
    other = prepare(options(files=[str(corpus)], tokenizer="byte"), cache)
    assert other.root != first.root and len(builds(cache)) == 3


def test_truncated_or_corrupt_shard_is_an_error_naming_the_file(corpus, tmp_path):
    """README: "a truncated or corrupt shard is an error naming the file"."""
    cache = tmp_path / "cache"
    store = prepare(options(files=[str(corpus)]), cache)
    shard = store.root / store.manifest["splits"]["train"]["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    data[10:12] = (60000).to_bytes(2, "little")  # an id past the vocabulary
    shard.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=f"{shard} is corrupt"):
        prepare(options(files=[str(corpus)]), cache).split("train").read(0, 64)
    with pytest.raises(ConfigError, match=f"{shard} is corrupt"):
        prepare(options(files=[str(corpus)]), cache).verify()
    shard.write_bytes(bytes(data[:-7]))
    with pytest.raises(ConfigError, match=f"{shard} is truncated"):
        prepare(options(files=[str(corpus)]), cache)


def test_windows_are_read_by_offset_in_every_split(corpus, tmp_path, monkeypatch):
    """Windows across shard boundaries read the same ids as the whole split (shards of 100 ids)."""
    monkeypatch.setenv("ARCH_ZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("arch_zoo.data.encode.SHARD_TOKENS", 100)
    spec = TASKS.parse({"name": "char_lm", "files": [str(corpus)], "seq_len": 48, "eval_lengths": [24]}, "task")
    data = TASKS.build(spec, 3, "decoder", 64).build()
    store = prepare(spec.options)
    assert len(store.manifest["splits"]["train"]["shards"]) > 10
    train = store.split("train").read(0, len(store.split("train"))).tolist()
    off = data.info["train_offset"]
    assert [e.input_ids for e in data.splits["train"]] == [train[i:i + 48] for i in
                                                           range(off, len(train) - 47, 48)]
    val = store.split("val").read(0, len(store.split("val"))).tolist()
    assert [t for e in data.splits["val"] for t in e.input_ids] == val
    assert data.splits["val@24"][1].input_ids == val[24:48]


def test_documents_are_joined_with_eos_and_split_by_content(tmp_path):
    """README: "documents are joined with an EOS token; splits are by document and deterministic"."""
    docs = [f"document {i}: " + text(3, seed=i) for i in range(300)] + ["the same text"] * 5
    f = tmp_path / "docs.jsonl"
    f.write_text("".join(json.dumps({"body": d, "id": i}) + "\n" for i, d in enumerate(docs)))
    store = prepare(options(files=[str(f)], text_field="body", split_by="documents", max_chars=None),
                    tmp_path / "cache")
    tok, seen = store.tokenizer, {}
    for split in ("train", "val", "test"):
        ids = store.split(split).read(0, len(store.split(split))).tolist()
        starts = store.doc_starts(split).tolist()
        assert ids[-1] == EOS and starts[0] == 0 and store.manifest["splits"][split]["documents"] == len(starts)
        for s, e in zip(starts, starts[1:] + [len(ids)]):
            assert ids[e - 1] == EOS
            seen.setdefault(tok.decode(ids[s:e - 1]), set()).add(split)
    assert sorted(seen) == sorted(set(docs)) and all(len(s) == 1 for s in seen.values())
    counts = {s: store.manifest["splits"][s]["documents"] for s in ("train", "val", "test")}
    assert counts["train"] > 240 and counts["val"] >= 5 and counts["test"] >= 5
    f.write_text("".join(json.dumps({"body": d}) + "\n" for d in reversed(docs)))  # order does not decide a split
    again = prepare(options(files=[str(f)], text_field="body", split_by="documents", max_chars=None),
                    tmp_path / "cache2")
    assert {s: again.manifest["splits"][s]["documents"] for s in counts} == counts


def test_parquet_dataset_dir_glob_and_directory_inputs(tmp_path):
    """README: task.files takes files, directories and globs; Parquet and datasets save_to_disk dirs."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = [text(4, seed=i) for i in range(40)]
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table({"text": docs[:20], "n": list(range(20))}), tmp_path / "d" / "a.parquet")
    (tmp_path / "d" / "b.txt").write_text("".join(docs[20:30]))
    datasets.Dataset.from_dict({"text": docs[30:]}).save_to_disk(str(tmp_path / "hf"))
    store = prepare(options(files=[str(tmp_path / "d"), str(tmp_path / "hf"), str(tmp_path / "d" / "*.txt")],
                            max_chars=None), tmp_path / "cache")
    expected = "".join(docs[:20]) + "".join(docs[20:30]) + "".join(docs[30:]) + "".join(docs[20:30])
    assert store.manifest["chars"] == len(expected)
    assert store.tokenizer.decode(store.split("test").read(0, len(store.split("test"))).tolist()) == \
        expected[int(0.95 * len(expected)):]
    names = [Path(s["path"]).name for s in store.manifest["sources"]]
    assert names[:2] == ["a.parquet", "b.txt"] and names[-1] == "b.txt" and any(n.endswith(".arrow") for n in names)


def test_bpe_store_equals_encoding_each_split_whole(corpus, tmp_path, monkeypatch):
    """README: "the ids equal encoding each split whole (tested)": BPE segments are cut only where the
    byte-level pre-tokenizer splits anyway (segments of 300 characters here, in batches of 1,000 that a
    worker thread encodes while the main thread writes)."""
    monkeypatch.setattr("arch_zoo.data.encode.SEGMENT", 300)
    monkeypatch.setattr("arch_zoo.data.prepare.BATCH", 1000)
    store = prepare(options(files=[str(corpus)], tokenizer={"name": "bpe", "vocab_size": 300}), tmp_path / "c")
    body = corpus.read_text()
    a, b = int(0.9 * len(body)), int(0.95 * len(body))
    for split, part in (("train", body[:a]), ("val", body[a:b]), ("test", body[b:])):
        assert store.split(split).read(0, len(store.split(split))).tolist() == store.tokenizer.encode(part)


def test_pretrained_tokenizer_from_a_local_file(corpus, tmp_path):
    """README: a pretrained Hugging Face tokenizer from a local tokenizer.json or directory; the store records it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer, hf.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    hf.train_from_iterator([text(seed=5)], trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                               show_progress=False))
    (tmp_path / "tok").mkdir()
    hf.save(str(tmp_path / "tok" / "tokenizer.json"))
    store = prepare(options(files=[str(corpus)], tokenizer={"name": "pretrained", "path": str(tmp_path / "tok")}),
                    tmp_path / "cache")
    tok = store.tokenizer
    assert store.manifest["tokenizer"]["name"] == "pretrained" and tok.eos_id == hf.token_to_id("<|endoftext|>")
    body = corpus.read_text()
    ids = store.split("val").read(0, len(store.split("val"))).tolist()
    assert ids == hf.encode(body[int(0.9 * len(body)):int(0.95 * len(body))]).ids


PREPARE = """
import sys
from arch_zoo.data.prepare import prepare
from arch_zoo.data.tasks import TASKS
opts = TASKS.parse({{"name": "char_lm", "files": [{f!r}], "max_chars": None, "tokenizer": {tok}}}, "task").options
print(prepare(opts, {cache!r}).root, flush=True)
"""


def _spawn(code):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            text=True)


def test_concurrent_prepares_build_once(corpus, tmp_path):
    """README: "concurrent sweep workers build it once" (three real processes at the same moment)."""
    cache = tmp_path / "cache"
    procs = [_spawn(PREPARE.format(f=str(corpus), cache=str(cache), tok='"char"')) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len({o[0] for o in outs}) == 1 and len(builds(cache)) == 1


def test_killed_prepare_leaves_nothing_half_written(tmp_path):
    """README: "a killed prepare leaves nothing half-written": SIGKILL mid-build, then prepare again."""
    big = tmp_path / "big.txt"
    big.write_text(text(40000))  # ~2.4 MB: BPE training alone outlasts the kill
    cache = tmp_path / "cache"
    proc = _spawn(PREPARE.format(f=str(big), cache=str(cache), tok='{"name": "bpe", "vocab_size": 2000}'))
    deadline = time.time() + 120
    while not list(cache.glob(".tmp-*")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert proc.poll() is None and list(cache.glob(".tmp-*")), proc.communicate()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert [p.name for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".tmp-")] == []
    assert not builds(cache)
    store = prepare(options(files=[str(big)], max_chars=None, tokenizer={"name": "bpe", "vocab_size": 2000}), cache)
    assert [p.name for p in cache.iterdir() if p.is_dir()] == [store.root.name]  # the leftover is gone


def test_a_sweep_prepares_its_store_once_before_dispatching(corpus, tmp_path, monkeypatch):
    """README: "a sweep of N runs over one corpus tokenizes it once", in the coordinator before any
    worker starts (the one build is this process's, not a worker's)."""
    from arch_zoo.sweeps import load_spec, run_sweep
    from tests.sweeps.conftest import BASE, write_spec

    cache = tmp_path / "cache"
    monkeypatch.setenv("ARCH_ZOO_CACHE", str(cache))
    base = {**BASE, "task": {"name": "char_lm", "files": [str(corpus)], "seq_len": 32},
            "train": {**BASE["train"], "max_steps": 2, "val_every": 2, "val_batches": 1}}
    path = write_spec(tmp_path / "specs", {"name": "once", "grid": {"model.position": ["rope", "alibi"]},
                                           "seeds": [0]}, base)
    outcome = run_sweep(load_spec(path), tmp_path / "out", workers=2, log=lambda line: None)
    assert not outcome.problems()
    assert [b["pid"] for b in builds(cache)] == [os.getpid()]


def test_prepare_command_prints_the_store_and_hits_the_cache(corpus, tmp_path, capsys):
    """README: `arch-zoo prepare CONFIG [key=value ...]` (--cache-dir, --verify); a generated task has nothing to prepare."""
    import yaml

    from arch_zoo.cli import main

    cfg = tmp_path / "exp.yaml"
    cfg.write_text(yaml.safe_dump({"name": "p", "model": {"kind": "decoder", "d_model": 16, "n_layers": 1,
                                                          "n_heads": 2, "d_ff": 32, "max_seq_len": 32},
                                   "task": {"name": "char_lm", "files": [str(corpus)]}}))
    cache = tmp_path / "cache"
    assert main(["prepare", str(cfg), "--cache-dir", str(cache), "task.tokenizer=byte", "--quiet"]) == 0
    first = capsys.readouterr().out
    assert main(["prepare", str(cfg), "--cache-dir", str(cache), "task.tokenizer=byte", "--verify"]) == 0
    second = capsys.readouterr()
    root = next(p for p in cache.iterdir() if p.is_dir())
    assert first.splitlines()[0].startswith("prepared in ") and first.splitlines()[0].endswith(f"s: {root}")
    assert second.out.splitlines()[0] == f"cached: {root}" and "shards verified" in second.out  # issue 26 §2
    assert "byte tokenizer, vocab 262, uint16" in first and len(builds(cache)) == 1 and second.err == ""
    assert main(["prepare", str(cfg), "--cache-dir", str(cache), "task={name: copy}"]) == 0
    assert "generates its data: nothing to prepare" in capsys.readouterr().out
