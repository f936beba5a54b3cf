"""How much of a training run its exact-match evaluation costs: the share of the run's wall time
spent in greedy decoding (``objectives.greedy_outputs``), for each ``train.exact_match_decoding``
path and, with ``--before COMMIT``, for the code of an earlier commit (checked out into a temporary
git worktree), so a change to the evaluation path is measured on the same run before and after.

Each mode trains the same run (``--config``, default the SCAN study's experiment, simple split,
seed 0) in its own process, one after another; a wrapper times every ``greedy_outputs`` call and
the run's summary.json gives its wall time (and, on code that records it, its own
``exact_match_decoding.decode_s``, printed beside the wrapper's figure as a cross-check).

Usage: python benchmarks/eval_share.py [--config configs/experiments/scan.yaml] [--before d42430d]
                                       [--modes eager compiled] [--threads 1] [--json PATH]
                                       [-- OVERRIDE ...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE)]
import torch  # noqa: E402
from common import describe_machine, machine_info, save_json, table  # noqa: E402

# Runs in the child: time greedy_outputs, then train through the command line as a user would.
CHILD = """
import json, sys, time
import arch_zoo.training.objectives as objectives
spent, timing = {"decode_s": 0.0, "calls": 0}, sys.argv[1]
inner = objectives.greedy_outputs
def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
        return inner(*args, **kwargs)
    finally:
        spent["decode_s"] += time.perf_counter() - start
        spent["calls"] += 1
        with open(timing, "w") as f:  # after every call: the command may leave by os._exit
            json.dump(spent, f)
objectives.greedy_outputs = timed
from arch_zoo.cli import run
sys.argv = ["arch-zoo"] + sys.argv[2:]
run()
"""


def train(tree: Path, config: str, out: Path, overrides: List[str], threads: int) -> Dict[str, object]:
    timing = out.with_suffix(".timing.json")
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=str(threads), WANDB_MODE="offline")
    cmd = [sys.executable, "-c", CHILD, str(timing), "train", config, "--out", str(out), *overrides]
    subprocess.run(cmd, check=True, env=env, cwd=tree, stdout=subprocess.DEVNULL)
    summary = json.loads((out / "summary.json").read_text())
    wrapped = json.loads(timing.read_text())
    recorded = (summary.get("exact_match_decoding") or {}).get("decode_s")
    final = summary.get("final", {})
    return {"wall_s": summary["wall_time_s"], "decode_s": wrapped["decode_s"], "calls": wrapped["calls"],
            "recorded_decode_s": recorded, "share": wrapped["decode_s"] / summary["wall_time_s"],
            "used": (summary.get("exact_match_decoding") or {}).get("used", "eager (before)"),
            "compile_s": (summary.get("exact_match_decoding") or {}).get("compile_s"),
            "test_exact_match": final.get("test/exact_match"), "val_exact_match": final.get("val/exact_match")}


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/experiments/scan.yaml")
    p.add_argument("--before", help="a commit whose code is measured too (a temporary git worktree)")
    p.add_argument("--modes", nargs="+", default=["eager", "compiled"], help="train.exact_match_decoding values")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json")
    p.add_argument("overrides", nargs="*", help="dotted config overrides for every mode (after --)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)  # what machine_info reports; each run gets OMP_NUM_THREADS
    info = machine_info(torch.device("cpu"))
    print(describe_machine(info))
    results: Dict[str, Dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if a.before:
            tree = tmp / "before"
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), a.before], check=True, cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                results[f"before ({a.before})"] = train(tree, a.config, tmp / "run-before", a.overrides, a.threads)
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
        for mode in a.modes:
            results[mode] = train(ROOT, a.config, tmp / f"run-{mode}",
                                  [*a.overrides, f"train.exact_match_decoding={mode}"], a.threads)
    rows = [[name, f"{r['wall_s']:.1f}", f"{r['decode_s']:.1f}",
             "-" if r["recorded_decode_s"] is None else f"{r['recorded_decode_s']:.1f}",
             "-" if r["compile_s"] is None else f"{r['compile_s']:.1f}", f"{100 * r['share']:.1f}%",
             r["test_exact_match"]] for name, r in results.items()]
    print(table(["code / path", "run wall s", "greedy decoding s", "summary decode_s", "compile s",
                 "share of the run", "test exact match"], rows))
    if a.json:
        save_json(a.json, {"machine": info, "config": a.config, "overrides": a.overrides,
                           "results": results})


if __name__ == "__main__":
    main()
