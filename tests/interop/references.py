"""Reference models for the parity tests: randomly initialised Hugging Face models (nothing is
downloaded) whose sizes mirror the ``-tiny`` presets; every other setting is the reference's own
default, so a preset that drifts from its reference fails the tests."""
from __future__ import annotations

import math

import torch

from arch_zoo.experiment import load

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


def greedy_cached(model, ids, mask, steps):
    """Prompt once, then one token at a time through arch_zoo's KV cache."""
    cache, out, tokens = model.new_cache(), None, []
    with torch.no_grad():
        out = model(ids, mask, cache=cache)
        for _ in range(steps):
            tokens.append(out.logits[:, -1].argmax(-1, keepdim=True))
            mask = torch.cat((mask, torch.ones_like(mask[:, :1])), dim=1)
            out = model(tokens[-1], mask, cache=cache)
    return torch.cat(tokens, dim=1)


# ---- a decoder family against its Hugging Face causal LM: the checks every family's test makes

ATOL = 1e-4


def causal_lm_logits(ref, model, side: str, position_ids: bool = True):
    """(reference, arch_zoo) logits at the real tokens of a batch padded on ``side``; ``position_ids``:
    give the reference positions counted from each row's first real token (as arch_zoo counts them)."""
    ids, mask = padded_batch([7, 12, 3], 12, side)
    extra = {"position_ids": positions(mask)} if position_ids else {}
    with torch.no_grad():
        theirs = ref(input_ids=ids, attention_mask=mask, **extra).logits[mask.bool()]
        return theirs, model(ids, mask).logits[mask.bool()]


def assert_same_logits(ref, model, side: str, position_ids: bool = True) -> None:
    theirs, ours = causal_lm_logits(ref, model, side, position_ids)
    assert theirs.abs().max() > 0.1  # a meaningful comparison, not of near-zero logits
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


def assert_generates_as_hf(ref, model, steps: int = 8) -> None:
    """Cached greedy decoding of left-padded prompts gives the tokens of the reference's ``generate``."""
    ids, mask = padded_batch([5, 8, 2], 8, "left")
    expected = ref.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=steps,
                            min_new_tokens=steps, pad_token_id=0)[:, -steps:]
    assert len(set(expected.flatten().tolist())) > 1  # the prompts matter (random models often repeat a token)
    assert torch.equal(greedy_cached(model, ids, mask, steps), expected)


def meta_parameters(cls, config) -> int:
    """The parameters of a Hugging Face class at ``config``, counted on the meta device (no memory)."""
    with torch.device("meta"):
        return sum(p.numel() for p in cls(config).parameters())


def assert_round_trip(ref) -> None:
    """``to_hf(from_hf(ref))`` is ``ref``'s class holding ``ref``'s tensors bit for bit."""
    from arch_zoo.interop import from_hf, to_hf

    back = to_hf(from_hf(ref))
    assert type(back) is type(ref)
    theirs, ours = ref.state_dict(), back.state_dict()
    assert set(theirs) == set(ours)
    for key, value in theirs.items():
        assert torch.equal(ours[key], value), key
