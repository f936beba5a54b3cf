"""Speed settings of a run: torch.compile, TF32 matmuls and the attention kernels SDPA may pick.
Each is device-agnostic: the CUDA-only parts are used only where CUDA is, and the summary says what held."""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

import torch
from torch import nn

from ..compile_support import CACHE_ENV, compiler_missing, cpu_vec_isa, inductor_cache_dir  # noqa: F401 (re-exported)
from ..config import TrainConfig
from ..errors import ConfigError


def check_compiler(t: TrainConfig, accelerator: str) -> None:
    """A missing compiler toolchain, said once before training (compile_support.compiler_missing)."""
    if not t.compile:
        return
    cuda = accelerator in ("cuda", "gpu") or (accelerator == "auto" and torch.cuda.is_available())
    reason = compiler_missing(cuda)
    if reason is not None:
        raise ConfigError("train.compile", f"{reason}, or set train.compile=false")


CUDA_ONLY_STRATEGIES = ("fsdp", "deepspeed")  # Lightning refuses them on CPU


def _wants_cuda(accelerator: str) -> bool:
    return accelerator in ("cuda", "gpu") or (accelerator == "auto" and torch.cuda.is_available())


def _device_count(t: TrainConfig) -> Optional[int]:
    """How many devices train.devices asks for (a count or a list of ids); None for "auto"."""
    return len(t.devices) if isinstance(t.devices, (list, tuple)) else t.devices if isinstance(t.devices, int) else None


# Lightning 2.x's StrategyRegistry names, as data: asking the registry imports pytorch_lightning, seconds
# before a one-line error. tests/test_imports.py holds this to the installed Lightning's registry.
STRATEGIES = ("auto", "ddp", "ddp_find_unused_parameters_false", "ddp_find_unused_parameters_true", "ddp_fork",
              "ddp_fork_find_unused_parameters_false", "ddp_fork_find_unused_parameters_true", "ddp_notebook",
              "ddp_notebook_find_unused_parameters_false", "ddp_notebook_find_unused_parameters_true", "ddp_spawn",
              "ddp_spawn_find_unused_parameters_false", "ddp_spawn_find_unused_parameters_true", "deepspeed",
              "deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_2_offload", "deepspeed_stage_3",
              "deepspeed_stage_3_offload", "deepspeed_stage_3_offload_nvme", "fsdp", "fsdp_cpu_offload",
              "single_device", "single_tpu", "single_xla", "xla", "xla_debug")


def check_strategy(t: TrainConfig) -> None:
    """The strategy exists, the devices it asks for are there, and it runs on this accelerator: said
    in one line before training instead of Lightning's exception from inside the Trainer."""
    from ..errors import choice_error

    if t.strategy not in STRATEGIES:
        raise choice_error("train.strategy", "Lightning strategy", t.strategy, STRATEGIES)
    cuda = _wants_cuda(t.accelerator)
    if t.strategy.split("_")[0] in CUDA_ONLY_STRATEGIES and not cuda:
        raise ConfigError("train.strategy", f"{t.strategy} needs CUDA GPUs (Lightning runs it on no other "
                          f"accelerator) and this run uses the CPU: use train.strategy=ddp on CPU")
    wanted = _device_count(t)
    if t.accelerator in ("cuda", "gpu") and wanted is not None:
        present = torch.cuda.device_count()
        if wanted > present:
            raise ConfigError("train.devices", f"{wanted} GPUs asked for, {present} on this machine "
                              f"(train.devices counts GPUs per node)")


def oversubscribed(t: TrainConfig) -> Optional[str]:
    """A warning when CPU processes (train.devices on the CPU) outnumber this machine's cores."""
    wanted = _device_count(t)
    cores = os.cpu_count() or 1
    if _wants_cuda(t.accelerator) or wanted is None or wanted <= cores:
        return None
    return (f"train.devices={wanted} starts {wanted} CPU processes on {cores} core{'s' * (cores != 1)}: they share "
            "them, so the run is slower than on one device, not faster")


def check_precision(t: TrainConfig, accelerator: str) -> None:
    if t.precision.startswith("bf16") and _wants_cuda(accelerator) and not torch.cuda.is_bf16_supported():
        raise ConfigError("train.precision", f"{t.precision} needs a GPU with bfloat16 support; "
                          f"{torch.cuda.get_device_name()} has none: use 16-mixed or 32-true")


def set_matmul_precision(t: TrainConfig) -> str:
    """TF32 matmuls (Ampere and later) when CUDA is there and train.tf32 is not false; CPU matmuls are left as they are."""
    if t.tf32 and torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")
    return torch.get_float32_matmul_precision()


def sdpa_kernels(device: torch.device) -> Dict[str, Any]:
    """Which scaled_dot_product_attention kernels this device may use (SDPA picks among them per call)."""
    if device.type == "cuda":
        from torch.backends import cuda as bc

        return {"flash": bc.flash_sdp_enabled() and bc.is_flash_attention_available(),
                "mem_efficient": bc.mem_efficient_sdp_enabled(), "math": bc.math_sdp_enabled(),
                "cudnn": getattr(bc, "cudnn_sdp_enabled", lambda: False)()}
    # CPU: torch >= 2.2 has a flash-attention kernel for CPU, chosen for fp32/bf16 inputs without dropout
    flash = hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")
    return {"flash (cpu)": flash, "math (cpu)": True}


class Compiled:
    """The model's forward through torch.compile, tried as one graph first. A graph break makes
    fullgraph=True fail while tracing, before anything runs, so the call is redone without fullgraph
    and the reason kept. The compiled function is held outside the module tree, so state_dict keys,
    checkpoints and ``restore`` stay those of the eager model (no ``_orig_mod.`` prefix)."""

    def __init__(self, model: nn.Module, mode: Optional[str]):
        self.model, self.mode = model, mode
        # dynamo caches compiled frames per code object, guarded on each model instance: runs in one
        # process (sweeps, tests) would otherwise pile up past its recompile limit and fail under fullgraph
        torch._dynamo.reset()
        self.cache_dir = inductor_cache_dir()
        self.fullgraph = True
        self.fallback_reason: Optional[str] = None
        self._fn: Callable = torch.compile(model, fullgraph=True, mode=mode)

    def __call__(self, *args, **kwargs):
        try:
            return self._fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - dynamo's Unsupported and friends: anything the tracer refuses
            if not self.fullgraph or not _is_graph_break(exc):
                raise
            self.fullgraph = False
            self.fallback_reason = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
            self._fn = torch.compile(self.model, fullgraph=False, mode=self.mode)
            return self._fn(*args, **kwargs)

    def info(self) -> Dict[str, Any]:
        return {"compiled": True, "compile_mode": self.mode or "default", "compile_fullgraph": self.fullgraph,
                "compile_fallback_reason": self.fallback_reason, "compile_cache_dir": self.cache_dir}


def _is_graph_break(exc: BaseException) -> bool:
    import torch._dynamo.exc as dx

    return isinstance(exc, (dx.Unsupported, dx.UserError)) or "graph break" in str(exc).lower()


def compiled_forward(model: nn.Module, t: TrainConfig) -> Optional[Compiled]:
    return Compiled(model, t.compile_mode) if t.compile else None


def compile_info(compiled: Optional[Compiled]) -> Dict[str, Any]:
    return compiled.info() if compiled is not None else {"compiled": False, "compile_mode": None,
                                                       "compile_fullgraph": None, "compile_fallback_reason": None,
                                                       "compile_cache_dir": None}
