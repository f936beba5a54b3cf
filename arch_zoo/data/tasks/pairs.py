"""Tasks whose data are (source, target) text pairs scored by exact match: copy, reverse, sort, SCAN.

One layout per model kind, shared by all of them:

* ``encoder_decoder`` (objective ``seq2seq``): input_ids = source, decoder_input_ids = [bos] + target,
  labels = target + [eos].
* ``decoder`` (objective ``lm``): input_ids = [bos] + source + [sep] + target + [eos]; labels are the
  same ids with bos, source and sep set to -100, so the loss falls on the answer (and its eos) only.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Type

from ...config.kinds import KINDS
from ..tokenizers import BOS, EOS, SEP, Tokenizer
from .base import IGNORE, Example, Task, TaskData
from .common import SPLITS, check_fits, check_tokenizer, fit_tokenizer, parse_tokenizer, tokenizer_class

Pairs = Dict[str, List[Tuple[str, str]]]


def pair_example(src: List[int], tgt: List[int], model_kind: str) -> Example:
    if KINDS[model_kind].cross_attention:  # the source through the encoder, the target through the decoder
        return Example(list(src), tgt + [EOS], decoder_input_ids=[BOS] + tgt, prompt_ids=list(src), target_ids=tgt)
    if KINDS[model_kind].decoder_only:
        prompt = [BOS] + src + [SEP]
        return Example(prompt + tgt + [EOS], [IGNORE] * len(prompt) + tgt + [EOS], prompt_ids=prompt,
                       target_ids=list(tgt))
    raise ValueError(f"source->target tasks need a decoder or encoder_decoder model, not '{model_kind}'")


def tokens_needed(src_len: int, tgt_len: int, model_kind: str) -> int:
    """The longest sequence the model sees for a source/target of these token counts."""
    if KINDS[model_kind].decoder_only:
        return src_len + tgt_len + 3  # bos, sep, eos
    return max(src_len, tgt_len + 1)  # decoder side: bos + target / target + eos


class PairTask(Task):
    """Subclasses implement ``pairs`` (the texts of each split) and ``text_lengths`` (for ``check``)."""

    kinds = ("decoder", "encoder_decoder")
    length_key = "task.max_len"  # the option to point at when examples do not fit the model

    def pairs(self) -> Pairs:
        raise TypeError("abstract")

    @classmethod
    def text_lengths(cls, options, tokenizer: Type[Tokenizer]) -> Optional[Tuple[int, int]]:
        """Longest source and target in tokens, when known without fitting (None: only after building);
        ``tokenizer.count_tokens`` says how many tokens a text takes."""
        return None

    @classmethod
    def check(cls, options, model_kind: str, max_seq_len: int, key: str = "task") -> None:
        spec = check_tokenizer(options.tokenizer, key)
        lengths = cls.text_lengths(options, tokenizer_class(spec))
        if lengths is not None:
            check_fits(tokens_needed(*lengths, model_kind), max_seq_len, cls.length_key.replace("task", key, 1),
                       f"the longest {model_kind} examples")

    @classmethod
    def encode_prompt(cls, tokenizer: Tokenizer, text: str, model_kind: str) -> List[int]:
        """A decoder is given bos + source + sep, as in training; an encoder-decoder the source alone."""
        ids = tokenizer.encode(text)
        return [tokenizer.bos_id] + ids + [tokenizer.sep_id] if KINDS[model_kind].decoder_only else ids

    def tokenizer_class(self) -> Type[Tokenizer]:
        return tokenizer_class(parse_tokenizer(self.options.tokenizer))

    def build(self) -> TaskData:
        pairs = self.pairs()
        tok = fit_tokenizer(self.options.tokenizer, [text for pair in pairs["train"] for text in pair])
        splits = {name: [pair_example(tok.encode(s), tok.encode(t), self.model_kind) for s, t in pairs[name]]
                  for name in SPLITS}
        longest = max(max(len(e.input_ids), len(e.decoder_input_ids or ())) for rows in splits.values()
                      for e in rows)
        check_fits(longest, self.max_seq_len, self.length_key, f"the longest {self.model_kind} examples")
        objective = KINDS[self.model_kind].generative_objective
        info = {"sizes": {k: len(v) for k, v in splits.items()}, "tokenizer": tok.name,
                "vocab_size": tok.vocab_size, "longest_sequence": longest}
        return TaskData(tok, objective, splits, metrics=("exact_match",), info=info)
