"""Read an offline wandb run (``run-<id>.wandb``) back with wandb's own record schema.

wandb >= 0.20 writes these files from its Go core and no longer ships the Python reader; the file is
a LevelDB-style log (a 7-byte header, then 32 KiB blocks of checksummed chunks) of
``wandb_internal_pb2.Record`` messages, which is what ``wandb sync`` uploads. Parsing the records
with wandb's own protobuf classes checks what would reach the server, field by field."""
from __future__ import annotations

import json
import struct
import time
import zlib
from pathlib import Path
from typing import Dict, List

BLOCK, HEADER = 32 * 1024, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> List:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb log"
    out, pos, pending = [], HEADER, b""
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:  # block trailer: padding
            pos += room
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        chunk = data[pos + HEADER:pos + HEADER + length]
        if kind == 0 and length == 0:
            pos += room
            continue
        assert zlib.crc32(bytes([kind]) + chunk) & 0xFFFFFFFF == checksum, f"{path}: bad checksum at {pos}"
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
        pos += HEADER + length
    return out


def read_run(run_dir: Path, timeout: float = 60) -> Dict:
    """{'run': RunRecord, 'config': {...}, 'history': [{...}], 'summary': {...}} of the offline run in
    ``run_dir`` (its offline-run-* folder); waits for wandb's service to finish writing it."""
    deadline = time.time() + timeout
    while True:
        files = sorted(Path(run_dir).glob("run-*.wandb"))
        recs = records(files[0]) if files else []
        if any(r.WhichOneof("record_type") == "exit" for r in recs) or time.time() > deadline:
            break
        time.sleep(0.5)
    out: Dict = {"run": None, "config": {}, "history": [], "summary": {}}
    for r in recs:
        kind = r.WhichOneof("record_type")
        if kind == "run":
            out["run"] = r.run
            out["config"].update({i.key: json.loads(i.value_json) for i in r.run.config.update})
        elif kind == "config":
            out["config"].update({i.key: json.loads(i.value_json) for i in r.config.update})
        elif kind == "history":
            out["history"].append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item})
        elif kind == "summary":
            out["summary"].update({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.summary.update})
    return out
