"""The lm_eval model class for arch_zoo runs, registered in lm_eval's model registry as ``arch_zoo``.

``lm_eval.simple_evaluate(model="arch_zoo", model_args="run=RUN_DIR", ...)`` works once this module
is imported (``import arch_zoo.evaluation`` does it); lm_eval 0.4 finds no third-party models by
itself, so its own command line gets them through ``python -m arch_zoo.evaluation``, which is
lm_eval's CLI with this class registered. Text becomes tokens with the run's own tokenizer;
loglikelihoods come from ``scoring`` (batched, each context run once into a key/value cache) and
generations from ``arch_zoo.generation.generate`` (cached decoding). A decoder run is lm_eval's
``causal`` backend; an encoder-decoder run its ``seq2seq`` backend (the context is the source, the
decoder starts from the tokenizer's begin token, as training and ``arch-zoo generate`` start it)."""
from __future__ import annotations

import logging
from typing import List, Optional, Sequence, Tuple, Union

import torch
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text

from ..errors import ConfigError
from ..generation import generate
from ..generation.prompts import learned_positions
from ..models.transformer import DecoderModel, EncoderDecoderModel
from ..trained.restore import Restored, restore
from .encoding import Encoding
from .scoring import loglikelihoods, seq2seq_loglikelihoods

MODEL_NAME = "arch_zoo"
DEFAULT_MAX_GEN_TOKS = 256
BACKENDS = {"decoder": "causal", "encoder_decoder": "seq2seq"}  # model kind -> lm_eval's backend name


def check_scorable(kind: str, where: str) -> None:
    """Loglikelihoods need a model that predicts tokens; say so before anything loads or runs."""
    if kind not in BACKENDS:
        raise ConfigError("run", f"{where} is a model of kind '{kind}', which cannot score loglikelihoods or "
                          "generate for lm_eval; evaluation needs a 'decoder' (causal language model) or "
                          "'encoder_decoder' run")


def _device(name: Optional[str]) -> torch.device:
    """lm_eval's command line asks for 'cuda' by default; without CUDA that means the CPU, as for its
    ``hf`` model (``arch-zoo eval --device`` is checked before it gets here)."""
    if name is None or (str(name).startswith("cuda") and not torch.cuda.is_available()):
        if name is not None:
            logging.getLogger(__name__).warning("device %s asked for, but torch sees no CUDA device: using the CPU",
                                                name)
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _positive(key: str, value) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(key, f"expected a positive integer, got {value!r}") from None
    if number < 1:
        raise ConfigError(key, f"expected a positive integer, got {number}")
    return number


@register_model(MODEL_NAME)
class ArchZooLM(TemplateLM):
    """``run``: a run directory or one of its checkpoints (what ``restore`` takes); ``max_length``:
    the most tokens the model reads at once (default the model's ``max_seq_len``); ``batch_size``:
    sequences per forward pass; ``device``: where the model runs (default CUDA when present). For an
    encoder-decoder, ``max_length`` bounds the source and the target each, as for lm_eval's seq2seq.
    ``add_bos_token`` and ``prefix_token_id``: as for lm_eval's ``hf`` model; the defaults follow
    ``hf`` for a run imported from Hugging Face and the run's training for one trained here
    (``encoding``)."""

    backend = "causal"  # per instance: "seq2seq" for an encoder-decoder run

    def __init__(self, run: Optional[str] = None, batch_size=16, device: Optional[str] = None,
                 max_length=None, max_gen_toks=DEFAULT_MAX_GEN_TOKS, restored: Optional[Restored] = None,
                 max_batch_size=None, add_bos_token=None, prefix_token_id=None, **unused):
        super().__init__()
        if restored is None:
            if not run:
                raise ConfigError("model_args", "arch_zoo needs run=RUN_DIR (a run directory or checkpoint)")
            restored = restore(run)
        cfg, model, tokenizer = restored
        check_scorable(cfg.model.kind, str(run or "the run"))
        self.backend = BACKENDS[cfg.model.kind]
        self.config, self.tokenizer_ = cfg, tokenizer
        self.encoding = Encoding(tokenizer, add_bos_token, prefix_token_id)
        self._device = _device(device)
        self.model: Union[DecoderModel, EncoderDecoderModel] = model.to(self._device).eval()
        self.batch_size = 16 if str(batch_size).startswith("auto") else _positive("batch_size", batch_size)
        self.max_length = _positive("max_length", max_length if max_length is not None else cfg.model.max_seq_len)
        table = learned_positions(self.model.decoder)
        if table is not None and self.max_length > table:
            raise ConfigError("max_length", f"{self.max_length} is more than the model's learned position table "
                              f"({table} positions)")
        self.max_gen_toks = _positive("max_gen_toks", max_gen_toks)

    # ---------------------------------------------------------------- tokens
    @property
    def eot_token_id(self) -> int:
        return self.tokenizer_.eos_id

    @property
    def prefix_token_id(self) -> int:
        return self.encoding.prefix_token_id

    @property
    def tokenizer_name(self) -> str:
        return f"arch_zoo:{self.tokenizer_.name}"

    def tok_encode(self, string: str, add_special_tokens=None, **kwargs) -> List[int]:
        return self.encoding.encode(string, add_special_tokens)

    def tok_decode(self, tokens) -> str:
        return self.tokenizer_.decode(list(tokens))

    # ---------------------------------------------------------------- requests
    @property
    def seq2seq(self) -> bool:
        return self.backend == "seq2seq"

    def _score(self, pairs: Sequence[Tuple[Sequence[int], Sequence[int]]]) -> List[Tuple[float, bool]]:
        if self.seq2seq:
            return seq2seq_loglikelihoods(self.model, pairs, self.max_length, self.batch_size, self.tokenizer_.pad_id,
                                          self.encoding.decoder_start_id)
        return loglikelihoods(self.model, pairs, self.max_length, self.batch_size, self.tokenizer_.pad_id)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> List[Tuple[float, bool]]:
        scored = self._score([(ctx, cont) for _, ctx, cont in requests])
        for (key, _, _), answer in zip(requests, scored):
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, answer)
        return scored

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> List[float]:
        windows, owner = [], []
        for i, (text,) in enumerate(req.args for req in requests):
            for ctx, cont in map(lm_utils.make_disjoint_window, lm_utils.get_rolling_token_windows(
                    token_list=self.tok_encode(text), prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length, context_len=1)):
                windows.append((ctx, cont))
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, (logp, _) in zip(owner, self._score(windows)):
            totals[i] += logp
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> List[str]:
        out: List[Optional[str]] = [None] * len(requests)
        groups = {}
        for i, req in enumerate(requests):  # one decoding setting per batch
            groups.setdefault(repr(sorted(req.args[1].items(), key=str)), []).append(i)
        eos = self.tokenizer_.decode([self.eot_token_id], skip_special=False)
        for members in groups.values():
            kwargs = normalize_gen_kwargs(requests[members[0]].args[1], self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            new_tokens = kwargs.pop("max_gen_toks")
            room = self.max_length if self.seq2seq else self.max_length - new_tokens  # the source has its own
            if room < 1:
                raise ConfigError("max_gen_toks", f"{new_tokens} new tokens leave no room for a prompt in the "
                                  f"model's {self.max_length} positions")
            sample = bool(kwargs.get("do_sample"))
            options = dict(strategy="sample", temperature=float(kwargs.get("temperature") or 1.0),
                           top_p=kwargs.get("top_p"), top_k=kwargs.get("top_k")) if sample else {}
            order = sorted(members, key=lambda i: -len(self.tok_encode(requests[i].args[0])))
            for start in range(0, len(order), self.batch_size):
                batch = order[start:start + self.batch_size]
                prompts = [self.tok_encode(requests[i].args[0])[-room:] or [self.prefix_token_id] for i in batch]
                start_token = self.encoding.decoder_start_id if self.seq2seq else None
                result = generate(self.model, prompts, max_new_tokens=new_tokens, eos_token_id=self.eot_token_id,
                                  pad_token_id=self.tokenizer_.pad_id, decoder_start_token_id=start_token,
                                  tokenizer_size=self.tokenizer_.vocab_size,
                                  **{k: v for k, v in options.items() if v is not None})
                for i, tokens in zip(batch, result.to_lists()):
                    text = postprocess_generated_text(self.tok_decode(tokens[0]), until, None)
                    out[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
        return out
