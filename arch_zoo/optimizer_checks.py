"""What an optimizer recipe must do, checked for any registered one, a plugin's included
(``arch_zoo.testing.check_optimizer`` runs them all):

* ``optimizer_trains``: through the recipe's own parameter groups and a warmup-cosine schedule, a
  few steps on a tiny learnable task (each position predicts its own token) cut the loss by 25%;
* ``optimizer_resumes``: k steps, the model, optimizer and schedule state saved as a checkpoint is
  (``torch.save``, read back with ``weights_only=True``) into a fresh model, then the rest: the
  weights equal those of the same steps without the break, bit for bit;
* ``optimizer_survives_ddp``: two gloo processes on the CPU, each on its half of every batch, end
  with equal weights, those of one process on the whole batches (to float rounding), and apart
  from one process on one half.

Each raises ``AssertionError`` naming the check and the optimizer. Torch only (no Lightning).
"""
from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .config import TrainConfig, to_dict
from .experiment import all_registries
from .config.parse import from_dict
from .config.plugins import load_plugins
from .models import build_model
from .recipes import build_optimizer, build_scheduler

VOCAB = 23
MODEL = {"kind": "decoder", "d_model": 16, "n_layers": 2, "n_heads": 2, "d_ff": 32, "max_seq_len": 16}
STEPS = 8


def train_config(name: str, options: Optional[Mapping[str, Any]] = None, lr: float = 5e-2, steps: int = STEPS,
                 **changes) -> TrainConfig:
    """A TrainConfig naming optimizer ``name``: warmup then cosine, weight decay on (every group kind used)."""
    data = {"optimizer": {"name": name, **dict(options or {})}, "lr": lr, "max_steps": steps, "warmup_steps": 2,
            "schedule": "cosine", "min_lr_ratio": 0.1, "weight_decay": 0.01, **changes}
    return from_dict(TrainConfig, data, "train")


def _ids(seed: int = 0) -> torch.Tensor:
    return torch.randint(1, VOCAB, (4, 8), generator=torch.Generator().manual_seed(seed))


def _loss(model, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))


def _fresh(model_cfg: Mapping[str, Any], train: TrainConfig, seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(dict(model_cfg), VOCAB)
    optimizer = build_optimizer(model, train).optimizer
    return model, optimizer, build_scheduler(optimizer, train)


def _steps(model, optimizer, scheduler, ids: torch.Tensor, n: int, forward=None) -> float:
    loss = torch.tensor(float("nan"))
    for _ in range(n):
        loss = _loss(forward or model, ids)
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return loss.item()


def optimizer_trains(train: TrainConfig, model_cfg: Mapping[str, Any] = MODEL, reduction: float = 0.75) -> float:
    """The final / first loss ratio, asserted below ``reduction``."""
    model, optimizer, scheduler = _fresh(model_cfg, train)
    ids = _ids()
    with torch.no_grad():
        first = _loss(model, ids).item()
    last = _steps(model, optimizer, scheduler, ids, train.max_steps)
    assert last < reduction * first, (f"optimizer_trains ({train.optimizer.describe()}): {train.max_steps} steps took "
                                      f"the loss only from {first:.3f} to {last:.3f}")
    return last / first


def optimizer_resumes(train: TrainConfig, model_cfg: Mapping[str, Any] = MODEL, at: int = 3) -> None:
    ids = _ids()
    whole = _fresh(model_cfg, train)
    _steps(*whole, ids, train.max_steps)
    first = _fresh(model_cfg, train)
    _steps(*first, ids, at)
    buffer = io.BytesIO()
    torch.save({"model": first[0].state_dict(), "optimizer": first[1].state_dict(), "scheduler": first[2].state_dict()},
               buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)  # as Lightning checkpoints load
    resumed = _fresh(model_cfg, train, seed=1)  # other initial weights: everything must come from the checkpoint
    for part, state in zip(resumed, (saved["model"], saved["optimizer"], saved["scheduler"])):
        part.load_state_dict(state)
    _steps(*resumed, ids, train.max_steps - at)
    differ = [k for k, v in whole[0].state_dict().items() if not torch.equal(v, resumed[0].state_dict()[k])]
    assert not differ, (f"optimizer_resumes ({train.optimizer.describe()}): resumed at step {at}, the weights differ "
                        f"from an unbroken run's in {differ[:3]}")


def _ddp_rank(spec_path: str, rank: int) -> None:
    """One rank of ``optimizer_survives_ddp``, in its own interpreter (``python -c``: no main module
    to re-import, as multiprocessing's spawn would)."""
    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(1)
    load_plugins(spec["plugins"])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(spec["port"]))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        train = from_dict(TrainConfig, spec["train"], "train")
        model, optimizer, scheduler = _fresh(spec["model"], train)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        _steps(model, optimizer, scheduler, _ids()[rank::2], train.max_steps, forward=ddp)
        torch.save(model.state_dict(), Path(spec_path).with_name(f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


RANK_CODE = "import sys; from arch_zoo.optimizer_checks import _ddp_rank; _ddp_rank(sys.argv[1], int(sys.argv[2]))"


def _run_ranks(spec: Dict[str, Any], out: Path) -> None:
    path = out / "spec.json"
    path.write_text(json.dumps(spec))
    procs = [subprocess.Popen([sys.executable, "-c", RANK_CODE, str(path), str(rank)], stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
             for rank in range(2)]
    errors = [p.communicate(timeout=600)[1] for p in procs]
    for rank, (p, err) in enumerate(zip(procs, errors)):
        assert p.returncode == 0, f"optimizer_survives_ddp: rank {rank} failed:\n{err[-2000:]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _max_difference(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> float:
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def optimizer_survives_ddp(train: TrainConfig, model_cfg: Mapping[str, Any] = MODEL,
                           plugins: Sequence[str] = ()) -> Dict[str, float]:
    """{"apart": DDP vs one process on whole batches, "alone": one process on half batches vs whole}."""
    label = f"optimizer_survives_ddp ({train.optimizer.describe()})"
    with tempfile.TemporaryDirectory() as out:
        _run_ranks({"port": _free_port(), "model": dict(model_cfg), "train": to_dict(train), "plugins": list(plugins)},
                   Path(out))
        ranks = [torch.load(Path(out) / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert _max_difference(*ranks) == 0.0, f"{label}: the two ranks end with different weights"
    whole, half = _fresh(model_cfg, train), _fresh(model_cfg, train)
    _steps(*whole, _ids(), train.max_steps)
    _steps(*half, _ids()[0::2], train.max_steps)
    apart = _max_difference(ranks[0], whole[0].state_dict())
    alone = _max_difference(half[0].state_dict(), whole[0].state_dict())
    assert apart < alone / 10, f"{label}: two ranks end {apart:.2e} from one process on whole batches " \
                               f"(one process on half of them: {alone:.2e})"
    return {"apart": apart, "alone": alone}


def check_optimizer(name: str, options: Optional[Mapping[str, Any]] = None, lr: float = 5e-2,
                    plugins: Optional[Sequence[str]] = None, ddp: bool = True, **changes) -> List[str]:
    """Every check on optimizer ``name`` (with ``options``) at learning rate ``lr``; ``plugins`` are
    imported in the DDP processes first (default: the module or file that registered it)."""
    entry = all_registries()["optimizers"].get(name)  # an unknown name is a clear error, not an empty run
    train = train_config(name, options, lr, **changes)
    optimizer_trains(train)
    optimizer_resumes(train)
    ran = ["optimizer_trains", "optimizer_resumes"]
    if ddp:
        optimizer_survives_ddp(train, plugins=plugins if plugins is not None else [entry.source] if entry.source else [])
        ran.append("optimizer_survives_ddp")
    return ran
