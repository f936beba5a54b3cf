"""The token store's encode pass (issue 15): segments of about SEGMENT characters, encoded in batches
by a worker thread while the main thread writes, with ids equal to a plain encode of the same text."""
import json
import threading

import numpy as np
import pytest

from arch_zoo.data.encode import batches, encoded, scan, segments
from arch_zoo.data.prepare import prepare
from arch_zoo.data.sources import resolve
from arch_zoo.data.tasks import TASKS
from arch_zoo.data.tokenizers import EOS

from .test_store import text


def options(**kw):
    return TASKS.parse({"name": "char_lm", "max_chars": None, **kw}, "task").options


def test_segments_are_about_segment_characters_and_cut_only_at_safe_places(tmp_path, monkeypatch):
    """README: "the text is encoded in segments of about 1M characters ... a BPE segment is cut only where
    the text reads X\\nY (X, Y not whitespace)" (SEGMENT of 300 characters here, the text read in one piece)."""
    monkeypatch.setattr("arch_zoo.data.encode.SEGMENT", 300)
    body = text(400)
    (tmp_path / "a.txt").write_text(body)
    inputs = resolve([str(tmp_path / "a.txt")])
    sc = scan(inputs, "text", None, False)
    segs = list(segments(inputs, "text", None, sc, False, False))
    a, b = sc.bounds()
    for split, part in enumerate((body[:a], body[a:b], body[b:])):
        mine = [s[1] for s in segs if s[0] == split]
        assert "".join(mine) == part and mine[-1] != "" and all(0 < len(t) <= 300 for t in mine)
        assert all(t[-1] == "\n" and t[-2] != " " and not n[0].isspace() for t, n in zip(mine, mine[1:]))
    assert len(segs) > 60  # not one segment per 4 MiB piece read
    groups = list(batches(iter(segs), 1000))
    assert [s for g in groups for s in g] == segs and all(1000 <= sum(len(s[1]) for s in g) < 1300 for g in groups[:-1])


def test_pipelined_bpe_store_equals_a_plain_encode_of_every_document(tmp_path, monkeypatch):
    """README: "the ids equal encoding each split whole (tested)"; with split_by: documents each document's
    ids are a plain encode of it followed by eos, and an empty document (a blank dataset row) adds nothing.
    Segments of 300 characters in batches of 1,000: many batches pass through the encode thread."""
    monkeypatch.setattr("arch_zoo.data.encode.SEGMENT", 300)
    monkeypatch.setattr("arch_zoo.data.prepare.BATCH", 1000)
    docs = [f"doc {i}\n" + text(1 + i % 23, seed=i) for i in range(120)] + [""] * 6
    f = tmp_path / "docs.jsonl"
    f.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    store = prepare(options(files=[str(f)], split_by="documents", tokenizer={"name": "bpe", "vocab_size": 300}),
                    tmp_path / "cache")
    tok, found = store.tokenizer, []
    for split in ("train", "val", "test"):
        ids = store.split(split).read(0, len(store.split(split))).tolist()
        starts = store.doc_starts(split).tolist()
        for s, e in zip(starts, starts[1:] + [len(ids)]):
            assert ids[e - 1] == EOS
            found.append(ids[s:e - 1])
    want = sorted(tok.encode(d) for d in docs if d)
    assert sorted(found) == want and store.manifest["splits"]["train"]["documents"] > 90


def test_an_error_on_either_side_of_the_encode_thread_stops_both():
    """The pipeline's worker thread: its error reaches the caller; the caller's error stops the worker."""
    def failing(texts):
        if "bad" in texts[0]:
            raise ValueError("cannot encode")
        return [np.arange(len(t)) for t in texts]

    groups = [[(0, "ok", True, True)], [(0, "bad", True, True)], [(0, "never", True, True)]]
    out = []
    with pytest.raises(ValueError, match="cannot encode"):
        for batch, ids in encoded(failing, iter(groups)):
            out.append(ids[0].tolist())
    assert out == [[0, 1]]
    seen = []

    def slow(texts):
        seen.append(texts[0])
        return [np.zeros(1)]

    pipeline = encoded(slow, iter([[(0, str(i), True, True)] for i in range(100)]))
    next(pipeline)
    pipeline.close()  # what a full disk or Ctrl-C in the writer does
    workers = [t for t in threading.enumerate() if t.name.startswith("arch-zoo-encode")]
    for t in workers:
        t.join(10)
    assert len(seen) <= 3 and not any(t.is_alive() for t in workers)
