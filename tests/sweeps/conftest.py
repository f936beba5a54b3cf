"""Tiny sweeps: a 1-layer d_model-16 char LM on 20k characters, a few steps per run."""
import sys
from pathlib import Path

import pytest
import yaml

BASE = {
    "name": "tiny", "seed": 0,
    "model": {"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "max_seq_len": 32,
              "position": "rope"},
    "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
    "train": {"max_steps": 10, "batch_size": 8, "val_every": 10, "val_batches": 2, "progress_bar": False,
              "log_every": 5, "exact_match_samples": 0},
}


def write_spec(directory: Path, spec: dict, base: dict = None, name: str = "spec.yaml") -> Path:
    """A base config and a sweep spec next to it (the spec names the base by a relative path)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "base.yaml").write_text(yaml.safe_dump(base or BASE))
    path = directory / name
    path.write_text(yaml.safe_dump({"base": "base.yaml", **spec}, sort_keys=False))
    return path


def cli(*args) -> list:
    """The `arch-zoo` command as a fresh interpreter (for tests that kill it or run two at once)."""
    return [sys.executable, "-m", "arch_zoo", *map(str, args)]


@pytest.fixture
def spec_dir(tmp_path):
    return tmp_path / "specs"
