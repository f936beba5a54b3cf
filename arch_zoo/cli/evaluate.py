"""`arch-zoo eval`: lm-evaluation-harness tasks on a run or on a sweep's completed runs."""
from __future__ import annotations

import argparse
import importlib.util
import sys

from ..errors import ConfigError
from .common import positive_int, warn


def _limit(text: str) -> float:
    """lm_eval's --limit: N examples per task, or a fraction of them below 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of examples (or a fraction below 1), got {text!r}") \
            from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return int(value) if value >= 1 and value == int(value) else value


def _print(run_dir, records) -> None:
    for record in records:
        for name, value in record["metrics"].items():
            err = record["stderr"].get(name)
            print(f"{run_dir}  {record['task']}  {name}  {value:.4f}" + (f" ± {err:.4f}" if err is not None else ""))


def _check_device(name: str) -> None:
    import torch

    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError("--device", f"{name!r} is not a torch device ({exc})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device", f"{name} asked for, but torch sees no CUDA device (this torch: "
                          f"{torch.__version__}); use --device cpu")


def _eval(args) -> int:
    if importlib.util.find_spec("lm_eval") is None:
        raise ConfigError("eval", "lm-evaluation-harness is not installed; install it with: "
                          "pip install 'arch-zoo[eval]'")
    from ..evaluation import evaluate_runs

    if args.device:
        _check_device(args.device)

    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    model_args = {k: v for k, v in (("batch_size", args.batch_size), ("device", args.device),
                                    ("max_length", args.max_length)) if v is not None}
    found = evaluate_runs(args.run, names, limit=args.limit, include_path=args.include_path,
                          builtin_tasks=not args.no_builtin_tasks, num_fewshot=args.num_fewshot,
                          model_args=model_args, on_result=_print)
    if found.skipped:
        warn(f"skipped {len(found.skipped)} run(s) not completed: "
             + ", ".join(f"{run} ({status})" for run, status in found.skipped.items()))
    print(f"results in {len(found.runs)} run dir(s): eval/<task>.json", file=sys.stderr)
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a run (or a sweep's completed runs) on lm-evaluation-harness tasks",
                       description="Runs lm_eval tasks through arch_zoo's lm_eval model class (the run's own "
                       "tokenizer, batched, with the KV cache) and writes each task's results into the run "
                       "directory as eval/<task>.json; report and compare read them as eval/<task>/<metric>.")
    p.add_argument("run", metavar="RUN_OR_SWEEP", help="a run directory, or a sweep's store (its completed runs)")
    p.add_argument("--tasks", required=True, help="lm_eval task names, comma-separated")
    p.add_argument("--limit", type=_limit, default=None, help="at most N examples per task (a fraction if below 1)")
    p.add_argument("--include-path", default=None, help="a directory of lm_eval task YAML files (as lm_eval's "
                   "--include_path); its tasks are found without indexing lm_eval's built-in ones")
    p.add_argument("--no-builtin-tasks", action="store_true", help="look tasks up under --include-path only")
    p.add_argument("--num-fewshot", type=int, default=None, help="few-shot examples (default: each task's own)")
    p.add_argument("--batch-size", type=positive_int, default=None, help="sequences per forward pass (default 16)")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--max-length", type=positive_int, default=None,
                   help="most tokens the model reads at once (default: the model's max_seq_len)")
    p.set_defaults(func=_eval)
