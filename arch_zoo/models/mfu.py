"""Model FLOPs utilisation (MFU): achieved training FLOP/s over the device's peak for the run's precision.

Achieved FLOP/s = 3 x the analytic forward FLOPs (``models.flops``; backward costs two forwards) of
the batches trained, each sequence counted at its own length, per second of training. That count is
the useful work only: causal attention counts the visible half of the keys, and neither recomputation
nor padding is counted, so arch_zoo's MFU is slightly lower than the PaLM convention (which counts
every key).

The peak comes from a table of vendor datasheet figures on CUDA, or on CPU from a GEMM probe (a few
timed square matmuls in the run's dtype) per (CPU, torch, threads, dtype), cached as JSON under the
user's cache directory. Other work on the cores slows a probe down, and a peak measured low inflates
every MFU after it, so the cache keeps the best probe ever measured and trusts it only once a probe
ran with cores to spare (the 1-minute load average at most the logical CPUs less the probe's
threads, plus one for the run that asks): until then each run probes again. Needs torch alone."""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import torch
from torch import nn

from ..provenance import cpu_model  # standard library only

T = 1e12
# Dense (no 2:4 sparsity) tensor-core peaks; matmuls accumulate in fp32, as torch's do. Sources: NVIDIA
# datasheets -- H100 and H200 (SXM, PCIe, NVL; the datasheets' "with sparsity" figures halved),
# A100 (SXM and PCIe share the table), L4, L40S, A10, V100, T4 -- and the Ada Lovelace whitepaper
# (appendix A, GeForce RTX 4090, "FP16/BF16 Tensor TFLOPS with FP32 Accumulate"). First match wins,
# so the more specific names come first. Not listed: the AWS-only A10G, for which NVIDIA publishes
# no datasheet (an unknown GPU gets no MFU rather than a guessed peak).
_HOPPER_SXM = {"bf16": 989.5 * T, "fp16": 989.5 * T, "tf32": 494.5 * T, "fp32": 67 * T}
_HOPPER_NVL = {"bf16": 835.5 * T, "fp16": 835.5 * T, "tf32": 417.5 * T, "fp32": 60 * T}
GPU_PEAKS: Tuple[Tuple[str, str, Dict[str, float]], ...] = (
    (r"\bH200 NVL\b", "H200 NVL", _HOPPER_NVL),
    (r"\bH200\b", "H200 SXM", _HOPPER_SXM),
    (r"\bGH200\b", "GH200", _HOPPER_SXM),
    (r"\bH100 NVL\b", "H100 NVL", _HOPPER_NVL),
    (r"\bH100\b.*\bPCIe\b", "H100 PCIe", {"bf16": 756.5 * T, "fp16": 756.5 * T, "tf32": 378 * T, "fp32": 51 * T}),
    (r"\bH100\b", "H100 SXM", _HOPPER_SXM),
    (r"\bA100\b", "A100", {"bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T}),
    (r"\bL40S\b", "L40S", {"bf16": 362.05 * T, "fp16": 362.05 * T, "tf32": 183 * T, "fp32": 91.6 * T}),
    (r"\bL4\b", "L4", {"bf16": 121 * T, "fp16": 121 * T, "tf32": 60 * T, "fp32": 30.3 * T}),
    (r"\bA10\b", "A10", {"bf16": 125 * T, "fp16": 125 * T, "tf32": 62.5 * T, "fp32": 31.2 * T}),
    (r"\bRTX 4090\b", "GeForce RTX 4090", {"bf16": 165.2 * T, "fp16": 165.2 * T, "tf32": 82.6 * T, "fp32": 82.6 * T}),
    (r"\bV100\b.*\bPCIE\b", "V100 PCIe", {"fp16": 112 * T, "fp32": 14 * T}),
    (r"\bV100\b", "V100 SXM2", {"fp16": 125 * T, "fp32": 15.7 * T}),
    (r"\bT4\b", "T4", {"fp16": 65 * T, "fp32": 8.1 * T}),
)

# Lightning's precision names (and plain dtype names) -> the matmul dtype they run in.
_PRECISIONS = {"bf16-mixed": "bf16", "bf16-true": "bf16", "bf16": "bf16", "16-mixed": "fp16", "16-true": "fp16",
               "16": "fp16", "fp16": "fp16", "32-true": "fp32", "32": "fp32", "fp32": "fp32", "tf32": "tf32",
               "64-true": "fp64", "64": "fp64", "fp64": "fp64"}
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}


@dataclass(frozen=True)
class Peak:
    """A device's peak FLOP/s for one precision, or None with ``source`` saying why it is unknown."""

    flops: Optional[float]
    source: str


def matmul_precision(precision: Union[str, int]) -> str:
    """'bf16' | 'fp16' | 'fp32' for a Lightning precision such as 'bf16-mixed' or '32-true'."""
    key = str(precision).lower()
    if key not in _PRECISIONS:
        raise ValueError(f"precision {precision!r}: choose one of {', '.join(sorted(_PRECISIONS))}")
    return _PRECISIONS[key]


def gpu_peak(name: str, precision: str) -> Peak:
    """Datasheet peak for a GPU named as ``torch.cuda.get_device_name()`` reports it."""
    for pattern, label, peaks in GPU_PEAKS:
        if re.search(pattern, name, re.IGNORECASE):
            if precision not in peaks:
                return Peak(None, f"{label} has no {precision} tensor-core peak in arch_zoo's table")
            return Peak(peaks[precision], f"{label} datasheet, dense {precision}")
    return Peak(None, f"unknown GPU {name!r}: not in arch_zoo's peak FLOP/s table (arch_zoo/models/mfu.py)")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "arch_zoo"


def probe_key(dtype: str) -> str:
    return f"{cpu_model()} | torch {torch.__version__} | {torch.get_num_threads()} threads | {dtype}"


def measure_gemm(dtype: str, max_size: int = 1024, repeats: int = 5) -> float:
    """Best FLOP/s of ``repeats`` timed square matmuls on CPU. The size doubles from 256 up to ``max_size``
    while one matmul takes under 20 ms, so a dtype the CPU has no fast path for (bf16 without AVX512-BF16
    or AMX runs at ~1 GFLOP/s) costs a fraction of a second rather than many."""
    g = torch.Generator().manual_seed(0)
    size = 256
    while True:
        a = torch.randn(size, size, generator=g).to(_DTYPES[dtype])
        b = torch.randn(size, size, generator=g).to(_DTYPES[dtype])
        start = time.perf_counter()
        torch.mm(a, b)  # also the untimed warmup of this size
        if size * 2 > max_size or time.perf_counter() - start > 0.02:
            break
        size *= 2
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best


def cores_to_spare(threads: int) -> bool:
    """Whether a probe on ``threads`` threads had the cores to itself: the 1-minute load average
    (which counts the run now asking, hence the + 1) leaves room for them."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average (Windows): trust the probe
        return True
    return load <= (os.cpu_count() or 1) - threads + 1


# {probe key: {"flops": best FLOP/s, "settled": whether a probe ran with cores to spare}}. Its own file:
# Earlier arch_zoo versions keep bare numbers in gemm_peak.json, which they still read; this file leaves that one alone.
PROBE_FILE = "gemm_probe.json"


def _entry(value) -> Tuple[float, bool]:
    """(best FLOP/s, settled) of a cache entry; anything else is no entry."""
    if isinstance(value, dict) and isinstance(value.get("flops"), (int, float)):
        return float(value["flops"]), bool(value.get("settled"))
    return 0.0, False


def cpu_peak(precision: str, cache_dir: Optional[Union[str, Path]] = None) -> Peak:
    """GEMM FLOP/s on this CPU: the best probe measured for this CPU, torch, thread count and dtype,
    from the cache once a probe ran with cores to spare, else probed now (and the best kept)."""
    dtype = "fp32" if precision == "tf32" else precision
    path = Path(cache_dir or default_cache_dir()) / PROBE_FILE
    key = probe_key(dtype)
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    best, settled = _entry(cached[key]) if key in cached else (0.0, False)
    if settled:
        return Peak(best, f"CPU GEMM probe ({key}), cached in {path}")
    measured = measure_gemm(dtype)
    spare = cores_to_spare(torch.get_num_threads())
    flops = max(best, measured)
    cached[key] = {"flops": flops, "settled": spare}
    try:  # a read-only home only costs a re-probe next time
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cached, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass
    how = "measured now" if spare else "measured now, on busy cores (probed again next run)"
    return Peak(flops, f"CPU GEMM probe ({key}), {how}{', best of this and earlier probes' if best else ''}")


def device_peak(device: Union[str, torch.device], precision: Union[str, int],
                cache_dir: Optional[Union[str, Path]] = None) -> Peak:
    """The peak for a Lightning precision on ``device``: fp32 on CUDA counts as TF32 when torch lets
    matmuls use it (``torch.set_float32_matmul_precision('high')``), since that is what then runs."""
    device = torch.device(device)
    try:
        prec = matmul_precision(precision)
    except ValueError as exc:  # e.g. transformer-engine: a run summary gets no MFU rather than a crash
        return Peak(None, str(exc))
    if device.type == "cuda":
        if prec == "fp32" and torch.get_float32_matmul_precision() != "highest":
            prec = "tf32"
        return gpu_peak(torch.cuda.get_device_name(device), prec)
    if device.type == "cpu":
        return cpu_peak(prec, cache_dir)
    return Peak(None, f"no peak FLOP/s known for device type {device.type!r}")


def mfu(flops_per_token_train: float, tokens_per_s: float, peak: Optional[float]) -> Optional[float]:
    """Achieved training FLOP/s over the peak (a fraction, 0.45 = 45%); None without a peak."""
    if not peak or tokens_per_s is None:
        return None
    return flops_per_token_train * tokens_per_s / peak


def train_flops_per_token(model: nn.Module, seq_len: int) -> float:
    """3 x the forward FLOPs per token at ``seq_len`` (an encoder-decoder: source and target that long)."""
    from .flops import flops_per_token

    return 3 * flops_per_token(model, seq_len)["total"]


def mfu_for_run(train_flops_per_s: Optional[float], device: Union[str, torch.device], precision: Union[str, int],
                cache_dir: Optional[Union[str, Path]] = None, n_devices: int = 1) -> Dict[str, object]:
    """``{"mfu", "peak_flops", "peak_source"}`` for a run summary, from the training FLOP/s achieved (3 x
    the forward FLOPs of the batches trained, per second); mfu and peak_flops are None (and peak_source
    says why) where the device's peak is unknown. With data parallelism over ``n_devices`` alike devices
    and the whole run's FLOP/s, the peak is theirs together."""
    peak = device_peak(device, precision, cache_dir)
    total = None if peak.flops is None else peak.flops * n_devices
    source = peak.source if n_devices == 1 else f"{n_devices} x {peak.source}"
    achieved = None if not total or train_flops_per_s is None else train_flops_per_s / total
    return {"mfu": achieved, "peak_flops": total, "peak_source": source}
