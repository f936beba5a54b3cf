"""`arch-zoo train` from the command line: bad input exits 2 with one line and writes nothing."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from arch_zoo.cli import main

MODEL = {"kind": "decoder", "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "max_seq_len": 32}
TRAIN = {"max_steps": 10, "batch_size": 4, "val_every": 5, "val_batches": 2, "progress_bar": False}


def write(tmp_path, **changes):
    data = {"name": "cli", "model": dict(MODEL), "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
            "train": dict(TRAIN)}
    data.update(changes)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def bad_inputs(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    return {
        "missing file": ({"task": {"name": "char_lm", "files": [str(tmp_path / "nope.txt")]}},
                         "task.files[0]: file not found"),
        "empty corpus": ({"task": {"name": "char_lm", "files": [str(empty)]}}, "task.files: "),
        "unknown task": ({"task": {"name": "char_llm"}}, "task: unknown task 'char_llm' (did you mean 'char_lm'?)"),
        "unknown tokenizer": ({"task": {"name": "char_lm", "tokenizer": "wordpiece"}},
                              "task.tokenizer: unknown tokenizer 'wordpiece'"),
        "kind mismatch": ({"task": {"name": "dyck"}}, "task: task 'dyck' does not fit model.kind 'decoder'"),
        "head mismatch": ({"model": {**MODEL, "kind": "encoder"}, "task": {"name": "dyck", "max_len": 16, "n_train": 100, "n_val": 20, "n_test": 20}},
                          "model.head: task 'dyck' trains with objective 'classification'"),
        "bad train key": ({"train": {**TRAIN, "max_step": 3}}, "train.max_step: unknown key (did you mean 'max_steps'?)"),
    }


@pytest.mark.parametrize("case", ["missing file", "empty corpus", "unknown task", "unknown tokenizer",
                                  "kind mismatch", "head mismatch", "bad train key"])
def test_bad_input_exits_2_with_one_line_and_no_run_dir(case, tmp_path, capsys):
    changes, message = bad_inputs(tmp_path)[case]
    out = tmp_path / "run"
    assert main(["train", str(write(tmp_path, **changes)), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_a_run_dir_of_another_config_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", str(write(tmp_path)), "--out", str(out), "--quiet"]) == 0
    assert main(["train", str(write(tmp_path)), "--out", str(out), "--quiet", "model.d_model=64"]) == 2
    assert "holds a run of a different config (model.d_model: 32 there, 64 here)" in capsys.readouterr().err
    assert main(["train", str(write(tmp_path)), "--out", str(out), "--quiet"]) == 0  # same config: no-op
    assert "already finished" in capsys.readouterr().out


def test_ddp_on_two_cpu_processes(tmp_path):
    path = write(tmp_path, train={**TRAIN, "accelerator": "cpu", "devices": 2, "strategy": "ddp"})
    exe = Path(sys.executable).with_name("arch-zoo")
    out = tmp_path / "ddp"
    proc = subprocess.run([str(exe), "train", str(path), "--out", str(out), "--quiet"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("status: completed") == 1  # rank 0 reports once
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["step"] == 10


def test_generate_from_a_trained_run_and_its_bad_input(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", str(write(tmp_path)), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["generate", str(out), "--prompt", "def ", "--max-new-tokens", "5"]) == 0
    assert len(capsys.readouterr().out.rstrip("\n")) >= 1
    ckpt = str(out / "checkpoints" / "last.ckpt")
    assert main(["generate", ckpt, "--prompt", "def ", "--strategy", "beam", "--beams", "2"]) == 0
    assert main(["generate", ckpt, "--prompt", "x", "--strategy", "sample", "--seed", "1", "--top-k", "3"]) == 0
    for argv, message in ((["--prompt", ""], "--prompt: is empty"),
                          (["--prompt", "a", "--strategy", "nucleus"], "unknown strategy 'nucleus'"),
                          (["--prompt", "a", "--strategy", "sample", "--top-p", "1.5"], "top_p: must be in (0, 1]"),
                          (["--prompt", "a", "--strategy", "beam", "--beams", "0"], "beams: must be >= 1")):
        capsys.readouterr()
        code = main(["generate", str(out), *argv])
        err = capsys.readouterr().err
        assert code == 2 and message in err, err
    assert main(["generate", str(tmp_path), "--prompt", "a"]) == 2
    assert "is not a run directory" in capsys.readouterr().err
