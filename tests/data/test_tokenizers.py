import json

import pytest

from arch_zoo.data.tokenizers import SPECIALS, TOKENIZER_FILE, TOKENIZERS, load_tokenizer
from arch_zoo.errors import ConfigError

TRAIN = "def add(a, b):\n    return a + b\n\nprint(add(1, 2))  # héllo\n" * 3
UNSEEN = "lambda x: x * 7  # ünïcode"


def make(spec):
    return TOKENIZERS.build(TOKENIZERS.parse(spec, "tokenizer")).fit([TRAIN])


SPECS = ["char", "word", "byte", {"name": "bpe", "vocab_size": 300}]


def test_special_ids_are_fixed():
    assert SPECIALS == ["<pad>", "<bos>", "<eos>", "<sep>", "<mask>", "<unk>"]
    for spec in SPECS:
        tok = make(spec)
        assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.sep_id, tok.mask_id, tok.unk_id) == (0, 1, 2, 3, 4, 5)
        assert min(tok.encode(TRAIN)) >= len(SPECIALS), spec  # ordinary text never maps to a special id


def test_bpe_keeps_specials_at_their_ids_and_the_vocab_size():
    tok = make({"name": "bpe", "vocab_size": 300})
    assert [tok._tok.token_to_id(s) for s in SPECIALS] == list(range(len(SPECIALS)))
    assert len(SPECIALS) < tok.vocab_size <= 300


@pytest.mark.parametrize("spec", SPECS, ids=["char", "word", "byte", "bpe"])
def test_save_load_round_trip(spec, tmp_path):
    tok = make(spec)
    path = tok.save(tmp_path)
    assert path == tmp_path / TOKENIZER_FILE and json.loads(path.read_text())["name"] == tok.name
    again = load_tokenizer(tmp_path)
    assert type(again) is type(tok) and again.vocab_size == tok.vocab_size
    for text in (TRAIN, UNSEEN):
        assert again.encode(text) == tok.encode(text)
        assert again.decode(tok.encode(text)) == tok.decode(tok.encode(text))


@pytest.mark.parametrize("spec", ["char", "byte", {"name": "bpe", "vocab_size": 300}], ids=["char", "byte", "bpe"])
def test_decode_inverts_encode_on_training_text(spec):
    tok = make(spec)
    assert tok.decode(tok.encode(TRAIN)) == TRAIN


def test_word_tokenizer_splits_on_whitespace():
    tok = make("word")
    assert tok.decode(tok.encode("return a + b")) == "return a + b"
    assert len(tok.encode("return  a\n+ b")) == 4


def test_char_vocabulary_comes_from_training_text_only():
    tok = make("char")
    assert tok.vocab_size == len(SPECIALS) + len(set(TRAIN))
    ids = tok.encode("7ü")  # neither occurs in TRAIN
    assert ids == [tok.unk_id, tok.unk_id]


def test_byte_tokenizer_never_unknown():
    tok = make("byte")
    assert tok.vocab_size == len(SPECIALS) + 256
    assert tok.unk_id not in tok.encode(UNSEEN) and tok.decode(tok.encode(UNSEEN)) == UNSEEN


def test_unknown_tokenizer_and_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="did you mean 'bpe'") as info:
        TOKENIZERS.parse("bpx", "task.tokenizer")
    assert info.value.key == "task.tokenizer"
    with pytest.raises(ConfigError, match="vocab_size must exceed 262"):
        TOKENIZERS.parse({"name": "bpe", "vocab_size": 262}, "task.tokenizer")
    TOKENIZERS.parse({"name": "bpe", "vocab_size": 263}, "task.tokenizer")
