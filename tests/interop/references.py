"""Reference models for the parity tests: randomly initialised Hugging Face models (nothing is
downloaded) whose sizes mirror the ``-tiny`` presets; every other setting is the reference's own
default, so a preset that drifts from its reference fails the tests."""
from __future__ import annotations

import math

import torch

from arch_zoo.config.loading import load

VOCAB = 97


def tiny(name: str):
    return load(f"preset:{name}-tiny").model


def hf_reference(name: str, cls_name: str = "", **changes):
    """A Hugging Face model (eval mode) of the architecture preset ``name`` claims to be, at -tiny size;
    ``cls_name`` picks another class of the family (BertModel), ``changes`` edit its config."""
    import transformers as tf

    m = tiny(name)
    if name == "gpt2":
        config, cls = tf.GPT2Config, tf.GPT2LMHeadModel
        sizes = dict(n_embd=m.d_model, n_layer=m.n_layers, n_head=m.n_heads, n_inner=m.d_ff,
                     n_positions=m.max_seq_len, bos_token_id=1, eos_token_id=2)
    elif name == "bert":
        config, cls = tf.BertConfig, tf.BertForMaskedLM
        sizes = dict(hidden_size=m.d_model, num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads,
                     intermediate_size=m.d_ff, max_position_embeddings=m.max_seq_len)
    elif name == "llama":
        config, cls = tf.LlamaConfig, tf.LlamaForCausalLM
        # Llama 2's published configs set rms_norm_eps 1e-5 (transformers defaults to Llama 1's 1e-6)
        sizes = dict(hidden_size=m.d_model, num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads,
                     num_key_value_heads=m.n_kv_heads, intermediate_size=m.d_ff,
                     max_position_embeddings=m.max_seq_len, rms_norm_eps=1e-5)
    elif name == "t5":
        config, cls = tf.T5Config, tf.T5ForConditionalGeneration
        sizes = dict(d_model=m.d_model, d_kv=m.head_dim, d_ff=m.d_ff, num_layers=m.n_layers, num_heads=m.n_heads,
                     relative_attention_num_buckets=m.position.options.num_buckets,
                     relative_attention_max_distance=m.position.options.max_distance)
    else:
        raise KeyError(name)
    cfg = config(vocab_size=VOCAB, **{**sizes, **changes})
    cls = getattr(tf, cls_name) if cls_name else cls
    cfg._attn_implementation = "eager"  # the textbook softmax path
    torch.manual_seed(0)
    return randomize(cls(cfg)).eval()


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Weights far from the usual init (which would hide mistakes): matrices N(0, 1/width), norm gains
    around 1 and biases around 0, so every tensor, norm and bias visibly moves the output."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() == 1:
                p.copy_(noise * 0.2 + (1.0 if name.endswith("weight") else 0.0))
            else:
                p.copy_(noise / math.sqrt(p.shape[-1]))
    return model


def padded_batch(lengths, total: int, side: str, seed: int = 1, low: int = 1):
    """(ids, mask) with the given real lengths, padded on ``side`` with token 0."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), total, dtype=torch.long)
    mask = torch.zeros(len(lengths), total, dtype=torch.long)
    for row, n in enumerate(lengths):
        span = slice(total - n, total) if side == "left" else slice(0, n)
        ids[row, span] = torch.randint(low, VOCAB, (n,), generator=g)
        mask[row, span] = 1
    return ids, mask


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Real tokens counted from 0 (arch_zoo's default for a padded batch), for the reference's position_ids."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


@torch.no_grad()
def cached_greedy(model, src: torch.Tensor, src_mask: torch.Tensor, start: torch.Tensor, steps: int) -> torch.Tensor:
    """(B, steps) tokens an arch_zoo encoder-decoder picks greedily, decoding through its KV cache."""
    tokens, step, cache = [], start, model.new_cache()
    memory = model.encode(src, src_mask)
    for _ in range(steps):
        step = model.decode(step, memory, src_mask, cache=cache).logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(step)
    return torch.cat(tokens, dim=1)
