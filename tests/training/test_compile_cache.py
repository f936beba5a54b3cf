"""Compiled code is cached apart per CPU vector ISA. Inductor's cache keys leave out the ISA it compiles
for (ATEN_CPU_CAPABILITY picks it), so on one machine a compiled run under `avx2` after a native AVX-512
one reused AVX-512 code and trained to NaN, and one under `default` after an AVX2 run failed to build
(BackendCompilerFailed: 'at::vec' has not been declared). A run points $TORCHINDUCTOR_CACHE_DIR (or
inductor's default) at a cpu-<isa> subdirectory and records it in summary.json as compile_cache_dir."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arch_zoo.training.accel import inductor_cache_dir

ROOT = Path(__file__).resolve().parents[2]


def _in_subprocess(code: str, cache: Path, capability=None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_each_cpu_capability_compiles_into_its_own_cache_directory(tmp_path, monkeypatch):
    """The directory inductor itself then uses (its cache_dir()), under the user's $TORCHINDUCTOR_CACHE_DIR;
    asking twice (a second compiled run in the process) keeps it. Compared against a capability other
    than this process's own: `default`, or where this process has `default` (ATEN_CPU_CAPABILITY=default,
    a CPU without a vector ISA) the machine's best, so it holds on any CPU."""
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    native = inductor_cache_dir()
    assert Path(native).parent == tmp_path and Path(native).name.startswith("cpu-")
    assert inductor_cache_dir() == native == cache_dir()
    other = None if Path(native).name == "cpu-default" else "default"  # None: ATEN_CPU_CAPABILITY unset
    plain = _in_subprocess("from arch_zoo.training.accel import inductor_cache_dir as d; "
                           "from torch._inductor.runtime.cache_dir_utils import cache_dir; "
                           "assert d() == cache_dir(); print(d())", tmp_path, other)
    assert Path(plain).parent == tmp_path and (other is None or Path(plain).name == "cpu-default"), plain
    # two directories where the machine compiles two kinds of code; with no vector ISA, one kind and one directory
    assert (plain != native) == bool(valid_vec_isa_list()), (plain, native)


MODEL_RUN = """
import torch
from arch_zoo.training.accel import Compiled
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.LayerNorm(64))
x = torch.randn(8, 64)
print(float((Compiled(model, None)(x) - model(x)).abs().max()))
"""


@pytest.mark.slow
def test_a_compiled_model_after_one_of_another_capability_equals_eager(tmp_path):
    """The failure itself, on any x86 machine: compile natively, then under ATEN_CPU_CAPABILITY=default
    with the same cache directory (what `make test-cpus` does after `make test`). Without the
    per-ISA directory the second build fails (after AVX-512 code, avx2 gave NaN). ~30 CPU-s."""
    for capability in (None, "default"):
        assert float(_in_subprocess(MODEL_RUN, tmp_path, capability)) < 1e-5
    assert {p.name for p in tmp_path.iterdir()} >= {"cpu-default"}
