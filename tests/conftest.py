import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def tiny(**changes):
    """A tiny model config mapping; tests override what they vary."""
    cfg = {"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "max_seq_len": 32}
    cfg.update(changes)
    return cfg


@pytest.fixture
def seed():
    torch.manual_seed(0)
    return 0
