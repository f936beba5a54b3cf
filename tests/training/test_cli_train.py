"""`arch-zoo train` from the command line: bad input exits 2 with one line and writes nothing."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import as_from_a_shell
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
        "too few rows": ({"model": {**MODEL, "vocab_size": 10}}, "model.vocab_size: is 10, fewer than the "),
    }


@pytest.mark.parametrize("case", ["missing file", "empty corpus", "unknown task", "unknown tokenizer",
                                  "kind mismatch", "head mismatch", "bad train key", "too few rows"])
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
    assert main(["train", str(write(tmp_path)), "--out", str(out), "--quiet", "model.position=alibi"]) == 2
    err = capsys.readouterr().err  # a component's name before the options only one of the two has
    assert "different config (model.position.name: 'sinusoidal' there, 'alibi' here)" in err, err
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
    assert (summary["strategy"], summary["devices"], summary["num_nodes"]) == ("DDPStrategy", 2, 1)
    crowded = "starts 2 CPU processes on 1 core" in proc.stderr
    assert crowded == ((os.cpu_count() or 1) < 2), proc.stderr[-2000:]


def test_more_cpu_processes_than_cores_is_a_warning(monkeypatch):
    from arch_zoo.config import TrainConfig
    from arch_zoo.training.accel import oversubscribed

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert oversubscribed(TrainConfig(accelerator="cpu", devices=2)) is None
    assert oversubscribed(TrainConfig(accelerator="cpu", devices=8)) == (
        "train.devices=8 starts 8 CPU processes on 2 cores: they share them, so the run is slower than on one "
        "device, not faster")
    assert oversubscribed(TrainConfig(accelerator="cpu", devices=[0, 1, 2])).startswith("train.devices=3 starts 3")


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
                          (["--prompt", "a", "--strategy", "sample", "--top-p", "1.5"], "--top-p: must be in (0, 1]"),
                          (["--prompt", "a", "--strategy", "beam", "--beams", "0"], "--beams: must be >= 1")):
        capsys.readouterr()
        code = main(["generate", str(out), *argv])
        err = capsys.readouterr().err
        assert code == 2 and message in err, err
    assert main(["generate", str(tmp_path), "--prompt", "a"]) == 2
    assert "is not a run directory" in capsys.readouterr().err


def arch_zoo_cmd() -> list:
    exe = Path(sys.executable).with_name("arch-zoo")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "arch_zoo"]


def test_train_exit_codes_diverged_is_1_and_stays_1_when_rerun(tmp_path, capsys):
    """README (train exit codes): 0 completed, 1 failed or diverged, 2 user mistake, 130 interrupted."""
    out = tmp_path / "run"
    argv = ["train", str(write(tmp_path)), "--out", str(out), "--quiet", "train.lr=1e6", "train.grad_clip=null",
            "model.position=rope"]  # (rope: the default sinusoidal beside N(0, 0.02) embeddings gets its own warning)
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "status: diverged" in captured.out
    err = captured.err.splitlines()
    assert len(err) == 1 and err[0].startswith("arch-zoo: run diverged: non-finite training loss at step"), err
    assert main(argv) == 1  # the finished (diverged) run is not trained again, and still reports failure
    assert "already finished" in capsys.readouterr().out


def test_train_interrupted_exits_130_with_one_line_saying_how_to_resume(tmp_path):
    """README (train exit codes): Ctrl-C exits 130 and says that rerunning the command resumes."""
    import signal
    import time

    out = tmp_path / "run"
    path = write(tmp_path, train={**TRAIN, "max_steps": 100000, "val_every": 5})
    proc = subprocess.Popen(arch_zoo_cmd() + ["train", str(path), "--out", str(out), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_shell)
    try:
        deadline = time.time() + 300
        while not (out / "checkpoints" / "last.ckpt").exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("arch-zoo: run interrupted by SIGINT (checkpoint at step ") and f"in {out})" in last
    assert last.endswith(f"resume with: arch-zoo train {path} --out {out} --quiet")
    assert json.loads((out / "status.json").read_text())["status"] == "interrupted"


WATCH_TORCH_IMPORT = """
import os, sys
seen = []
sys.addaudithook(lambda event, args: event == "import" and args[0] == "torch" and not seen
                 and seen.append(os.environ.get("OMP_WAIT_POLICY")))
from arch_zoo.cli import main
code = main(sys.argv[1:])
print("OMP_WAIT_POLICY when torch loaded:", seen)
sys.exit(code)
"""


def test_quiet_train_with_offline_wandb_prints_only_its_summary_and_the_sync_line(tmp_path):
    """Issue: every `train --quiet` printed Lightning's LeafSpec deprecation warning and wandb ~25
    lines. Now stderr is empty and stdout is the run summary with one `wandb sync` command.
    Issue: `arch-zoo train` left OpenMP's threads spinning (sweep workers sleep): beside another
    process, training ran ~10x slower. libgomp reads the policy when torch loads it, so the value that
    counts is the one the process holds when it first imports torch (an audit hook records it)."""
    out = tmp_path / "run"
    path = write(tmp_path, logging={"wandb": {"enabled": True, "mode": "offline"}})
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    # (rope: the default sinusoidal table beside N(0, 0.02) embeddings is rightly warned about)
    proc = subprocess.run([sys.executable, "-c", WATCH_TORCH_IMPORT, "train", str(path), "--out", str(out), "--quiet",
                           "model.position=rope"], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == ""
    assert not [line for line in proc.stdout.splitlines() if line.startswith("wandb:")], proc.stdout
    sync = [line for line in proc.stdout.splitlines() if "wandb sync " in line]
    assert len(sync) == 1 and (out / "wandb").is_dir()
    assert Path(sync[0].split("wandb sync ", 1)[1]).is_dir()  # the command names the offline run to upload
    assert "OMP_WAIT_POLICY when torch loaded: ['PASSIVE']" in proc.stdout, proc.stdout[-2000:]


def test_generate_warns_in_one_line_about_unknown_characters_and_ignored_options(tmp_path, capsys):
    """Issue: generate mapped characters outside the vocabulary to <unk> silently and ignored
    --temperature with greedy silently. Each now warns in one line and still generates."""
    out = tmp_path / "run"
    assert main(["train", str(write(tmp_path)), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["generate", str(out), "--prompt", "def €x€ü", "--max-new-tokens", "2"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["arch-zoo: warning: --prompt: '€', 'ü' not in the run's vocabulary; encoded as the unknown token"]
    assert main(["generate", str(out), "--prompt", "def", "--max-new-tokens", "2", "--temperature", "0.7"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "arch-zoo: warning: --temperature has no effect with --strategy greedy"]
    assert main(["generate", str(out), "--prompt", "def", "--max-new-tokens", "2", "--strategy", "beam",
                 "--beams", "2", "--top-k", "5", "--seed", "3"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "arch-zoo: warning: --top-k, --seed have no effect with --strategy beam"]
    assert main(["generate", str(out), "--prompt", "def", "--max-new-tokens", "2", "--strategy", "sample",
                 "--temperature", "0.7", "--seed", "1"]) == 0
    assert capsys.readouterr().err == ""  # options the strategy uses: no warning
