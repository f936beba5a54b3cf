"""README: "`train.devices=2 train.strategy=ddp` is tested on two CPU processes: each rank trains on
its half of every global batch, and both end with the weights one process reaches on the whole
batches" (issue 13 §4).

Two real CPU processes (gloo) train 8 steps; each records the batches it saw and its final
weights (ddp_probe.py). The ranks must have seen the two halves of each global batch, end with
equal weights, and match one process trained on the same global batches (batch_size doubled:
the step sampler cuts global batch k from the same seeded permutation for any world size), within
float tolerance. One process on one rank's half of each batch must not match: that is the
difference the test can see between two processes and one."""
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from .test_cli_train import MODEL

PROBE = Path(__file__).with_name("ddp_probe.py")
BATCH = 4
CONFIG = {"name": "ddp", "seed": 0, "model": dict(MODEL),
          "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
          "train": {"max_steps": 8, "batch_size": BATCH, "val_every": 8, "val_batches": 1, "progress_bar": False,
                    "lr": 3e-3, "accelerator": "cpu", "exact_match_samples": 0}}


def probe(config: Path, out: Path, *overrides) -> list:
    proc = subprocess.run([sys.executable, str(PROBE), str(config), str(out), *overrides], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [torch.load(p, weights_only=False) for p in sorted(out.glob("rank*.pt"))]


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def test_ddp_ranks_split_each_global_batch_and_match_one_process_on_the_same_batches(tmp_path):
    config = tmp_path / "ddp.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    ranks = probe(config, tmp_path / "ddp", "train.devices=2", "train.strategy=ddp")
    one = probe(config, tmp_path / "one", "train.devices=1", f"train.batch_size={2 * BATCH}")[0]
    half = probe(config, tmp_path / "half", "train.devices=1")[0]

    assert [r["rank"] for r in ranks] == [0, 1] and {r["world"] for r in ranks} == {2}
    assert ranks[0]["pid"] != ranks[1]["pid"]  # two processes
    assert len(ranks[0]["batches"]) == len(ranks[1]["batches"]) == len(one["batches"]) == 8
    for a, b, whole in zip(ranks[0]["batches"], ranks[1]["batches"], one["batches"]):
        assert a.shape[0] == b.shape[0] == BATCH and not torch.equal(a, b)  # different shards...
        assert torch.equal(torch.cat([a, b]), whole)  # ...that together are the one-process batch

    assert max_difference(ranks[0]["weights"], ranks[1]["weights"]) == 0.0  # DDP keeps replicas equal
    apart, alone = max_difference(ranks[0]["weights"], one["weights"]), max_difference(half["weights"], one["weights"])
    assert apart < 1e-5 and alone > 1e-3, (apart, alone)  # one rank's data alone trains another model
