"""The token store's targets (issue 15 §4), measured side by side in one run.

1. Prepare SIZE MB of text with a BPE of VOCAB tokens trained on it (``arch-zoo prepare``'s own code,
   in a fresh child process): peak RSS, and throughput against the ceiling, the ``tokenizers``
   library's own batch encoding of the same text with the same trained tokenizer (reading the file
   in the same 1 MiB pieces, ``encode_batch_fast`` over batches of them, ids discarded), also in a
   fresh child. Ratio = reference encode seconds / prepare's encode-phase seconds; the end-to-end
   ratio (prepare's scan + BPE training on its sample + encode + writing shards) is shown too.
2. A second prepare of the same config: the in-process call (a cache hit) and the whole
   ``arch-zoo prepare`` command (interpreter start and imports included).
3. A run's start-up before its first training step (task build from the store + the first batch),
   for a SMALL MB corpus and the SIZE MB one, alternating fresh children: median wall and process CPU
   seconds, and RSS growth (``--startup-tokenizer char`` compares a store of SIZE M tokens, quick to
   prepare: 300 MB of text holds more tokens and windows than 1 GB under the 8k BPE).
4. A sweep of N runs over one corpus tokenizes it once: a real ``arch-zoo sweep`` with 2 workers
   on a fresh cache; the cache's builds.jsonl must hold one line.

The corpus is this machine's Python standard library, repeated (each copy prefixed by its number
so no two copies are byte-identical) up to SIZE MB: real code and prose, nothing downloaded.

Usage: python benchmarks/prepare.py [--size-mb 1000] [--small-mb 10] [--vocab 8192] [--pairs N] [--json PATH]
       python benchmarks/prepare.py --size-mb 300 --sections startup --startup-tokenizer char
       (--quick: 20 MB vs 5 MB with a 2k BPE, for a smoke run)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD_PREPARE = """
import json, resource, sys, time
from arch_zoo.data.prepare import prepare
from arch_zoo.data.tasks import TASKS
opts = TASKS.parse(json.loads(sys.argv[1]), "task").options
t = time.perf_counter()
store = prepare(opts, sys.argv[2])
wall = time.perf_counter() - t
t = time.perf_counter()
prepare(opts, sys.argv[2])
hit = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "hit_s": hit, "phases_s": store.manifest["seconds"], "root": str(store.root),
                  "phases_cpu_s": store.manifest.get("cpu_seconds", {}),
                  "tokens": sum(s["tokens"] for s in store.manifest["splits"].values()),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

CHILD_REFERENCE = """
import json, resource, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_str(json.load(open(sys.argv[1]))["state"]["serialized"])  # arch_zoo's wrapper file
encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
t, c, n, batch, size = time.perf_counter(), time.process_time(), 0, [], 0
with open(sys.argv[2], encoding="utf-8") as f:
    for piece in iter(lambda: f.read(1 << 20), ""):
        batch.append(piece)
        size += len(piece)
        if size >= 1 << 23:
            n += sum(len(e.ids) for e in encode(batch, add_special_tokens=False))
            batch, size = [], 0
n += sum(len(e.ids) for e in encode(batch, add_special_tokens=False))
print(json.dumps({"encode_s": time.perf_counter() - t, "tokens": n, "encode_cpu_s": time.process_time() - c,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

CHILD_STARTUP = """
import json, resource, sys, time
t0 = time.perf_counter()
import torch
from arch_zoo.experiment import load
from arch_zoo.training.datamodule import TaskDataModule
from arch_zoo.training.module import ArchZooModule
from arch_zoo.training.run import prepare
cfg = load(sys.argv[1], sys.argv[2:])
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t, c = time.perf_counter(), time.process_time()
data = prepare(cfg)
dm = TaskDataModule(data, cfg.train, cfg.seed)
module = ArchZooModule(cfg, data)
batch = next(iter(dm.train_dataloader()))
module.objective.forward(module.model, batch)  # the batch reaches the model: training could step
print(json.dumps({"startup_s": time.perf_counter() - t, "startup_cpu_s": time.process_time() - c,
                  "windows": len(data.splits["train"]),
                  "rss_growth_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss0}))
"""


def child(code: str, *args: str, env: Optional[dict] = None) -> dict:
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_corpus(path: Path, mb: float) -> None:
    from arch_zoo.data.sources import sorted_py_files, stdlib_root

    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted_py_files(stdlib_root())]
    want, n = int(mb * 1e6), 0
    with open(path, "w", encoding="utf-8") as f:
        copy = 0
        while n < want:
            for t in texts:
                chunk = f"# copy {copy}\n{t}"
                f.write(chunk)
                n += len(chunk.encode("utf-8"))
                if n >= want:
                    break
            copy += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=1000)
    ap.add_argument("--small-mb", type=float, default=10)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--sweep-runs", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=1, help="prepare / reference pairs, alternating")
    ap.add_argument("--rounds", type=int, default=9, help="start-up measurements per corpus (median)")
    ap.add_argument("--startup-tokenizer", default="bpe", choices=["bpe", "char", "byte"],
                    help="the stores the start-up compares (char: a store of SIZE M tokens, quick to prepare)")
    ap.add_argument("--workdir", default=None, help="where the corpora and the cache go (default: a temp dir)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sections", default="prepare,hit,startup,sweep",
                    help="which measurements (a rerun of startup,sweep reuses the workdir's prepared stores)")
    a = ap.parse_args()
    if a.quick:
        a.size_mb, a.small_mb, a.vocab, a.sweep_runs = 20, 5, 2048, 2
    work = Path(a.workdir or tempfile.mkdtemp(prefix="bench_prepare_"))
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "cache"
    parts = set(a.sections.split(","))
    if "prepare" in parts:
        shutil.rmtree(cache, ignore_errors=True)  # the first prepare below must build, not hit
    big, small = work / f"corpus_{a.size_mb:g}mb.txt", work / f"corpus_{a.small_mb:g}mb.txt"
    for path, mb in ((big, a.size_mb), (small, a.small_mb)):
        if not path.exists() or path.stat().st_size < mb * 1e6:
            make_corpus(path, mb)
    out = {"machine": {"cpu_count": os.cpu_count(), "loadavg": os.getloadavg()}, "size_mb": a.size_mb,
           "small_mb": a.small_mb, "vocab": a.vocab}
    tok = {"name": "bpe", "vocab_size": a.vocab}
    task = {"name": "char_lm", "files": [str(big)], "max_chars": None, "tokenizer": tok}

    if "prepare" in parts:
        prepare_vs_ceiling(a, out, task, cache, big)
    cfg = work / "exp.yaml"
    cfg.write_text(json.dumps({"name": "bench", "model": {"kind": "decoder", "d_model": 64, "n_layers": 2,
                                                          "n_heads": 2, "d_ff": 128, "max_seq_len": 128},
                               "task": {**task, "seq_len": 128},
                               "train": {"max_steps": 5, "batch_size": 8, "val_every": 5, "val_batches": 1,
                                         "progress_bar": False}}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ARCH_ZOO_CACHE": str(cache)}
    if "hit" in parts:
        cache_hit(a, out, task, cache, cfg, env)
    if "startup" in parts:
        startup(a, out, task, cache, cfg, small, big)
    if "sweep" in parts:
        sweep_once(a, out, work, cfg, small, env)
    print(f"load average at the end: {os.getloadavg()} on {os.cpu_count()} cores")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


def prepare_vs_ceiling(a, out, task, cache, big) -> None:
    """Prepare and the reference alternate ``--pairs`` times (each prepare on an empty cache), so a
    change in other load falls on both; ratios from wall time and from process CPU time."""
    pairs = []
    for i in range(a.pairs):
        shutil.rmtree(cache, ignore_errors=True)
        load = os.getloadavg()[0]
        prep = child(CHILD_PREPARE, json.dumps(task), str(cache))
        ref = child(CHILD_REFERENCE, str(Path(prep["root"]) / "tokenizer.json"), str(big))
        pairs.append({"prepare": prep, "reference": ref, "loadavg": [load, os.getloadavg()[0]],
                      "ratio_wall": ref["encode_s"] / prep["phases_s"]["encode"],
                      "ratio_cpu": ref["encode_cpu_s"] / prep["phases_cpu_s"]["encode"],
                      "ratio_end_to_end": ref["encode_s"] / prep["wall_s"]})
        p, r = prep, ref
        enc = p["phases_s"]["encode"]
        print(f"[{i + 1}/{a.pairs}] prepare {a.size_mb:g} MB, bpe {a.vocab}: {p['wall_s']:.1f}s (scan "
              f"{p['phases_s']['scan']:.1f}, fit {p['phases_s']['fit']:.1f}, encode {enc:.1f} = {a.size_mb / enc:.2f} MB/s, "
              f"{p['phases_cpu_s']['encode']:.1f} CPU-s), peak RSS {p['peak_rss_mb']:.0f} MB (target <= 2048)")
        print(f"[{i + 1}/{a.pairs}] tokenizers encode_batch_fast of the same text: {r['encode_s']:.1f}s "
              f"({r['encode_cpu_s']:.1f} CPU-s), {r['tokens']:,} tokens (prepare: {p['tokens']:,}, cut at the splits); "
              f"ratio {pairs[-1]['ratio_wall']:.2f}x wall, {pairs[-1]['ratio_cpu']:.2f}x CPU (target >= 0.8x); "
              f"end to end (scan + BPE training + encode) {pairs[-1]['ratio_end_to_end']:.2f}x; "
              f"load average {load:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    out["prepare_pairs"] = pairs
    out["throughput_ratio_wall"] = sum(r["reference"]["encode_s"] for r in pairs) / sum(
        r["prepare"]["phases_s"]["encode"] for r in pairs)
    out["throughput_ratio_cpu"] = sum(r["reference"]["encode_cpu_s"] for r in pairs) / sum(
        r["prepare"]["phases_cpu_s"]["encode"] for r in pairs)
    out["peak_rss_mb"] = max(r["prepare"]["peak_rss_mb"] for r in pairs)
    print(f"throughput vs tokenizers over {a.pairs} pair(s): {out['throughput_ratio_wall']:.2f}x wall, "
          f"{out['throughput_ratio_cpu']:.2f}x CPU; peak RSS {out['peak_rss_mb']:.0f} MB")


def cache_hit(a, out, task, cache, cfg, env) -> None:
    hit = child(CHILD_PREPARE, json.dumps(task), str(cache))["hit_s"]
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "arch_zoo", "prepare", str(cfg), "--quiet"], env=env, check=True,
                   capture_output=True)
    out["cache_hit_s"], out["cache_hit_command_s"] = hit, time.perf_counter() - t
    print(f"second prepare: {hit * 1000:.0f} ms in-process (target < 1 s); the whole `arch-zoo prepare` "
          f"command {out['cache_hit_command_s']:.1f}s (interpreter + torch imports)")



def startup(a, out, task, cache, cfg, small, big) -> None:
    """Both stores are prepared first (no build is timed); then fresh children alternate small and big
    ``--rounds`` times. Medians of wall and of process CPU seconds: CPU time counts only the child's own
    work, so it holds while other processes load the machine (one torch thread, so no spinning OpenMP
    thread inflates it)."""
    tok = task["tokenizer"] if a.startup_tokenizer == "bpe" else a.startup_tokenizer
    for path in (small, big):
        child(CHILD_PREPARE, json.dumps({**task, "files": [str(path)], "tokenizer": tok}), str(cache))
    env = {"ARCH_ZOO_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    samples = {"small": [], "big": []}
    for _ in range(a.rounds):  # alternating fresh children: a change in other load falls on both
        for label, path in (("small", small), ("big", big)):
            samples[label].append(child(CHILD_STARTUP, str(cfg), f"task.files=[{path}]",
                                        f"task.tokenizer={json.dumps(tok)}", env=env))
    rows = {k: {"startup_s": statistics.median(r["startup_s"] for r in v),
                "startup_cpu_s": statistics.median(r["startup_cpu_s"] for r in v),
                "rss_growth_mb": statistics.median(r["rss_growth_mb"] for r in v), "windows": v[0]["windows"],
                "all_s": [round(r["startup_s"], 4) for r in v], "all_cpu_s": [round(r["startup_cpu_s"], 4) for r in v]}
            for k, v in samples.items()}
    out["startup"] = rows
    out["startup_ratio"] = rows["big"]["startup_s"] / rows["small"]["startup_s"]
    out["startup_ratio_cpu"] = rows["big"]["startup_cpu_s"] / rows["small"]["startup_cpu_s"]
    mb = {"small": a.small_mb, "big": a.size_mb}
    print(f"run start-up to the first batch, {a.startup_tokenizer} tokenizer (median of {a.rounds}):")
    for k, r in rows.items():
        print(f"  {mb[k]:g} MB: {r['startup_s'] * 1000:.0f} ms wall, {r['startup_cpu_s'] * 1000:.0f} ms CPU, "
              f"+{r['rss_growth_mb']:.0f} MB RSS, {r['windows']:,} train windows")
    print(f"  big / small: {out['startup_ratio']:.2f} wall, {out['startup_ratio_cpu']:.2f} CPU (target within 10%)")


def sweep_once(a, out, work, cfg, small, env) -> None:
    sweep_cache = work / "sweep_cache"
    spec = work / "sweep.yaml"
    spec.write_text(json.dumps({"name": "once", "base": str(cfg), "overrides": {"task.files": [str(small)],
                                "train.max_steps": 2, "train.val_every": 2},
                                "grid": {"model.position": ["rope", "alibi"]},
                                "seeds": list(range(max(1, a.sweep_runs // 2)))}))
    proc = subprocess.run([sys.executable, "-m", "arch_zoo", "sweep", str(spec), "--out", str(work / "sweeps"),
                           "--workers", "2", "--cache-dir", str(sweep_cache)], env=env, capture_output=True, text=True)
    lines = (sweep_cache / "builds.jsonl").read_text().splitlines() if (sweep_cache / "builds.jsonl").exists() else []
    out["sweep"] = {"runs": 2 * max(1, a.sweep_runs // 2), "exit": proc.returncode, "builds": len(lines)}
    print(f"sweep of {out['sweep']['runs']} runs, 2 workers: exit {proc.returncode}, the corpus tokenized "
          f"{len(lines)} time(s) (target 1)")


if __name__ == "__main__":
    main()
