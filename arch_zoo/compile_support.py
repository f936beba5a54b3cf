"""What torch.compile needs on this machine, said before compiling, and where inductor keeps its code.
A leaf module (torch alone), so training and decoding share it."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
from typing import Optional

import torch

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def compiler_missing(cuda: bool) -> Optional[str]:
    """Why torch.compile cannot run here (None when it can): inductor writes Triton on CUDA and C++ on
    CPU, so a missing toolchain is the user's to fix, said once rather than as a traceback from deep
    inside the first compiled call."""
    if not hasattr(torch, "compile") or not torch._dynamo.is_dynamo_supported():
        return f"torch.compile is not supported on this Python/torch ({torch.__version__})"
    if cuda and importlib.util.find_spec("triton") is None:
        return "torch.compile on CUDA needs triton, which is not installed (pip install triton)"
    if not cuda:
        cxx = os.environ.get("CXX") or "g++"
        if shutil.which(cxx) is None:
            return f"torch.compile on CPU needs a C++ compiler; '{cxx}' is not on PATH (install g++ or set $CXX)"
    return None


def cpu_vec_isa() -> str:
    """The vector ISA inductor writes CPU code for ('avx512', 'avx2', ...; 'default': scalar code):
    ATEN_CPU_CAPABILITY picks it, else the best the CPU has; ATen's own capability where inductor
    cannot say."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        isa = str(pick_vec_isa())
    except Exception:  # noqa: BLE001 - a private module: its absence must not stop a run
        isa = ""
    if not isa or isa == "INVALID_VEC_ISA":
        isa = torch.backends.cpu.get_cpu_capability() if not isa else "default"
    return re.sub(r"[^a-z0-9_]+", "_", isa.lower())


def inductor_cache_dir() -> str:
    """Point inductor's on-disk cache at a subdirectory per CPU vector ISA (of $TORCHINDUCTOR_CACHE_DIR
    if set, else of inductor's default) and return it. Inductor's cache keys leave the ISA out, so
    code compiled under one capability was reused under another: AVX-512 code run under
    ATEN_CPU_CAPABILITY=avx2 trained to NaN, AVX2 code under `default` failed to build. Nodes of a
    mixed cluster sharing one cache directory meet the same. Idempotent, so a second compiled run in
    the process (or a child process) keeps the directory."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    sub = f"cpu-{cpu_vec_isa()}"
    base = os.path.abspath(os.environ.get(CACHE_ENV) or default_cache_dir())
    path = base if os.path.basename(base) == sub else os.path.join(base, sub)
    os.environ[CACHE_ENV] = path
    return path
