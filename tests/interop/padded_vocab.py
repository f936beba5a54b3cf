"""Tiny random Hugging Face checkpoints whose embedding has more rows than their tokenizer has tokens,
each padded by its family's published rule (nothing downloaded):

- T5 (t5-small: 32,128 rows): a SentencePiece-style unigram vocabulary, then 100 ``<extra_id_N>``
  tokens appended (``<extra_id_0>`` last), the sum rounded up to a multiple of 128.
- GPT-NeoX / Pythia (50,304 rows for ~50,277 tokens): Megatron's ``make_vocab_size_divisible_by``
  128, over a byte-level BPE whose ids 0 and 1 are ``<|endoftext|>`` and ``<|padding|>``.
- Qwen3 (151,936 rows for 151,669 tokens): 208 control tokens reserved past the regular BPE tokens
  and the total rounded up to a multiple of 128; the tokenizer holds only the control tokens it names.

The output rows the tokenizer cannot decode are scaled up (``BOOST``) so that they, not a real
token, hold the largest logits: decoding that does not keep to the tokenizer emits them at once."""
from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import torch

from tests.evaluation.helpers import TEXT
from tests.interop.references import randomize

BOOST = 30.0
MULTIPLE = 128
QWEN_CONTROL = 208
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                 "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                 "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
                 "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                 "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
FAMILIES = ("t5", "gpt_neox", "qwen3")


class Padded(NamedTuple):
    dir: Path
    tokens: int  # what the tokenizer holds
    rows: int  # what the embedding holds
    eos: int
    pad: int


def round_up(n: int, multiple: int = MULTIPLE) -> int:
    return math.ceil(n / multiple) * multiple


def _byte_bpe(vocab_size: int, specials):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def _t5_tokenizer():
    """SentencePiece's form as T5 has it (a unigram model over "▁"-marked pieces, </s> appended to every
    text), its pieces the corpus's characters, character pairs and words, then T5's 100 extra ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for text in TEXT for w in text.split()})
    chars = sorted({c for w in words for c in w})
    pairs = sorted({w[i:i + 2] for w in words for i in range(len(w) - 1)})
    pieces = ["▁"] + chars + ["▁" + c for c in chars] + pairs + ["▁" + w for w in words]
    tok = Tokenizer(models.Unigram([("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [(p, -2.0) for p in pieces],
                                   unk_id=2))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    extra = [f"<extra_id_{i}>" for i in reversed(range(100))]  # T5's order: <extra_id_0> is the last id
    tok.add_special_tokens(["<pad>", "</s>", "<unk>"] + extra)
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", eos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
                                   additional_special_tokens=extra[::-1])


def _neox_tokenizer():
    from transformers import PreTrainedTokenizerFast

    tok = _byte_bpe(300, ["<|endoftext|>", "<|padding|>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>", pad_token="<|padding|>")


def _qwen_tokenizer():
    from transformers import PreTrainedTokenizerFast

    tok = _byte_bpe(280, [])
    tok.add_special_tokens(QWEN_SPECIALS)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def _model(family: str, rows: int, eos: int, pad: int):
    import transformers as tf

    if family == "t5":  # t5-small's layout (T5 1.0: ReLU, tied embeddings) at a tiny size
        return tf.T5ForConditionalGeneration(tf.T5Config(
            vocab_size=rows, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
            relative_attention_max_distance=16, dropout_rate=0.0, pad_token_id=pad, eos_token_id=eos,
            decoder_start_token_id=pad))
    if family == "gpt_neox":  # Pythia's: partial rotary, parallel residual, an untied output projection
        return tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(
            vocab_size=rows, hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64, rotary_pct=0.25, bos_token_id=eos, eos_token_id=eos))
    return tf.Qwen3ForCausalLM(tf.Qwen3Config(  # Qwen3-0.6B's layout: tied embeddings, QK-norm, GQA
        vocab_size=rows, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=eos))


def padded_checkpoint(family: str, directory: Path, seed: int = 0) -> Padded:
    """``family``'s checkpoint directory (config.json, model.safetensors, tokenizer files), its
    embedding padded past the tokenizer by the family's rule."""
    fast = {"t5": _t5_tokenizer, "gpt_neox": _neox_tokenizer, "qwen3": _qwen_tokenizer}[family]()
    tokens = len(fast)
    if family == "qwen3":
        rows = round_up(tokens - len(QWEN_SPECIALS) + QWEN_CONTROL)
    else:
        rows = round_up(tokens)
    eos, pad = fast.eos_token_id, fast.pad_token_id
    torch.manual_seed(seed)
    model = randomize(_model(family, rows, eos, pad), seed).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight[tokens:] *= BOOST
    model.save_pretrained(directory)
    fast.save_pretrained(directory)
    return Padded(Path(directory), tokens, rows, eos, pad)
