"""Plugins: components from outside the package, named in a config or installed as entry points.

docs/how-to/own-component.md, "A worked example": the docs' worked example is run here exactly as
written (its code blocks are extracted into files), through arch_zoo.testing, describe, train, a
2-worker local sweep (worker processes import the plugin again), report and generate from a fresh
process in another directory (the run dir alone re-imports it); a plugin that fails registers
nothing. ``test_plugin_components.py`` adds the other families from outside the package.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from arch_zoo import testing
from arch_zoo.cli import main
from arch_zoo.experiment import all_registries

ROOT = Path(__file__).resolve().parents[1]
TINY = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=32", "model.max_seq_len=32",
        "task.max_chars=20000", "task.seq_len=32", "train.max_steps=2", "train.batch_size=4", "train.val_every=2",
        "train.val_batches=1", "train.progress_bar=false", "train.exact_match_samples=0"]


def readme_files(directory: Path) -> dict:
    """The worked example's code blocks (docs/how-to/own-component.md), written to ``directory``
    under the file names their first lines give (``# my_positions.py``); the shell block is
    returned as ``commands``."""
    text = (ROOT / "docs" / "how-to" / "own-component.md").read_text()
    section = text[text.index("## A worked example"):]
    section = section[:section.index("\n## ", 1)]
    files = {}
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", section, re.S):
        if lang == "bash":
            files["commands"] = body.strip()
            continue
        name = body.splitlines()[0].lstrip("# ").split()[0]
        (directory / name).write_text(body)
        files[name] = directory / name
    return files


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    directory = tmp_path_factory.mktemp("readme_plugin")
    return directory, readme_files(directory)


def test_the_readme_example_is_what_runs(example):
    directory, files = example
    assert set(files) == {"my_positions.py", "test_my_positions.py", "experiment.yaml", "sweep.yaml", "commands"}
    assert files["commands"] == ("pytest test_my_positions.py && arch-zoo sweep sweep.yaml --workers 2 && "
                                 "arch-zoo report runs/sweeps/kerple_vs_alibi")


def test_readme_example_tested_with_arch_zoo_testing(example):
    """Docs: the plugin's own test, `check_component("positions", "kerple_log")`, runs every
    invariant of the package's grid on it; and the same check fails on a broken scheme."""
    import importlib.util

    directory, files = example
    spec = importlib.util.spec_from_file_location("test_my_positions", files["test_my_positions.py"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its load_plugins() registers kerple_log in this process
    entry = all_registries()["positions"].get("kerple_log")
    assert entry.source == str(files["my_positions.py"].resolve())
    module.test_kerple_log_keeps_every_invariant()
    ran = testing.check_component("positions", "kerple_log", kinds=["decoder"])
    assert {"causal_leak [decoder]", "cache_parity [decoder]", "kernels_agree [decoder]", "trains [decoder]",
            "padding_invariance [decoder]", "padding_invariance (left) [decoder]"} == set(ran)
    # the helper can fail: a scheme whose embedding mixes in the whole sequence sees the future
    (directory / "leaky.py").write_text(LEAKY)
    from arch_zoo.config.plugins import load_plugins

    load_plugins([directory / "leaky.py"])
    leak = r"causal mask leaks the future \(position=\{'name': 'leaky'\}, kind=decoder"
    with pytest.raises(AssertionError, match=leak):
        testing.check_component("positions", "leaky", kinds=["decoder"])


LEAKY = """
from arch_zoo.components.positions import POSITIONS, PositionScheme
from arch_zoo.registry import NoOptions


@POSITIONS.register("leaky", NoOptions, "adds the whole sequence's mean to every token")
class Leaky(PositionScheme):
    def __init__(self, options, ctx):
        super().__init__()

    def embed(self, x, pos):
        return x + x.mean(dim=1, keepdim=True)
"""


def test_readme_example_describe_train_sweep_report_generate(example, tmp_path, capsys, monkeypatch):
    """Docs: the plugin "works in `describe`, `train`, `sweep` (local ... workers import it),
    `generate` and `report`"; "each run records every plugin's `module`, file `path` and `sha256`";
    "a run directory alone imports the plugin again"."""
    import hashlib

    directory, files = example
    plugin = str(files["my_positions.py"].resolve())
    monkeypatch.chdir(tmp_path)  # the config names the plugin relative to itself, not to here
    assert main(["components", str(files["experiment.yaml"])]) == 0
    assert re.search(r"\n  kerple_log +learned log-distance .*\[init=1.0\]  \(plugin: " + re.escape(plugin),
                     capsys.readouterr().out)
    assert main(["describe", str(files["experiment.yaml"]), *TINY, "--vocab-size", "50"]) == 0
    assert "kerple_log(init=1.0)" in capsys.readouterr().out
    assert main(["describe", str(files["experiment.yaml"]), "model.position.int=2"]) == 2
    assert "model.position.int: unknown option for position scheme 'kerple_log' (did you mean 'init'?)" \
        in capsys.readouterr().err

    run = tmp_path / "run"
    assert main(["train", str(files["experiment.yaml"]), "--out", str(run), "--quiet", *TINY]) == 0
    summary = json.loads((run / "summary.json").read_text())
    digest = hashlib.sha256(files["my_positions.py"].read_bytes()).hexdigest()
    record = {"plugin": plugin, "path": plugin, "sha256": digest}
    assert {k: summary["plugins"][0][k] for k in record} == record
    assert summary["plugins"][0]["module"].startswith("arch_zoo_plugin_my_positions")
    assert json.loads((run / "status.json").read_text())["plugins"] == summary["plugins"]
    assert yaml.safe_load((run / "config.yaml").read_text())["plugins"] == [plugin]

    out = tmp_path / "sweeps"
    assert main(["sweep", str(files["sweep.yaml"]), "--workers", "2", "--out", str(out), *TINY]) == 0
    capsys.readouterr()
    runs = sorted((out / "kerple_vs_alibi" / "runs").iterdir())
    assert len(runs) == 4
    pids = set()
    for r in runs:
        status = json.loads((r / "status.json").read_text())
        assert status["status"] == "completed", status
        pids.add(status["pid"])
        assert json.loads((r / "summary.json").read_text())["plugins"][0]["sha256"] == record["sha256"]
    assert os.getpid() not in pids and len(pids) == 2  # trained in the two worker processes
    assert main(["report", str(out / "kerple_vs_alibi"), "--out", str(tmp_path / "report"), "--format", "md"]) == 0
    assert "position=kerple_log" in (tmp_path / "report" / "report.md").read_text()

    elsewhere = tmp_path / "elsewhere"  # a fresh process, another directory: only the run dir to go on
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "arch_zoo", "generate", str(run), "--prompt", "def ",
                           "--max-new-tokens", "3"], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert list(elsewhere.iterdir()) == []

    source = files["my_positions.py"].read_text()  # the plugin edited since: generate says so, in one line
    try:
        files["my_positions.py"].write_text(source + "# edited\n")
        proc = subprocess.run([sys.executable, "-m", "arch_zoo", "generate", str(run), "--prompt", "def ",
                               "--max-new-tokens", "3"], cwd=elsewhere, env=env, capture_output=True, text=True,
                              timeout=300)
    finally:
        files["my_positions.py"].write_text(source)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(f"arch-zoo: warning: plugin {plugin} changed since the run was trained (sha256 "
                                  f"{record['sha256'][:12]} then, "), proc.stderr


@pytest.fixture(autouse=True)
def isolated_registries():
    """What a test's plugins register is gone afterwards: other tests see the built-ins only."""
    from arch_zoo.config import plugins

    saved = {family: dict(reg._entries) for family, reg in all_registries().items()}
    loaded = dict(plugins._loaded)
    yield
    for family, reg in all_registries().items():
        reg._entries.clear()
        reg._entries.update(saved[family])
    plugins._loaded.clear()
    plugins._loaded.update(loaded)


def test_a_plugin_that_fails_registers_nothing(tmp_path):
    """Docs: a plugin that fails to import "is one line naming the plugin and exit 2, and
    registers nothing": a second attempt fails the same way, not on a half-registered name."""
    from arch_zoo.errors import ConfigError
    from arch_zoo.config.plugins import load_plugins

    (tmp_path / "half.py").write_text("from arch_zoo.components.norms import NORMS, RMSNorm\n"
                                      "NORMS.register('half_done')(RMSNorm)\n"
                                      "raise RuntimeError('no GPU here')\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"half.py: cannot import: RuntimeError: no GPU here$"):
            load_plugins([tmp_path / "half.py"])
        assert "half_done" not in all_registries()["norms"].choices()
    assert not (tmp_path / "__pycache__").exists()


def forget_plugins(before) -> None:
    """This process as a fresh one sees it: the registries and loaded plugins as they were ``before``."""
    from arch_zoo.config import plugins

    saved, loaded = before
    for family, reg in all_registries().items():
        reg._entries.clear()
        reg._entries.update(saved[family])
    plugins._loaded.clear()
    plugins._loaded.update(loaded)


def test_a_run_keeps_a_copy_of_its_plugin_and_generate_uses_it_once_the_original_moved(tmp_path, capsys):
    """Issue 26 §3: a run copies each plugin file it used into its run dir, named by the sha256 its
    records give; `generate` (restore) falls back to the copy, saying so in one line, when the
    original has moved; with neither, it is one line and exit 2."""
    import hashlib

    from arch_zoo.config import plugins

    source = ("from arch_zoo.components.norms import NORMS, RMSNorm, RMSNormOptions\n"
              "NORMS.register('kept_rms', RMSNormOptions, 'RMSNorm by another name')(\n"
              "    type('KeptRMS', (RMSNorm,), {}))\n")
    plugin = tmp_path / "lab" / "kept_norm.py"
    plugin.parent.mkdir()
    plugin.write_text(source)
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({"name": "kept", "plugins": ["lab/kept_norm.py"],
                                                       "model": {"kind": "decoder", "norm": "kept_rms"},
                                                       "task": {"name": "char_lm"}}))
    before = ({family: dict(reg._entries) for family, reg in all_registries().items()}, dict(plugins._loaded))
    run = tmp_path / "run"
    assert main(["train", str(tmp_path / "exp.yaml"), "--out", str(run), "--quiet", *TINY]) == 0
    digest = hashlib.sha256(source.encode()).hexdigest()
    copy = run / "plugins" / f"{digest[:16]}-kept_norm.py"
    assert json.loads((run / "status.json").read_text())["plugins"][0]["sha256"] == digest
    assert [p.name for p in (run / "plugins").iterdir()] == [copy.name] and copy.read_text() == source

    capsys.readouterr()
    assert main(["generate", str(run), "--prompt", "def ", "--max-new-tokens", "4"]) == 0
    expected = capsys.readouterr().out

    plugin.rename(tmp_path / "kept_norm.py")  # the original moved: a fresh process finds only the copy
    forget_plugins(before)
    assert main(["generate", str(run), "--prompt", "def ", "--max-new-tokens", "4"]) == 0
    out, err = capsys.readouterr()
    assert out == expected
    assert err == (f"arch-zoo: warning: plugin {plugin} is not where the run imported it: using the copy the run "
                   f"kept, {copy}\n")

    copy.unlink()  # nor a copy: a user mistake, one line
    forget_plugins(before)
    assert main(["generate", str(run), "--prompt", "def ", "--max-new-tokens", "4"]) == 2
    assert capsys.readouterr().err == f"arch-zoo: error: plugins: {plugin}: file not found\n"
