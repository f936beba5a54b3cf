"""``generate``: checks the arguments once, then runs a decoding loop over a ``Stepper``."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

import torch
from torch import Tensor

from ..errors import ConfigError, choice_error
from ..models.transformer import DecoderModel, EncoderDecoderModel
from .compiled import CompiledStepper, check_compilable
from .prompts import Prompts, as_batch, check_left_padded, check_positions
from .sampling import Sampler, greedy
from .search import beam_search, token_by_token
from .stepper import Stepper

STRATEGIES = ("beam", "greedy", "sample")
DEFAULT_BEAMS = 4


@dataclass
class GenerationOutput:
    """Generated tokens only (the prompt is not repeated), N hypotheses per prompt (N = n_best, else 1)."""

    tokens: Tensor  # (B, N, T) int64, pad_token_id after each hypothesis ends
    lengths: Tensor  # (B, N) tokens generated, the EOS included
    log_probs: Tensor  # (B, N) sum of the model's log-probabilities of those tokens (temperature 1, unfiltered)
    scores: Tensor  # (B, N) what the strategy ranked by: beam divides log_probs by length ** length_penalty
    logits: Optional[Tensor] = None  # (B, T, V) raw logits at each step, with return_logits (not for beam)

    @property
    def best(self) -> Tensor:
        """(B, T): the first hypothesis of each prompt."""
        return self.tokens[:, 0]

    def to_lists(self) -> List[List[List[int]]]:
        """Per prompt, per hypothesis: the token ids, cut at their length."""
        return [[row[:n] for row, n in zip(hyps, lens)]
                for hyps, lens in zip(self.tokens.tolist(), self.lengths.tolist())]


def _positive(key: str, value, minimum=1) -> None:
    if value < minimum:
        raise ConfigError(key, f"must be >= {minimum}, got {value}")


def _check_options(strategy, temperature, top_k, top_p, beams, n_best, max_new_tokens, return_logits) -> None:
    if strategy not in STRATEGIES:
        raise choice_error("strategy", "strategy", strategy, STRATEGIES)
    _positive("max_new_tokens", max_new_tokens)
    given = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    for key, value in given.items():
        if value is not None and strategy != "sample":
            raise ConfigError(key, f"only applies to strategy 'sample', not '{strategy}'")
    if temperature is not None and not temperature > 0:
        raise ConfigError("temperature", f"must be > 0, got {temperature} (strategy 'greedy' is the limit at 0)")
    if top_k is not None:
        _positive("top_k", top_k)
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ConfigError("top_p", f"must be in (0, 1], got {top_p}")
    if strategy != "beam" and (beams is not None or n_best != 1):
        key = "beams" if beams is not None else "n_best"
        raise ConfigError(key, f"only applies to strategy 'beam', not '{strategy}'")
    if beams is not None:
        _positive("beams", beams)
    _positive("n_best", n_best)
    width = DEFAULT_BEAMS if beams is None else beams
    if strategy == "beam" and return_logits:
        raise ConfigError("return_logits", "only applies to strategies 'greedy' and 'sample'")
    if strategy == "beam" and n_best > width:
        raise ConfigError("n_best", f"cannot exceed beams ({width}), got {n_best}")


def _check_model(model, tokenizer_size: Optional[int]) -> None:
    if not isinstance(model, (DecoderModel, EncoderDecoderModel)):
        kind = getattr(getattr(model, "config", None), "kind", type(model).__name__)
        raise ConfigError("model", f"generation needs a 'decoder' or 'encoder_decoder' model, got '{kind}'")
    if tokenizer_size is not None:
        _positive("tokenizer_size", tokenizer_size)
        if tokenizer_size > model.vocab_size:
            raise ConfigError("tokenizer_size", f"{tokenizer_size} is more than the model's {model.vocab_size} "
                              f"vocabulary rows")


def _compile_mode(model, device, compile: bool, compile_mode: Optional[str], static_cache_length: Optional[int],
                  use_cache: bool) -> Optional[str]:
    """The compiled step's torch.compile mode (default "reduce-overhead" on CUDA); refuses the
    compile options without compile=True."""
    if compile:
        check_compilable(model, device, use_cache)
        return compile_mode if compile_mode is not None else ("reduce-overhead" if device.type == "cuda" else None)
    if compile_mode is not None or static_cache_length is not None:
        raise ConfigError("compile_mode" if compile_mode is not None else "static_cache_length",
                          "only applies with compile=True")
    return None


def _batch(model, prompts: Prompts, attention_mask: Optional[Tensor], pad: int, device, max_new_tokens: int):
    """(ids, mask) of the prompts, checked: left-padded for a decoder, positions the model has."""
    ids, mask = as_batch(prompts, attention_mask, pad, device)
    encoder_decoder = isinstance(model, EncoderDecoderModel)
    if not encoder_decoder:
        check_left_padded(mask)
    check_positions(model, mask, max_new_tokens, encoder_decoder)
    return ids, mask


def last_document(model, mask: Tensor, document_ids: Tensor) -> Tensor:
    """``mask`` with every token before each row's last document start masked out: left padding, which no
    mixer reads across, and positions count from that start."""
    if isinstance(model, EncoderDecoderModel):
        raise ConfigError("document_ids", "only goes with a decoder's prompts (an encoder-decoder decodes one target)")
    if document_ids.shape != mask.shape:
        raise ConfigError("document_ids", f"shape {tuple(document_ids.shape)} does not match prompts {tuple(mask.shape)}")
    document_ids = document_ids.to(mask.device)
    return mask * (document_ids == document_ids[:, -1:]).to(mask.dtype)


@contextmanager
def _eval_mode(model):
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _decode(stepper, strategy: str, max_new_tokens: int, eos: Optional[Tensor], pad: int, *, beams, length_penalty,
            n_best, temperature, top_k, top_p, generator, return_logits: bool, tokenizer_size):
    """The strategy's loop over ``stepper``: its result and the per-step logits (return_logits only)."""
    if strategy == "beam":
        width = DEFAULT_BEAMS if beams is None else beams
        return beam_search(stepper, width, max_new_tokens, eos, pad, length_penalty, n_best, tokenizer_size), None
    pick = greedy if strategy == "greedy" else Sampler(temperature or 1.0, top_k, top_p, generator)
    kept: Optional[List[Tensor]] = [] if return_logits else None
    result = token_by_token(stepper, pick, max_new_tokens, eos, pad, kept, tokenizer_size)
    return result, torch.stack(kept, dim=1) if kept else None


def generate(model, prompts: Prompts, attention_mask: Optional[Tensor] = None, *, strategy: str = "greedy",
             max_new_tokens: int = 32, temperature: Optional[float] = None, top_k: Optional[int] = None,
             top_p: Optional[float] = None, beams: Optional[int] = None, length_penalty: float = 1.0,
             n_best: int = 1, eos_token_id: Union[int, Sequence[int], None] = None,
             pad_token_id: Optional[int] = None, decoder_start_token_id: Optional[int] = None,
             use_cache: bool = True, seed: Optional[int] = None, generator: Optional[torch.Generator] = None,
             return_logits: bool = False, compile: bool = False, compile_mode: Optional[str] = None,
             static_cache_length: Optional[int] = None, tokenizer_size: Optional[int] = None,
             document_ids: Optional[Tensor] = None) -> GenerationOutput:
    """Continue each prompt (decoder-only) or translate each source (encoder-decoder).

    ``prompts``: a list of token-id lists (padded here), one list, or a left-padded (B, L) tensor
    with its ``attention_mask``. ``strategy``: 'greedy', 'sample' (``temperature``, ``top_k``,
    ``top_p``, alone or combined, applied in that order) or 'beam' (``beams``, default 4,
    ``length_penalty``, ``n_best``). A hypothesis stops at any of ``eos_token_id`` (kept in the
    output) or after ``max_new_tokens``. Sampling is seeded by ``seed`` or ``generator``.
    ``decoder_start_token_id`` (default ``pad_token_id``, as in T5) begins encoder-decoder output.
    ``use_cache=False`` re-runs the whole sequence each step (the reference the cache must equal).
    ``compile=True`` decodes every token after the prompt through one step compiled for this (batch,
    cache length) over a static cache (generation/compiled.py; a CUDA graph on GPU, ``compile_mode``
    default "reduce-overhead" there); the tokens are the eager cached path's. ``static_cache_length``
    fixes its columns (default: prompt + new tokens, rounded up to a multiple of 64).
    ``document_ids`` (B, L, aligned with a prompts tensor): the documents a packed prompt holds; decoding
    continues the last one alone and never reads across its start (the tokens before it count as padding).
    ``tokenizer_size``: no id at or past it is generated, for a model with more embedding rows than
    its tokenizer has tokens (an imported t5-small, Pythia or Qwen checkpoint: give
    ``tokenizer.vocab_size``); the model still scores every row, and ``logits`` hold them all.
    The model runs in eval mode; its training flag is restored afterwards."""
    _check_options(strategy, temperature, top_k, top_p, beams, n_best, max_new_tokens, return_logits)
    _check_model(model, tokenizer_size)
    pad = model.config.pad_token_id if pad_token_id is None else pad_token_id
    start = pad if decoder_start_token_id is None else decoder_start_token_id
    device = next(model.parameters()).device
    mode = _compile_mode(model, device, compile, compile_mode, static_cache_length, use_cache)
    ids, mask = _batch(model, prompts, attention_mask, pad, device, max_new_tokens)
    if document_ids is not None:
        mask = last_document(model, mask, document_ids)
    eos = None
    if eos_token_id is not None:
        eos = torch.tensor([eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id), device=device)
    if seed is not None and generator is None:
        generator = torch.Generator(device=device).manual_seed(seed)
    with _eval_mode(model), torch.inference_mode():  # cheaper per op than no_grad, at one token a step
        stepper = (CompiledStepper(model, ids, mask, max_new_tokens, pad, start, static_cache_length, mode)
                   if compile else Stepper(model, ids, mask, max_new_tokens, use_cache, pad, start))
        result, logits = _decode(stepper, strategy, max_new_tokens, eos, pad, beams=beams,
                                 length_penalty=length_penalty, n_best=n_best, temperature=temperature, top_k=top_k,
                                 top_p=top_p, generator=generator, return_logits=return_logits,
                                 tokenizer_size=tokenizer_size)
    # Clones made outside inference mode are ordinary tensors: callers may edit them or use them in autograd.
    return GenerationOutput(*(t.clone() for t in result), logits=None if logits is None else logits.clone())
