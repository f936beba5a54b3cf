"""A warmup longer than the run ends the run before it reaches train.lr, whatever the schedule: every
schedule says so, at ``sweep --dry-run`` and at the start of ``train`` (issue 55: cosine with
warmup_steps 500 and max_steps 40 trained an untrained model without a word; only wsd was checked)."""
import pytest
import yaml

from arch_zoo.cli import main
from arch_zoo.config import TrainConfig
from arch_zoo.config.parse import from_dict
from arch_zoo.recipes import SCHEDULES, recipe_warnings, schedule_for
from tests.conftest import tiny

BUILT_IN = [e.name for e in SCHEDULES.entries() if e.factory.__module__.startswith("arch_zoo.")]


def train(**data):
    return from_dict(TrainConfig, data, "train")


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_schedule_warns_of_a_warmup_longer_than_the_run(name):
    t = train(schedule=name, warmup_steps=500, max_steps=40)
    (line,) = recipe_warnings(t)
    last = schedule_for(t)(t.max_steps - 1)  # the multiplier the run ends at
    assert last == pytest.approx(40 / 500)
    assert line == (f"train.warmup_steps=500 is longer than the run (train.max_steps=40): it ends in its warmup, "
                    f"at {last:.0%} of train.lr, and the {name} schedule after it never runs; lower warmup_steps or "
                    "raise max_steps")
    assert not any("longer than the run" in w for w in recipe_warnings(train(schedule=name, warmup_steps=40,
                                                                              max_steps=40)))


def test_the_dry_run_and_the_training_run_say_it(tmp_path, capsys):
    base = {"name": "warm", "seed": 0, "model": tiny(),
            "task": {"name": "char_lm", "max_chars": 5000, "seq_len": 16},
            "train": {"max_steps": 2, "warmup_steps": 8, "batch_size": 2, "val_every": 2, "val_batches": 1,
                      "schedule": "cosine", "progress_bar": False, "exact_match_samples": 0}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"name": "w", "base": "exp.yaml", "seeds": [0],
                                                        "grid": {"train.schedule": ["cosine", "constant"]}}))
    capsys.readouterr()
    assert main(["sweep", str(tmp_path / "spec.yaml"), "--out", str(tmp_path / "sweeps"), "--dry-run"]) == 0
    err = capsys.readouterr().err
    for name in ("cosine", "constant"):
        assert err.count(f"at 25% of train.lr, and the {name} schedule after it never runs") == 1, err
    assert main(["train", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    assert ("arch-zoo: warning: train.warmup_steps=8 is longer than the run (train.max_steps=2): it ends in its "
            "warmup, at 25% of train.lr, and the cosine schedule") in capsys.readouterr().err
