"""``train.init_from``: a run that starts from another run's weights (Hugging Face's
``from_pretrained``, not Lightning's ``ckpt_path``): the source's tensors at step 0, strictly checked,
optimizer, step and schedule fresh; the run records its source; a rerun resumes from its own
checkpoint; a sweep's ``overrides`` start every variant from the same weights."""
import json
import shutil

import pytest
import torch
import yaml

from arch_zoo import restore
from arch_zoo.cli import main
from arch_zoo.experiment import load
from arch_zoo.training import run_one
from tests.sweeps.conftest import BASE, write_spec


def _cfg(**train):
    return load({**BASE, "train": {**BASE["train"], "max_steps": 3, "val_every": 3, "log_every": 1, **train}})


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A tiny run trained 3 steps: weights no fresh initialisation has."""
    out = tmp_path_factory.mktemp("source") / "run"
    assert run_one(_cfg(lr=1e-2), out, quiet=True).status == "completed"
    return out


TINY_LR = 1e-30  # (lr must be positive) steps far below a float32 weight's last bit: the weights stay put


def _weights(run):
    return restore(run).model.state_dict()


def _same(a, b):
    return set(a) == set(b) and all(torch.allclose(a[k], b[k], rtol=0, atol=1e-20) for k in a)


def test_the_run_starts_from_the_source_s_weights_at_a_fresh_step_and_records_it(source, tmp_path):
    out = tmp_path / "tuned"
    result = run_one(_cfg(init_from=str(source), lr=TINY_LR, max_steps=1, val_every=1), out, quiet=True)
    assert result.status == "completed" and result.summary["step"] == 1  # a new run: its own steps
    assert _same(_weights(out), _weights(source))  # what it started from is what it kept
    fresh = tmp_path / "fresh"
    run_one(_cfg(lr=TINY_LR, max_steps=1, val_every=1), fresh, quiet=True)
    assert not _same(_weights(fresh), _weights(source))
    first = json.loads((source / "summary.json").read_text())["final"]["val/loss"]
    assert result.summary["final"]["val/loss"] == pytest.approx(first, abs=1e-5)  # the same data, the same weights
    record = result.summary["init_from"]
    assert record == {"path": str((source / "checkpoints" / "last.ckpt").resolve()), "run": str(source.resolve()),
                      "step": 3}
    assert json.loads((out / "status.json").read_text())["init_from"] == record
    assert main(["describe", str(out)]) == 0


def test_describe_and_the_train_summary_name_the_source(source, tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, "train": {**BASE["train"], "max_steps": 1, "val_every": 1,
                                                      "init_from": str(source)}}))
    assert main(["describe", str(path)]) == 0
    assert f"  weights       from {source} (train.init_from" in capsys.readouterr().out
    assert main(["train", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    ckpt = (source / "checkpoints" / "last.ckpt").resolve()
    assert f"  started from the weights of {ckpt} (its step 3; train.init_from)\n" in capsys.readouterr().out


def test_a_rerun_resumes_from_its_own_checkpoint_not_the_source_s(source, tmp_path):
    moved = tmp_path / "source"
    shutil.copytree(source, moved)
    cfg, out = _cfg(init_from=str(moved), lr=1e-2, max_steps=2, val_every=1), tmp_path / "tuned"
    assert run_one(cfg, out, quiet=True, stop_at=1).status == "paused"
    paused = torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)
    shutil.rmtree(moved)  # the source is gone: only the run's own checkpoint can resume it
    result = run_one(cfg, out, quiet=True)
    assert result.status == "completed" and result.summary["resumed_from_step"] == 1 and result.summary["step"] == 2
    assert paused["global_step"] == 1
    assert result.summary["init_from"]["path"] == str(moved / "checkpoints" / "last.ckpt")


@pytest.mark.parametrize("case", ["shape", "missing", "no run", "not a checkpoint"])
def test_a_source_that_does_not_fit_is_one_line_and_nothing_is_written(source, tmp_path, capsys, case):
    path, out = tmp_path / "c.yaml", tmp_path / "run"
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    given = {"shape": source, "missing": tmp_path / "nowhere", "no run": tmp_path / "empty",
             "not a checkpoint": tmp_path / "notes.txt"}[case]
    model = {**BASE["model"], "d_ff": 48} if case == "shape" else BASE["model"]
    path.write_text(yaml.safe_dump({**BASE, "model": model,
                                    "train": {**BASE["train"], "max_steps": 1, "init_from": str(given)}}))
    capsys.readouterr()
    assert main(["train", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("arch-zoo: error: train.init_from: ")
    expected = {"shape": (f"tensor decoder.layers.0.ffn.sublayer.up.weight is [32, 16] in "
                          f"{(source / 'checkpoints' / 'last.ckpt').resolve()} but [48, 16] in this config's model"),
                "missing": f"{given} does not exist", "no run": f"{given} holds no run (no checkpoints/last.ckpt)",
                "not a checkpoint": f"{given} is a file but not a checkpoint (.ckpt)"}[case]
    assert expected in err
    assert not out.exists()


def test_a_sweep_s_overrides_start_every_variant_from_the_same_weights(source, tmp_path, capsys):
    from arch_zoo.sweeps import load_spec, make_plan

    spec = {"name": "ft", "grid": {"model.dropout": [0.0, 0.1]}, "seeds": [0],
            "overrides": {"train.init_from": str(source), "train.lr": TINY_LR, "train.max_steps": 1,
                          "train.val_every": 1}}
    path = write_spec(tmp_path / "specs", spec)
    assert main(["sweep", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    assert "\n2 runs;" in capsys.readouterr().out
    runs = make_plan(load_spec(path)).runs
    assert [r.config.model.dropout for r in runs] == [0.0, 0.1]
    for i, run in enumerate(runs):  # each variant's config, as the sweep's workers train it
        result = run_one(run.config, tmp_path / str(i), quiet=True)
        assert result.summary["init_from"]["run"] == str(source.resolve())
        assert _same(_weights(tmp_path / str(i)), _weights(source))


def test_a_run_of_an_earlier_version_is_a_source_under_today_s_names(tmp_path):
    """tests/fixtures/run_before_mixer_slot keeps the layers' old slot name (``self_attn``): its
    tensors load as restore loads them, through the model's renaming hook."""
    from pathlib import Path

    old = Path(__file__).resolve().parents[1] / "fixtures" / "run_before_mixer_slot"
    saved = torch.load(old / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    assert any(".self_attn." in k for k in saved)
    cfg = load(old / "config.yaml", [f"train.init_from={old}", f"train.lr={TINY_LR}", "train.max_steps=1",
                                     "train.val_every=1", "train.progress_bar=false"])
    assert run_one(cfg, tmp_path / "tuned", quiet=True).status == "completed"
    assert _same(_weights(tmp_path / "tuned"), _weights(old))
