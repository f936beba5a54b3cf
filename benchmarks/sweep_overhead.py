"""How much of a sweep's time is spent outside training, with 1 and with 2 local workers.

A sweep of 12 tiny runs (3 positions x 2 feed-forwards x 2 seeds, a d_model-32 char LM, a few
seconds each) runs as the real command, `python -m arch_zoo sweep SPEC --workers N`, in a fresh
process per worker count, so every cost a user pays is in the total: interpreter start, imports,
spec expansion and validation, worker start (the forkserver importing torch and Lightning), store
I/O (run.json, index.csv after every run), dispatch and exit.

  training  = the sum over runs of the time inside run_one (data, Trainer, fit, eval, checkpoint),
              measured in the workers.

The targets (issue 13 §6) are the machinery's own cost:
  (a) machinery = 1 - training / worker time, where a worker's time runs from the end of its
      one-time start-up (interpreter and library imports) to the end of its last run: dispatch,
      locks, status reads, result handling and index writes between runs. Target <= 2%.
  (b) gap       = the longest time in a warm worker between the end of one run and the start of
      the next. Target <= 0.3 s.
For information, total = 1 - training / (workers x wall time of the command): every cost a user
pays, start-up included (with 2 workers, one waiting for the other at the end counts too).

The breakdown comes from the sweep's own record (invocations.jsonl). Importing torch (in the
coordinator, to validate and count parameters) and torch + Lightning (in the workers' forkserver,
overlapped with the former) is a one-time cost that any training pays, `arch-zoo train` included.

Usage: python benchmarks/sweep_overhead.py [--steps N] [--workers 1 2] [--json PATH]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_spec(directory: Path, steps: int) -> Path:
    base = {"name": "bench", "seed": 0,
            "model": {"kind": "decoder", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "max_seq_len": 64},
            "task": {"name": "char_lm", "max_chars": 100000, "seq_len": 64},
            "train": {"max_steps": steps, "batch_size": 16, "val_every": max(1, steps // 2), "val_batches": 4,
                      "progress_bar": False, "exact_match_samples": 0}}
    spec = {"name": "overhead", "base": "base.yaml",
            "grid": {"model.position": ["rope", "alibi", "sinusoidal"], "model.ffn": ["gelu", "swiglu"]},
            "seeds": [0, 1]}
    import yaml

    (directory / "base.yaml").write_text(yaml.safe_dump(base))
    (directory / "spec.yaml").write_text(yaml.safe_dump(spec))
    return directory / "spec.yaml"


def measure(spec: Path, workers: int, scratch: Path) -> dict:
    out = scratch / f"out-{workers}"
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "arch_zoo", "sweep", str(spec), "--out", str(out),
                           "--workers", str(workers)], capture_output=True, text=True, cwd=ROOT)
    total = time.perf_counter() - began
    if proc.returncode:
        raise SystemExit(f"the sweep with {workers} workers failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    with (out / "overhead" / "index.csv").open() as f:
        statuses = [row["status"] for row in csv.DictReader(f)]
    if set(statuses) != {"completed"} or len(statuses) != 12:
        raise SystemExit(f"expected 12 completed runs, got {statuses}")
    call = json.loads((out / "overhead" / "invocations.jsonl").read_text().splitlines()[-1])  # the "ended" line
    t = call["timings_s"]
    training, runs = t["training"], call["runs_trained"]
    parts = {
        "interpreter start, CLI, exit": total - call["wall_s"],
        "import torch + registries": t["import"],
        "expansion + validation": t["plan"],
        "stack import in workers": max(0.0, t["worker_startup"] - t["import"] - t["plan"]),  # not hidden by planning
        "store I/O": t["store"],
    }
    imports = parts["import torch + registries"] + parts["stack import in workers"]
    parts["dispatch + other"] = (total - training / workers) - sum(parts.values())  # incl. waiting at the end
    return {"workers": workers, "total_s": total, "training_s": training, "runs": runs,
            "mean_run_s": training / runs, "outside": 1 - training / (workers * total),
            "machinery": 1 - training / t["worker_busy"], "gap_max_s": t["between_runs_max"],
            "worker_s": t["worker_busy"], "imports_s": imports,
            "parts_s": parts, "worker_startup_s": t["worker_startup"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=150, help="steps per run (default 150: a few seconds)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT)]
    from arch_zoo.provenance import cpu_model

    results = []
    with tempfile.TemporaryDirectory() as scratch:
        spec = write_spec(Path(scratch), args.steps)
        for workers in args.workers:
            results.append(measure(spec, workers, Path(scratch)))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {cpu_model()} ({os.cpu_count()} logical CPUs), load average {load:.2f} at the end")
    print(f"sweep: 12 runs of {args.steps} steps (d_model 32, 2 layers, char LM), fresh process per row\n")
    print(f"{'workers':>7}  {'total s':>8}  {'training s':>10}  {'mean run s':>10}  {'(a) machinery':>13}  "
          f"{'(b) gap max s':>13}  {'total outside':>13}")
    for r in results:
        print(f"{r['workers']:>7}  {r['total_s']:>8.1f}  {r['training_s']:>10.1f}  {r['mean_run_s']:>10.2f}  "
              f"{r['machinery']:>13.2%}  {r['gap_max_s']:>13.3f}  {r['outside']:>13.1%}")
    for r in results:
        parts = ", ".join(f"{k} {v:.2f}s" for k, v in r["parts_s"].items())
        print(f"  {r['workers']} worker(s), outside training: {parts}")
    if len(results) >= 2:
        a, b = results[0], results[1]
        print(f"ratio total time {b['workers']} workers / {a['workers']}: {b['total_s'] / a['total_s']:.2f}x "
              f"(speed-up {a['total_s'] / b['total_s']:.2f}x); mean run time {b['mean_run_s'] / a['mean_run_s']:.2f}x")
    ok = all(r["machinery"] <= 0.02 and r["gap_max_s"] <= 0.3 for r in results)
    print("summary: " + "; ".join(f"{r['workers']} worker(s): (a) {r['machinery']:.2%} of worker time outside "
                                  f"training (target <= 2%), (b) {r['gap_max_s']:.3f} s at most between runs (target "
                                  f"<= 0.3 s); total {r['outside']:.1%} outside training, start-up included"
                                  for r in results) + f"; targets {'met' if ok else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
