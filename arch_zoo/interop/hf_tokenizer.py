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


def hf_tokenizer(path):
    """The arch_zoo tokenizer of a Hugging Face checkpoint directory (its tokenizer.json)."""
    from ..data.pretrained import PretrainedOptions, PretrainedTokenizer

    path = Path(path).expanduser()
    if not (path / "tokenizer.json").is_file():
        raise CheckpointError(str(path), "has no tokenizer.json (a fast tokenizer's file); only those are read")
    return PretrainedTokenizer(PretrainedOptions(path=str(path)), declared=declared_special_tokens(path))
