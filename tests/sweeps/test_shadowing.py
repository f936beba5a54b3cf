"""An `arch_zoo/` folder in the directory a sweep starts from (a clone, an old or partial copy) is
what local workers import on Pythons whose forkserver ignores the parent's path (before 3.12.8 and
3.13.1): the parent says so in one line before anything is written; from the clone that is running,
nothing is said."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from arch_zoo.errors import ConfigError
from arch_zoo.sweeps.shadowing import RUNNING, check_worker_imports, forkserver_takes_parent_path, shadowing_copy
from tests.sweeps.conftest import BASE, write_spec

ROOT = Path(__file__).resolve().parents[2]
OLD = (3, 11, 7)  # a forkserver that starts with the current directory first


def _copy(where: Path, init: bool = True) -> Path:
    (where / "arch_zoo").mkdir(parents=True)
    if init:
        (where / "arch_zoo" / "__init__.py").write_text("# an old, partial copy\n")
    return where / "arch_zoo"


def test_a_copy_in_the_current_directory_is_one_line_naming_it(tmp_path):
    copy = _copy(tmp_path)
    with pytest.raises(ConfigError) as err:
        check_worker_imports("forkserver", tmp_path, OLD)
    message = str(err.value)
    assert message.startswith(f"{copy} shadows the arch_zoo this command runs ({RUNNING})") and "\n" not in message
    assert f"pip install -e {tmp_path}" in message


@pytest.mark.parametrize("method,version", [("spawn", OLD), ("forkserver", (3, 12, 8)), ("forkserver", (3, 13, 1)),
                                            ("forkserver", (3, 14, 0))])
def test_workers_that_take_this_processs_path_import_what_it_imports(tmp_path, method, version):
    _copy(tmp_path)
    check_worker_imports(method, tmp_path, version)


@pytest.mark.parametrize("version,fixed", [((3, 10, 14), False), ((3, 11, 9), False), ((3, 12, 7), False),
                                           ((3, 12, 8), True), ((3, 13, 0), False), ((3, 13, 1), True)])
def test_the_pythons_whose_forkserver_takes_the_parents_path(version, fixed):
    assert forkserver_takes_parent_path(version) is fixed


def test_the_clone_that_is_running_and_a_directory_without_a_copy_say_nothing(tmp_path):
    check_worker_imports("forkserver", RUNNING.parent, OLD)  # a user's own clone, installed editable
    check_worker_imports("forkserver", tmp_path, OLD)


def test_a_folder_without_init_shadows_only_where_no_later_entry_holds_the_package(tmp_path):
    """A namespace folder loses to a regular package later on the path (a plain install, PYTHONPATH), and
    wins where the package is found by the installer's own finder, after the path (an editable install)."""
    copy = _copy(tmp_path, init=False)
    assert shadowing_copy(tmp_path, [str(RUNNING.parent)]) is None
    assert shadowing_copy(tmp_path, []) == copy


def test_a_sweep_started_beside_a_copy_runs_or_says_so_in_one_line(tmp_path):
    """The real failure: the console script (its own directory first on its path, not the current one)
    started in a directory holding a partial copy. Where the workers would import the copy, exit 2 with
    one line and nothing written; where they take the parent's path, the sweep trains."""
    here = tmp_path / "project"
    _copy(here)
    spec = write_spec(here, {"name": "s", "seeds": [0]},
                      {**BASE, "train": {**BASE["train"], "max_steps": 2, "val_every": 2, "log_every": 1}})
    script = tmp_path / "bin" / "arch-zoo"
    script.parent.mkdir()
    script.write_text("from arch_zoo.cli import run\nrun()\n")
    proc = subprocess.run([sys.executable, str(script), "sweep", spec.name, "--out", "out"], cwd=here,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if forkserver_takes_parent_path():
        assert proc.returncode == 0, proc.stderr[-3000:]
        return
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert f"{here / 'arch_zoo'} shadows the arch_zoo this command runs ({RUNNING})" in proc.stderr
    assert "Traceback" not in proc.stderr and not (here / "out").exists()

