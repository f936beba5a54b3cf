"""The compiled decoding path: the prompt runs eagerly (its own length, once), then every further
token goes through one decode step compiled for a (batch, cache columns, source columns) shape over
a static cache (models/static_cache.py); on CUDA the step is a CUDA graph (torch.compile's
"reduce-overhead"). The eager cached path is the reference: the tokens must be the same.

Compiled steps are kept per model and shape, so a second ``generate`` of that shape (the next
evaluation, the next chunk of prompts) reuses the compiled code. Cache lengths are rounded up to
a multiple of ``COLUMN_BUCKET`` for that reason: the extra columns are masked and cost little.
"""
from __future__ import annotations

import math
import time
import types
import warnings
import weakref
from collections import OrderedDict
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from ..compile_support import compiler_missing, inductor_cache_dir
from ..errors import ConfigError
from ..models.static_cache import StaticCache
from ..models.transformer import EncoderDecoderModel
from .stepper import Stepper

COLUMN_BUCKET = 64
SOURCE_BUCKET = 16
# What compiles the step: inductor (C++ on CPU, Triton on CUDA). Tests set "eager" (dynamo's graph
# capture alone) or None (the static cache without torch.compile) to check the rest across the grid.
BACKEND: Optional[str] = "inductor"
KEPT_PER_MODEL = 8  # compiled shapes kept per model (least recently used dropped)
_STEPS: "weakref.WeakKeyDictionary[torch.nn.Module, OrderedDict]" = weakref.WeakKeyDictionary()
_COUNTER = [0]


def bucket(n: int, size: int) -> int:
    return int(math.ceil(n / size) * size)


def check_compilable(model, device: torch.device, use_cache: bool) -> None:
    """Everything that stops ``generate(compile=True)``, as one ConfigError naming it."""
    if not use_cache:
        raise ConfigError("compile", "decodes over a static key/value cache; it cannot honour use_cache=False")
    reason = compiler_missing(device.type == "cuda")
    if reason is not None:
        raise ConfigError("compile", f"{reason}; or decode eagerly (compile=False)")
    for layer in model.decoder.layers:
        reason = layer.mixer.sublayer.static_unsupported()
        if reason is not None:
            raise ConfigError("compile", f"{reason}; decode eagerly")


class CompiledStep:
    """One shape's static cache and the compiled function that feeds it one token per row."""

    def __init__(self, model, batch: int, columns: int, source_columns: Optional[int], mode: Optional[str]):
        param = next(model.parameters())
        self.model, self.mode, self.backend = model, mode, BACKEND
        self.encoder_decoder = isinstance(model, EncoderDecoderModel)
        self.cache = StaticCache(model.decoder, batch, columns, param.dtype, param.device, source_columns)
        self.memory = self.source_mask = None
        if self.encoder_decoder:  # only the shape of the memory is read: its K/V are in the cache
            self.memory = param.new_zeros(batch, source_columns, model.config.d_model)
            self.source_mask = torch.zeros(batch, source_columns, dtype=torch.long, device=param.device)
        self.cudagraphs = mode == "reduce-overhead" and param.device.type == "cuda"
        if self.cudagraphs:
            for t in self.cache.tensors() + [x for x in (self.memory, self.source_mask) if x is not None]:
                torch._dynamo.mark_static_address(t)
        self.cache_dir = inductor_cache_dir()
        self.fullgraph, self.fallback_reason, self.compile_s = True, None, None
        self._fn = self._compile(True)

    def _compile(self, fullgraph: bool):
        # dynamo keeps compiled code per code object, guarded on `self`: a code object of its own per shape
        # keeps one shape's entries from counting towards another's recompile limit
        _COUNTER[0] += 1
        code = CompiledStep._step.__code__.replace(co_name=f"_step_{_COUNTER[0]}")
        fn = types.MethodType(types.FunctionType(code, CompiledStep._step.__globals__), self)
        if self.backend is None:
            return fn
        mode = self.mode if self.backend == "inductor" else None
        return torch.compile(fn, fullgraph=fullgraph, dynamic=False, mode=mode, backend=self.backend)

    def _step(self, token: Tensor) -> Tensor:
        ids = token.unsqueeze(1)
        if self.encoder_decoder:
            out = self.model.decode(ids, self.memory, self.source_mask, cache=self.cache, logits_to_keep=1)
        else:
            out = self.model(ids, cache=self.cache, logits_to_keep=1)
        return out.logits[:, -1]

    def __call__(self, token: Tensor) -> Tensor:
        token = token.contiguous()  # beam search feeds a column of its sequences: other strides would re-trace
        if self.compile_s is None:
            return self._first(token)
        if self.cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
            return self._fn(token).clone()  # a graph's output is overwritten by its next replay
        return self._fn(token)

    def _first(self, token: Tensor) -> Tensor:
        start = time.perf_counter()
        saved = [t.clone() for t in self.cache.tensors()]  # a failed trace may have run part of the step
        try:
            with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):  # MoE's routing
                out = self._fn(token)
        except Exception as exc:  # noqa: BLE001 - dynamo's Unsupported and friends: anything the tracer refuses
            import torch._dynamo.exc as dx

            if not isinstance(exc, (dx.Unsupported, dx.UserError)) and "graph break" not in str(exc).lower():
                raise
            for t, s in zip(self.cache.tensors(), saved):
                t.copy_(s)
            self.fullgraph = False
            self.fallback_reason = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
            warnings.warn(f"compile: the decode step does not trace as one graph ({self.fallback_reason}); "
                          "compiled in pieces", stacklevel=3)
            self._fn = self._compile(False)
            out = self._fn(token)
        self.compile_s = time.perf_counter() - start
        return out.clone() if self.cudagraphs else out

    def info(self) -> Dict[str, object]:
        return {"backend": self.backend, "mode": self.mode or "default", "fullgraph": self.fullgraph, "fallback_reason": self.fallback_reason,
                "compile_s": self.compile_s, "cache_dir": self.cache_dir, "batch": self.cache.batch,
                "columns": self.cache.columns}


def compiled_step(model, batch: int, columns: int, source_columns: Optional[int], mode: Optional[str]) -> CompiledStep:
    """The model's compiled step for this shape, made on first use and kept (KEPT_PER_MODEL per model)."""
    param = next(model.parameters())
    key: Tuple = (batch, columns, source_columns, mode, BACKEND, param.dtype, param.device)
    kept = _STEPS.setdefault(model, OrderedDict())
    if key in kept:
        kept.move_to_end(key)
        return kept[key]
    while len(kept) >= KEPT_PER_MODEL:
        kept.popitem(last=False)
    kept[key] = CompiledStep(model, batch, columns, source_columns, mode)
    return kept[key]


def compiled_steps(model) -> list:
    """The compiled steps kept for ``model``, oldest first."""
    return list(_STEPS.get(model, {}).values())


def last_compiled(model) -> Optional[CompiledStep]:
    """The step the model's latest compiled ``generate`` used (what it cost to compile, whether it broke)."""
    kept = _STEPS.get(model)
    return next(reversed(kept.values())) if kept else None


class CompiledStepper(Stepper):
    """The Stepper's prefill (eager, cached), then its steps through a CompiledStep. The static cache
    is filled at the first step, after any reorder: beam search expands each prompt to its beams first."""

    def __init__(self, model, ids: Tensor, mask: Tensor, max_new_tokens: int, pad_token_id: int,
                 start_token_id: int, cache_length: Optional[int] = None, mode: Optional[str] = None):
        super().__init__(model, ids, mask, max_new_tokens, True, pad_token_id, start_token_id)
        needed = self.length + max_new_tokens - 1  # the last new token is returned, never fed back
        if cache_length is not None and cache_length < needed:
            raise ConfigError("static_cache_length", f"{cache_length} columns cannot hold a {self.length}-column "
                              f"prompt and {max_new_tokens} new tokens (needs {needed})")
        self.columns = cache_length if cache_length is not None else bucket(needed, COLUMN_BUCKET)
        self.source_columns = bucket(ids.shape[1], SOURCE_BUCKET) if self.encoder_decoder else None
        self.mode = mode
        self.static: Optional[CompiledStep] = None

    def _load(self) -> CompiledStep:
        batch = self.next_position.shape[0]
        step = compiled_step(self.model, batch, self.columns, self.source_columns, self.mode)
        prompt_mask = self.mask[:, : self.length] if self.mask is not None else None
        step.cache.load(self.cache, prompt_mask, self.next_position)
        if self.encoder_decoder:
            source = self.memory.shape[1]
            step.source_mask.zero_()
            step.source_mask[:, :source] = 1 if self.source_mask is None else self.source_mask
        self.cache = None  # from here on the static cache is the only one
        return step

    def step(self, token: Tensor) -> Tensor:
        if self.static is None:
            self.static = self._load()
        self.length += 1
        return self.static(token)

    def reorder(self, index: Tensor) -> None:
        if self.static is None:
            super().reorder(index)
        else:
            self.static.cache.reorder(index)
