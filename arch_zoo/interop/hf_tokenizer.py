"""Hugging Face tokenizer directories <-> arch_zoo tokenizers.

Import: a checkpoint's ``tokenizer.json`` becomes the run's ``pretrained`` tokenizer, and the special
tokens its ``tokenizer_config.json`` / ``special_tokens_map.json`` name (``bos_token``, ...) go with
it, so that the run's ids, and evaluation's Hugging Face rules, are the checkpoint's own."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Optional

from .checkpoint import CheckpointError

SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "mask_token", "cls_token")


def _content(value) -> Optional[str]:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def declared_special_tokens(path) -> Dict[str, Optional[str]]:
    """The special tokens a tokenizer directory names; special_tokens_map.json wins, as for transformers.
    A key the files do not set is left out; one they set to null stays None (Qwen's bos_token)."""
    found: Dict[str, Optional[str]] = {}
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        file = Path(path) / name
        if not file.is_file():
            continue
        try:
            data = json.loads(file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CheckpointError(str(file), f"not valid JSON ({str(exc).splitlines()[0]})") from None
        for key in SPECIAL_KEYS:
            if isinstance(data, dict) and key in data:
                found[key] = _content(data[key])
    return found


def hf_tokenizer(path, model_config: Optional[dict] = None):
    """The arch_zoo tokenizer of a Hugging Face checkpoint directory (its tokenizer.json). An
    encoder-decoder's ``decoder_start_token_id`` (config.json's) is kept as ``decoder_start_token``:
    Hugging Face starts the decoder with it (T5: the pad token), arch_zoo by default with BOS."""
    from ..data.pretrained import PretrainedOptions, PretrainedTokenizer

    path = Path(path).expanduser()
    if not (path / "tokenizer.json").is_file():
        raise CheckpointError(str(path), "has no tokenizer.json (a fast tokenizer's file); only those are read")
    tokenizer = PretrainedTokenizer(PretrainedOptions(path=str(path)), declared=declared_special_tokens(path))
    start = (model_config or {}).get("decoder_start_token_id")
    if (model_config or {}).get("is_encoder_decoder") and isinstance(start, int):
        tokenizer.declared["decoder_start_token"] = tokenizer.decode([start], skip_special=False)
    return tokenizer


# --------------------------------------------------------------------------- export

def _byte_symbols() -> Dict[int, str]:
    """GPT-2's byte -> printable character table, as the ByteLevel pre-tokenizer writes bytes."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _vocabulary(tokenizer, split):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {s: i for i, s in enumerate(tokenizer.symbols)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=tokenizer.symbols[tokenizer.unk_id]))
    if split == "char":  # every character its own piece, newlines included; pieces fused back on decode
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        tok.decoder = decoders.Fuse()
    else:  # words: whitespace dropped, joined by one space on decode (as the word tokenizer decodes)
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def _char(tokenizer):
    return _vocabulary(tokenizer, "char")


def _word(tokenizer):
    return _vocabulary(tokenizer, "word")


def _byte(tokenizer):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from ..data.tokenizers import SPECIALS

    vocab = {s: i for i, s in enumerate(SPECIALS)}
    vocab.update({symbol: b + len(SPECIALS) for b, symbol in _byte_symbols().items()})
    tok = Tokenizer(models.BPE(vocab, [], unk_token=SPECIALS[tokenizer.unk_id]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _serialized(tokenizer):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(tokenizer._tok.to_str())


def _builders():
    from ..data.pretrained import PretrainedTokenizer
    from ..data.tokenizers import BPETokenizer, ByteTokenizer, CharTokenizer, WordTokenizer

    return {CharTokenizer: _char, WordTokenizer: _word, ByteTokenizer: _byte, BPETokenizer: _serialized,
            PretrainedTokenizer: _serialized}


def hf_tokenizer_object(tokenizer):
    """The ``tokenizers`` form of an arch_zoo tokenizer: the same ids for the same text."""
    builder = next((b for cls, b in _builders().items() if type(tokenizer) is cls), None)
    if builder is None:
        raise CheckpointError("tokenizer", f"'{tokenizer.name}' has no Hugging Face form; export the model "
                                           f"without it (to_hf(model)) and pair it with a tokenizer yourself")
    return builder(tokenizer)


def _token(tok, i: Optional[int]) -> Optional[str]:
    return tok.id_to_token(i) if i is not None else None


def write_hf_tokenizer(tokenizer, out, model_max_length: int) -> None:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json, so that
    ``AutoTokenizer.from_pretrained(out)`` gives the run's ids. An imported tokenizer keeps the
    special tokens its checkpoint declared. A tokenizer trained here names no BOS: its language
    models learned documents after an EOS, so lm_eval's ``hf`` model then starts contexts with EOS,
    as ``arch-zoo eval`` does."""
    tok = hf_tokenizer_object(tokenizer)
    declared = getattr(tokenizer, "declared", None)
    if declared is None:  # trained here: texts were encoded without what a post-processor adds
        tok.post_processor = None
    out = Path(out)
    tok.save(str(out / "tokenizer.json"))
    if declared is not None:
        special = {k: v for k, v in declared.items() if k in SPECIAL_KEYS}
    else:
        special = {"bos_token": None, "eos_token": _token(tok, tokenizer.eos_id), "pad_token": _token(tok, tokenizer.pad_id),
                   "unk_token": _token(tok, tokenizer.unk_id), "sep_token": _token(tok, tokenizer.sep_id),
                   "mask_token": _token(tok, tokenizer.mask_id)}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
              "clean_up_tokenization_spaces": False, **special}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps({k: v for k, v in special.items() if v is not None},
                                                            indent=2) + "\n")
