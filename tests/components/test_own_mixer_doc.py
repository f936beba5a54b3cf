"""docs/how-to/own-mixer.md's worked plugin, as a reader runs it: its files written out, its pytest
file and `arch-zoo describe` in fresh processes (the plugin's registration stays out of this one),
and one `train` of a few steps."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_docs import DOCS, ROOT, blocks, commands

PAGE = "how-to/own-mixer.md"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    path = tmp_path_factory.mktemp("own_mixer")
    page = blocks(PAGE)
    for block in page:
        if block.file_name:
            (path / block.file_name).write_text(block.body + "\n")
    (bash,) = [b for b in page if b.lang == "bash"]
    return path, list(commands(bash.body))


def _run(argv, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *argv[1:]] if argv[0] == "pytest" else \
        [sys.executable, "-m", "arch_zoo", *argv[1:]]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_page_shows_a_plugin_its_test_a_config_and_the_commands(workspace):
    path, argvs = workspace
    assert {p.name for p in path.iterdir()} == {"my_mixer.py", "test_my_mixer.py", "experiment.yaml"}
    assert [a[:2] for a in argvs] == [["pytest", "test_my_mixer.py"], ["arch-zoo", "components"], ["arch-zoo", "describe"],
                                      ["arch-zoo", "train"]]


@pytest.mark.parametrize("source", ["--plugin", "config"])
def test_components_lists_the_plugins_mixer_from_the_flag_or_the_config(workspace, source):
    """The page's `components --plugin my_mixer.py`, and `components experiment.yaml` as it says; the page
    quotes the line as printed."""
    path, argvs = workspace
    proc = _run(argvs[1] if source == "--plugin" else ["arch-zoo", "components", "experiment.yaml"], path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    mixers = proc.stdout.split("mixers  (")[1].split("\n\n")[0]
    (line,) = [x.strip() for x in mixers.splitlines() if x.strip().startswith("gated_conv ")]
    assert line.endswith(f"[size=4]  (plugin: {path / 'my_mixer.py'})"), line
    assert "`gated_conv ... [size=4]  (plugin: /path/to/my_mixer.py)`" in (DOCS / PAGE).read_text()


def test_the_plugins_test_passes_and_describe_shows_the_hybrid(workspace):
    path, argvs = workspace
    proc = _run(argvs[0], path)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = _run(argvs[2], path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (DOCS / PAGE).read_text()
    layout = next(line.strip() for line in proc.stdout.splitlines() if "mixer=gated_conv(size=4)" in line)
    assert f"`{layout.split(':')[0]}: mixer=gated_conv(size=4)`" in text, layout  # the page quotes it as printed
    assert "decoder mixer" in proc.stdout and "decoder attention" in proc.stdout and "state bytes" in proc.stdout


def test_the_hybrid_trains(workspace, tmp_path):
    path, argvs = workspace
    argv = [a for a in argvs[3] if not a.startswith("train.max_steps")] + [
        "train.max_steps=3", "train.val_every=3", "train.val_batches=1", "train.batch_size=2",
        "train.exact_match_samples=0", "train.progress_bar=false", "task.max_chars=20000", "--out", str(tmp_path / "run")]
    proc = _run(argv, path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "summary.json").is_file()
