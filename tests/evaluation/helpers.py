"""What the evaluation tests share: the task files they ship, a tiny Hugging Face GPT-2 and T5 built
from configs (random weights, a byte-level BPE fitted here: no download), and such a model imported
into an arch_zoo run directory."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

TASKS = Path(__file__).parent / "tasks"
TEXT = ["the cat sat on the mat", "a dog ran in the park", "paris is the capital of france",
        "two plus two is four", "the sun rises in the east", "water is wet"] * 4
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@contextmanager
def in_task_dir():
    """The task files name their JSON Lines data relative to the working directory, as lm_eval reads them."""
    before = {k: os.environ.get(k) for k in OFFLINE}
    os.environ.update(OFFLINE)
    cwd = os.getcwd()
    os.chdir(TASKS)
    try:
        yield TASKS
    finally:
        os.chdir(cwd)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def bpe_tokenizer():
    """A GPT-2 style byte-level BPE (300 tokens, <|endoftext|>) fitted on the tasks' words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def bos_tokenizer():
    """A Llama-style tokenizer: byte-level BPE whose post-processor puts <s> before every text, with
    <s> (BOS) and </s> (EOS) two different tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", bos)])
    return tok


def tiny_llama(directory: Path, n_positions: int = 64, seed: int = 0) -> Path:
    """A 2-layer Llama (grouped-query attention) whose tokenizer adds <s>, BOS != EOS, saved as a
    Hugging Face checkpoint directory."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = bos_tokenizer()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=n_positions,
        bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"))).eval()
    model.save_pretrained(directory)
    fast.save_pretrained(directory)
    return directory


def tiny_gpt2(directory: Path, n_positions: int = 64, seed: int = 0) -> Path:
    """A 2-layer GPT-2 and its tokenizer, saved as a Hugging Face checkpoint directory."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = bpe_tokenizer()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    torch.manual_seed(seed)
    eot = tok.token_to_id("<|endoftext|>")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=n_positions, n_embd=32,
                                       n_layer=2, n_head=2, bos_token_id=eot, eos_token_id=eot)).eval()
    model.save_pretrained(directory)
    fast.save_pretrained(directory)
    return directory


def tiny_t5(directory: Path, seed: int = 0) -> Path:
    """A 2+2-layer T5 (relative position buckets, tied embeddings) and the same tokenizer, saved as a
    Hugging Face checkpoint directory; <|endoftext|> is its pad, end and decoder start token."""
    from transformers import PreTrainedTokenizerFast

    tok = bpe_tokenizer()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
    eot = tok.token_to_id("<|endoftext|>")
    return _save_t5(directory, fast, seed, pad=eot, eos=eot)


def tiny_t5_eos(directory: Path, seed: int = 0) -> Path:
    """A T5 as T5's own checkpoints are: a tokenizer that appends </s> to every text and names no BOS,
    and <pad> (not </s>) as the decoder start token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "</s>", "<unk>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", eos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    return _save_t5(directory, fast, seed, pad=tok.token_to_id("<pad>"), eos=eos)


def _save_t5(directory: Path, fast, seed: int, pad: int, eos: int) -> Path:
    """A 2+2-layer T5 (relative position buckets, tied embeddings) for ``fast``'s vocabulary, saved with
    ``fast`` as a checkpoint directory; ``pad`` is its pad and decoder start token."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(T5Config(
        vocab_size=fast.backend_tokenizer.get_vocab_size(), d_model=32, d_kv=16, d_ff=64, num_layers=2,
        num_decoder_layers=2, num_heads=2, relative_attention_num_buckets=8, relative_attention_max_distance=16,
        dropout_rate=0.0, pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=pad)).eval()
    model.save_pretrained(directory)
    fast.save_pretrained(directory)
    return directory


def import_run(hf_dir: Path, out: Path) -> Path:
    """The checkpoint as an arch_zoo run, as ``arch-zoo import`` writes it: weights through
    ``load_hf_checkpoint``, its tokenizer.json and declared special tokens as the run's tokenizer."""
    from arch_zoo.interop.as_run import import_hf

    return import_hf(hf_dir, out)


def tiny_run(out: Path, position: str = "rope", seed: int = 0, tokenizer=None) -> Path:
    """A random arch_zoo decoder with the BPE tokenizer (``tokenizer()``: another ``tokenizers``
    tokenizer), as a run directory (no transformers)."""
    import torch

    from arch_zoo.data.pretrained import PretrainedOptions, PretrainedTokenizer
    from arch_zoo.interop.as_run import save_as_run
    from arch_zoo.models import build_model

    out.mkdir(parents=True, exist_ok=True)
    (tokenizer or bpe_tokenizer)().save(str(out / "bpe.json"))
    tokenizer = PretrainedTokenizer(PretrainedOptions(path=str(out / "bpe.json")))
    (out / "bpe.json").unlink()
    torch.manual_seed(seed)
    model = build_model({"kind": "decoder", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64,
                         "max_seq_len": 64, "position": position}, tokenizer.vocab_size)
    return save_as_run(model.eval(), tokenizer, out)
