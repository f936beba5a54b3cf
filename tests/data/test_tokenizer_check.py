"""A corpus task asks its tokenizer's class to check its options before anything is prepared
(``Tokenizer.check``), whatever the tokenizer is called: the pretrained one's missing file, a
plugin's own rule."""
from dataclasses import dataclass

import pytest

from arch_zoo.experiment import load
from arch_zoo.data.tokenizers import TOKENIZERS, CharTokenizer
from arch_zoo.errors import ConfigError
from tests.conftest import tiny
from tests.test_plugins import isolated_registries  # noqa: F401  (autouse: registries restored)


def _cfg(tokenizer):
    return {"model": tiny(), "task": {"name": "char_lm", "max_chars": 1000, "seq_len": 16, "tokenizer": tokenizer}}


def test_a_pretrained_tokenizer_without_its_file_is_refused_at_its_path(tmp_path):
    with pytest.raises(ConfigError, match=f"^task.tokenizer.path: file not found: {tmp_path / 'nope'}$"):
        load(_cfg({"name": "pretrained", "path": str(tmp_path / "nope")}))


def test_a_plugin_tokenizers_own_check_runs_under_its_key():
    @dataclass(frozen=True)
    class Options:
        alphabet: str = "abc"

    @TOKENIZERS.register("picky", Options)
    class Picky(CharTokenizer):
        lossless = True

        @classmethod
        def check(cls, options, key):
            if len(set(options.alphabet)) != len(options.alphabet):
                raise ConfigError(f"{key}.alphabet", "repeats a character")

    assert load(_cfg({"name": "picky"})).task.options.tokenizer["name"] == "picky"
    with pytest.raises(ConfigError, match="^task.tokenizer.alphabet: repeats a character$"):
        load(_cfg({"name": "picky", "alphabet": "aab"}))
