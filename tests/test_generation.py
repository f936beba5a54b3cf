"""Decoding: the cache equals the full forward, and the strategies relate as they should.

The model grid is read from the registries, so a newly registered component is covered here
without editing this file.
"""
from __future__ import annotations

import functools
import math

import pytest
import torch

from arch_zoo.components.attention import KVCache
from arch_zoo.config import ModelConfig
from arch_zoo.experiment import all_registries
from arch_zoo.generation import generate, left_pad, sample_logits, top_k_filter, top_p_filter
from arch_zoo.models.transformer import build_model
from tests.conftest import run_with_torch_only

VOCAB = 40
REGISTRIES = all_registries()
SMALL = dict(d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=48, tie_embeddings=False)  # untied: no echo
DEFAULTS = {field: getattr(ModelConfig(), field).name for field in ("mixer", "attention", "attention_kernel", "norm", "ffn")}


def _grid():
    """Every position scheme x {decoder, encoder-decoder} x {MHA, GQA}, cross-attention positions
    where a scheme can act there, then each other component family one choice at a time."""
    grid = {}
    for kind in ("decoder", "encoder_decoder"):
        for pos in REGISTRIES["positions"].choices():
            for label, kv in (("mha", 4), ("gqa", 2)):
                grid[f"{kind}-{pos}-{label}"] = dict(SMALL, kind=kind, position=pos, n_kv_heads=kv)
            if kind == "encoder_decoder" and REGISTRIES["positions"].get(pos).factory.acts_in_attention:
                grid[f"{kind}-{pos}-cross"] = dict(SMALL, kind=kind, position=pos, cross_attention_position=True)
    for field, family in (("mixer", "mixers"), ("attention", "attention"), ("attention_kernel", "attention_kernel"),
                          ("norm", "norms"), ("ffn", "feedforward")):
        for name in REGISTRIES[family].choices():
            if name != DEFAULTS[field]:
                options = getattr(REGISTRIES[family].get(name).factory, "example_options", None) or {}
                position = "rope" if field != "mixer" else "sinusoidal"  # rope needs attention to act in
                grid[f"decoder-{field}-{name}"] = dict(SMALL, kind="decoder", position=position,
                                                       **{field: {"name": name, **options}})
    # a hybrid (Gated DeltaNet, then attention) and recurrent decoder layers under cross-attention
    gdn = {"name": "gated_deltanet", "chunk_size": 4}
    grid["decoder-hybrid"] = dict(SMALL, kind="decoder", position="rope", layers=[{"pattern": [{"mixer": gdn}, {}]}])
    grid["encoder_decoder-mixer-mamba2"] = dict(SMALL, kind="encoder_decoder", position="rope",
                                                cross_attention_position=True, layers=[
        {"stack": "decoder", "mixer": {"name": "mamba2", "chunk_size": 4}}])
    grid["decoder-post-norm"] = dict(SMALL, kind="decoder", position="learned", norm_placement="post")
    for kind in ("decoder", "encoder_decoder"):  # a window shorter than prompt + output: the cache is trimmed
        grid[f"{kind}-sliding-window-3"] = dict(SMALL, kind=kind, position="rope",
                                                attention={"name": "sliding_window", "window": 3})
    grid["decoder-mqa"] = dict(SMALL, kind="decoder", position="alibi", n_kv_heads=1)
    grid["encoder_decoder-explicit-gqa"] = dict(SMALL, kind="encoder_decoder", position="t5_bias",
                                                attention_kernel="explicit", n_kv_heads=2)
    return grid


GRID = _grid()
# The cache invariants run on the whole grid; the strategies (whose code is shared by all models)
# on every position scheme and model kind, plus GQA.
ALL = pytest.mark.parametrize("name", sorted(GRID))
STRATEGY_GRID = sorted(n for n in GRID if n.endswith("-mha")) + ["decoder-rope-gqa", "encoder_decoder-alibi-gqa",
                                                                  "decoder-sliding-window-3"]
STRATEGY = pytest.mark.parametrize("name", STRATEGY_GRID)
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]  # different lengths: left padding is exercised
STEPS = 8


@functools.lru_cache(maxsize=None)
def model_for(name: str):
    torch.manual_seed(0)
    model = build_model(GRID[name], VOCAB).eval()
    with torch.no_grad():  # sharper than the init: no near-ties between the top two tokens, and attention
        model.head.proj.weight.mul_(8.0)  # that depends on positions (small q, k make it uniform)
        for name_, param in model.named_parameters():
            if name_.endswith(("qkv.weight", ".q.weight", ".kv.weight")):
                param.mul_(6.0)
    return model


@functools.lru_cache(maxsize=None)
def greedy_run(name: str):
    """Cached greedy decoding of PROMPTS (with its logits): the reference the other tests compare to."""
    return generate(model_for(name), PROMPTS, max_new_tokens=STEPS, return_logits=True)


def full_forward_logits(model, prompts, generated):
    """Logits of every generated token from one forward pass over the whole sequence, no cache."""
    ids, mask = left_pad(prompts)
    fed = generated[:, :-1]
    with torch.no_grad():
        if model.config.kind == "encoder_decoder":
            start = torch.full((len(prompts), 1), model.config.pad_token_id)
            return model(ids, torch.cat((start, fed), 1), attention_mask=mask).logits
        logits = model(torch.cat((ids, fed), 1), torch.cat((mask, torch.ones_like(fed)), 1)).logits
    return logits[:, ids.shape[1] - 1:]


def sequence_log_prob(model, prompt, continuation):
    """Sum of the model's log-probabilities of ``continuation`` after ``prompt`` (full forward)."""
    generated = torch.tensor([continuation])
    logp = full_forward_logits(model, [prompt], generated).log_softmax(-1)
    return logp[0].gather(-1, generated[0].unsqueeze(-1)).sum().item()


# ------------------------------------------------------------------------------- cache parity

@ALL
def test_stepwise_logits_equal_full_forward_and_greedy_ignores_the_cache(name):
    """README, Tests: "cached decoding equals the full forward"; README, Decoding: "every position scheme
    gets the right offsets" (the grid covers every scheme, left-padded prompts included)."""
    model = model_for(name)
    cached = greedy_run(name)
    uncached = generate(model, PROMPTS, max_new_tokens=STEPS, use_cache=False, return_logits=True)
    assert cached.logits.shape == (3, STEPS, VOCAB)
    reference = full_forward_logits(model, PROMPTS, cached.best)
    torch.testing.assert_close(cached.logits, reference, atol=1e-5, rtol=0)
    torch.testing.assert_close(uncached.logits, reference, atol=1e-5, rtol=0)
    assert torch.equal(cached.tokens, uncached.tokens)
    torch.testing.assert_close(cached.log_probs, uncached.log_probs, atol=1e-5, rtol=0)


@ALL
def test_beam_identical_with_and_without_cache(name):
    """Beam search reorders the cache every step; the uncached path has no cache to reorder."""
    model = model_for(name)
    kwargs = dict(strategy="beam", beams=3, n_best=3, max_new_tokens=6, eos_token_id=[3, 4])
    cached, uncached = generate(model, PROMPTS, **kwargs), generate(model, PROMPTS, use_cache=False, **kwargs)
    assert torch.equal(cached.tokens, uncached.tokens)
    torch.testing.assert_close(cached.scores, uncached.scores, atol=1e-5, rtol=0)


@STRATEGY
def test_padded_batch_equals_one_prompt_at_a_time(name):
    """README, Decoding: "It batches left-padded prompts": a padded row decodes as it does alone."""
    batched = greedy_run(name)
    for i in (1, 2):  # the two prompts that are padded in the batch
        alone = generate(model_for(name), [PROMPTS[i]], max_new_tokens=STEPS)
        assert alone.best[0].tolist() == batched.best[i].tolist()


def test_kv_cache_appends_in_place_like_concatenation():
    """The buffers double when full; k and v must always equal plain concatenation, also after reorder."""
    torch.manual_seed(0)
    cache, ref_k, ref_v = KVCache(), None, None
    for step, n in enumerate((5, 1, 1, 3, 1, 7, 1, 1)):  # crosses several doublings of the capacity
        k, v = torch.randn(3, 2, n, 4), torch.randn(3, 2, n, 4)
        got_k, got_v = cache.append(k, v)
        ref_k = k if ref_k is None else torch.cat((ref_k, k), -2)
        ref_v = v if ref_v is None else torch.cat((ref_v, v), -2)
        assert torch.equal(got_k, ref_k) and torch.equal(got_v, ref_v)
        assert torch.equal(cache.k, ref_k) and torch.equal(cache.v, ref_v) and len(cache) == ref_k.shape[-2]
        if step == 4:
            index = torch.tensor([2, 2, 0])
            cache.reorder(index)
            ref_k, ref_v = ref_k.index_select(0, index), ref_v.index_select(0, index)
            assert torch.equal(cache.k, ref_k) and torch.equal(cache.v, ref_v)


def test_cached_forward_still_backpropagates():
    """With autograd recording, the cache must not write into tensors saved for backward."""
    torch.manual_seed(0)
    model = build_model(dict(SMALL, kind="decoder", position="rope"), VOCAB)
    ids = torch.randint(1, VOCAB, (2, 6))
    cache = model.new_cache()
    stepped = torch.cat([model(ids[:, :3], cache=cache).logits] +
                        [model(ids[:, i:i + 1], cache=cache).logits for i in range(3, 6)], dim=1)
    stepped.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(ids).logits.square().sum().backward()
    for got, want in zip(grads, (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------- strategies against greedy

def _eos_after_a_few_steps(name):
    """A token that greedy emits at step 3 of the first prompt: with it as EOS, that row stops early."""
    return int(greedy_run(name).best[0, 3])


@STRATEGY
def test_beam_of_one_equals_greedy(name):
    """README, Decoding: `beam` with `beams` and `length_penalty`: a beam of one is greedy, EOS included."""
    model, plain = model_for(name), greedy_run(name)
    beam = generate(model, PROMPTS, strategy="beam", beams=1, max_new_tokens=STEPS)
    assert torch.equal(beam.tokens, plain.tokens)
    eos = _eos_after_a_few_steps(name)
    plain = generate(model, PROMPTS, max_new_tokens=STEPS, eos_token_id=eos)
    beam = generate(model, PROMPTS, strategy="beam", beams=1, max_new_tokens=STEPS, eos_token_id=eos,
                    length_penalty=0.0)
    assert plain.lengths[0, 0] <= 4
    assert torch.equal(beam.lengths, plain.lengths)
    assert beam.to_lists() == plain.to_lists()
    torch.testing.assert_close(beam.log_probs, plain.log_probs, atol=1e-5, rtol=0)


@STRATEGY
def test_top_k_one_equals_greedy(name):
    """README, Decoding: `sample` with `top_k` and `top_p` "alone or combined": top-k 1 is greedy."""
    model, plain = model_for(name), greedy_run(name)
    sampled = generate(model, PROMPTS, strategy="sample", top_k=1, max_new_tokens=STEPS, seed=0)
    assert torch.equal(sampled.tokens, plain.tokens)
    combined = generate(model, PROMPTS, strategy="sample", top_k=1, top_p=0.9, temperature=2.0,
                        max_new_tokens=STEPS, seed=1)
    assert torch.equal(combined.tokens, plain.tokens)


@STRATEGY
def test_sampling_converges_to_greedy_as_temperature_falls(name):
    """README, Decoding: `sample` with `temperature`: as it falls, sampling becomes greedy."""
    model, plain = model_for(name), greedy_run(name)
    greedy_tokens = plain.logits.argmax(-1, keepdim=True)
    temperatures = [10.0, 1.0, 0.1, 1e-2, 1e-4, 1e-6]
    mass = [sample_logits(plain.logits, t).softmax(-1).gather(-1, greedy_tokens).min().item() for t in temperatures]
    assert all(a <= b + 1e-7 for a, b in zip(mass, mass[1:])), mass  # the greedy token gains mass as T falls
    assert mass[-1] > 1 - 1e-6
    hot = generate(model, PROMPTS, strategy="sample", temperature=10.0, max_new_tokens=STEPS, seed=0)
    assert not torch.equal(hot.tokens, plain.tokens)  # a hot sampler does sample
    for seed in range(2):
        cold = generate(model, PROMPTS, strategy="sample", temperature=1e-6, max_new_tokens=STEPS, seed=seed)
        assert torch.equal(cold.tokens, plain.tokens)


def test_sampling_is_seeded():
    """README, Decoding: generation "is seeded": same seed, same tokens; other seed, other tokens."""
    model = model_for("decoder-rope-mha")
    runs = [generate(model, PROMPTS, strategy="sample", temperature=3.0, max_new_tokens=12, seed=s).tokens
            for s in (7, 7, 8)]
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])
    gen = torch.Generator().manual_seed(7)
    assert torch.equal(generate(model, PROMPTS, strategy="sample", temperature=3.0, max_new_tokens=12,
                                generator=gen).tokens, runs[0])


# ------------------------------------------------------------------------------ top-k and top-p

PROBS = torch.tensor([0.1, 0.4, 0.2, 0.3])  # ranked: 0.4 (1), 0.3 (3), 0.2 (2), 0.1 (0)


@pytest.mark.parametrize("p, kept", [
    (0.05, {1}), (0.4 - 1e-4, {1}), (0.4 + 1e-4, {1, 3}), (0.69, {1, 3}), (0.7 + 1e-4, {1, 3, 2}),
    (0.89, {1, 3, 2}), (0.9 + 1e-4, {1, 3, 2, 0}), (1.0, {0, 1, 2, 3}),
])
def test_top_p_keeps_the_smallest_set_reaching_p(p, kept):
    logits = torch.stack((PROBS.log(), PROBS.flip(0).log()))  # the second row checks the unsorting
    filtered = top_p_filter(logits, p)
    assert set(torch.isfinite(filtered[0]).nonzero().flatten().tolist()) == kept
    assert set(torch.isfinite(filtered[1]).nonzero().flatten().tolist()) == {3 - i for i in kept}
    kept_mass = PROBS[sorted(kept)].sum().item()
    assert kept_mass >= p - 1e-6  # reaches p ...
    assert kept_mass - PROBS[sorted(kept)].min().item() < p  # ... and no smaller set of top tokens does
    assert torch.equal(filtered[torch.isfinite(filtered)], logits[torch.isfinite(filtered)])  # kept logits untouched


def test_top_k_keeps_exactly_k():
    logits = torch.tensor([[0.1, 2.0, -1.0, 0.5, 3.0]])
    assert torch.isfinite(top_k_filter(logits, 2)).nonzero()[:, 1].tolist() == [1, 4]
    assert torch.equal(top_k_filter(logits, 5), logits)


def test_filters_combine_in_order():
    """top-p acts on what top-k left: renormalized over the top 2, 0.4/0.7 > 0.5 keeps one token."""
    logits = PROBS.log().unsqueeze(0)
    assert torch.isfinite(sample_logits(logits, top_p=0.5)).sum() == 2
    assert torch.isfinite(sample_logits(logits, top_k=2, top_p=0.5)).sum() == 1


# --------------------------------------------------------------------------------- beam search

BOS, EOS, X, Y, Z = 1, 2, 3, 4, 5
RANDOM = list(range(6, 11))
TRAIN_STEPS = 100


@functools.lru_cache(maxsize=None)
def trap_model():
    """Trained so that greedy walks into a trap: the likelier first token (X, 0.6) is followed by one
    of five tokens (0.12 each), the other (Y, 0.4) by a certain Z. Greedy: 0.12; beam: 0.4."""
    torch.manual_seed(0)
    ids = torch.tensor([[BOS, X, r, EOS] for r in RANDOM] + [[BOS, Y, Z, EOS]])
    weight = torch.tensor([0.6 / len(RANDOM)] * len(RANDOM) + [0.4]).repeat_interleave(3)  # each sequence's share
    model = build_model(dict(kind="decoder", d_model=32, n_layers=1, n_heads=2, d_ff=64, max_seq_len=16,
                             position="rope"), 12)
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    for _ in range(TRAIN_STEPS):
        logits = model(ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 12), ids[:, 1:].reshape(-1), reduction="none")
        opt.zero_grad()
        (loss * weight).sum().div(3).backward()
        opt.step()
    return model.eval()


@pytest.mark.outcome
def test_beam_search_beats_greedy_on_a_trained_model():
    """README, Decoding: `beam`: on a model trained into a greedy trap, beam search finds the likelier sequence."""
    model = trap_model()
    plain = generate(model, [[BOS]], max_new_tokens=5, eos_token_id=EOS)
    beam = generate(model, [[BOS]], strategy="beam", beams=2, max_new_tokens=5, eos_token_id=EOS)
    greedy_seq, beam_seq = plain.to_lists()[0][0], beam.to_lists()[0][0]
    assert greedy_seq[0] == X and greedy_seq[-1] == EOS  # the trap is real
    assert beam_seq == [Y, Z, EOS]
    greedy_lp, beam_lp = sequence_log_prob(model, [BOS], greedy_seq), sequence_log_prob(model, [BOS], beam_seq)
    assert beam_lp >= greedy_lp
    assert beam_lp > greedy_lp + 0.5
    assert beam_lp == pytest.approx(math.log(0.4), abs=0.15)
    assert beam.log_probs[0, 0].item() == pytest.approx(beam_lp, abs=1e-4)


@pytest.mark.parametrize("name", ["decoder-rope-gqa", "encoder_decoder-t5_bias-mha"])
def test_n_best_are_ranked_distinct_and_scored_right(name):
    """README, Decoding: `beam` with `length_penalty` and `n_best`: distinct hypotheses, ranked by
    log-probability / length ** length_penalty, several EOS ids."""
    model = model_for(name)
    out = generate(model, PROMPTS, strategy="beam", beams=4, n_best=4, max_new_tokens=6, eos_token_id=[3, 4, 5],
                   length_penalty=0.7)
    assert out.tokens.shape[:2] == (3, 4)
    for b, hyps in enumerate(out.to_lists()):
        assert len({tuple(h) for h in hyps}) == 4
        scores = out.scores[b].tolist()
        assert scores == sorted(scores, reverse=True)
        for h, hyp in enumerate(hyps):
            lp = sequence_log_prob(model, PROMPTS[b], hyp)
            assert out.log_probs[b, h].item() == pytest.approx(lp, abs=1e-4)
            assert scores[h] == pytest.approx(lp / len(hyp) ** 0.7, abs=1e-4)
            assert hyp[-1] in (3, 4, 5) or len(hyp) == 6  # ended by an EOS or by max_new_tokens


@pytest.mark.outcome
def test_trap_n_best_includes_both_branches():
    out = generate(trap_model(), [[BOS]], strategy="beam", beams=3, n_best=3, max_new_tokens=5, eos_token_id=EOS)
    hyps = out.to_lists()[0]
    assert hyps[0] == [Y, Z, EOS] and all(h[0] == X for h in hyps[1:])


# ------------------------------------------------------------------------------ EOS and output

def test_eos_stops_each_row_and_pads_after_it():
    """README, Decoding: "stops on EOS or `max_new_tokens`", each row on its own."""
    name = "decoder-learned-mha"
    model, eos, free = model_for(name), _eos_after_a_few_steps(name), greedy_run(name)
    out = generate(model, PROMPTS, max_new_tokens=STEPS, eos_token_id=eos, pad_token_id=0)
    for row, free_row, n in zip(out.best.tolist(), free.best.tolist(), out.lengths[:, 0].tolist()):
        stop = free_row.index(eos) + 1 if eos in free_row else STEPS
        assert n == stop and row[:n] == free_row[:n]
        assert all(t == 0 for t in row[n:])
    out = generate(model, [PROMPTS[0]], max_new_tokens=STEPS, eos_token_id=eos)
    assert out.tokens.shape[-1] == out.lengths.item() <= 4  # the batch stops once every row has ended


def test_model_and_outputs_work_with_autograd_after_generating():
    """Decoding runs in inference mode; nothing it returns or leaves behind may be an inference tensor."""
    torch.manual_seed(0)
    model = build_model(dict(SMALL, kind="decoder", position="rope"), VOCAB)
    out = generate(model, PROMPTS, max_new_tokens=4, return_logits=True)
    out.tokens[0, 0, 0] = 1  # in-place edits of the outputs are allowed
    loss = model(out.best).logits.logsumexp(-1).mean() + out.logits.sum() * 0
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_left_pad_and_training_flag():
    ids, mask = left_pad([[3, 4, 5], [6]], pad_token_id=9)
    assert ids.tolist() == [[3, 4, 5], [9, 9, 6]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    model = build_model(GRID["decoder-rope-mha"], VOCAB).train()
    out = generate(model, ids, mask, max_new_tokens=3)
    assert model.training and out.tokens.shape == (2, 1, 3)


# ------------------------------------------------------------------------------------ bad input

LEARNED = dict(SMALL, kind="decoder", position="learned", max_seq_len=16)


@pytest.mark.parametrize("kwargs, key, words", [
    (dict(prompts=[[5, 6], []]), "prompts", "prompt 1 is empty"),
    (dict(prompts=[]), "prompts", "no prompts"),
    (dict(prompts=torch.zeros(2, 0, dtype=torch.long)), "prompts", "empty"),
    (dict(prompts=torch.ones(2, 3, dtype=torch.long), attention_mask=torch.tensor([[1, 1, 1], [0, 0, 0]])),
     "prompts", "prompt 1 is empty"),
    (dict(prompts=[list(range(1, 18))]), "prompts", "learned position table (16 positions)"),
    (dict(prompts=[list(range(1, 11))], max_new_tokens=8), "max_new_tokens", "needs 17 positions"),
    (dict(strategy="nucleus"), "strategy", "choices: beam, greedy, sample"),
    (dict(strategy="sample", top_p=0.0), "top_p", "(0, 1]"),
    (dict(strategy="sample", top_p=1.5), "top_p", "(0, 1]"),
    (dict(strategy="sample", top_p=-0.2), "top_p", "(0, 1]"),
    (dict(strategy="beam", beams=0), "beams", ">= 1"),
    (dict(strategy="beam", beams=-2), "beams", ">= 1"),
    (dict(strategy="beam", beams=2, n_best=3), "n_best", "cannot exceed beams (2)"),
    (dict(strategy="beam", n_best=5), "n_best", "cannot exceed beams (4)"),
    (dict(strategy="greedy", beams=2), "beams", "only applies to strategy 'beam'"),
    (dict(strategy="beam", return_logits=True), "return_logits", "'greedy' and 'sample'"),
    (dict(strategy="sample", temperature=0.0), "temperature", "> 0"),
    (dict(strategy="sample", top_k=0), "top_k", ">= 1"),
    (dict(strategy="greedy", top_k=5), "top_k", "only applies to strategy 'sample'"),
    (dict(max_new_tokens=0), "max_new_tokens", ">= 1"),
    (dict(prompts=torch.tensor([[5, 6, 0]]), attention_mask=torch.tensor([[1, 1, 0]])), "attention_mask",
     "left-padded"),
])
def test_bad_input_names_the_argument(kwargs, key, words):
    model = model_for_learned()
    kwargs = dict(dict(prompts=[[5, 6]], max_new_tokens=4), **kwargs)
    with pytest.raises(ValueError) as info:
        generate(model, **kwargs)
    message = str(info.value)
    assert message.startswith(f"{key}: ") and words in message and "\n" not in message


@functools.lru_cache(maxsize=None)
def model_for_learned():
    torch.manual_seed(0)
    return build_model(LEARNED, VOCAB).eval()


def test_learned_positions_allow_exactly_the_table():
    """16 positions: a 10-token prompt may take 7 new tokens (the last is never fed back), not 8."""
    out = generate(model_for_learned(), [list(range(1, 11))], max_new_tokens=7)
    assert out.lengths.item() == 7
    assert generate(model_for_learned(), [list(range(1, 17))], max_new_tokens=1).lengths.item() == 1


def test_encoder_decoder_learned_limits():
    model = build_model(dict(LEARNED, kind="encoder_decoder"), VOCAB)
    with pytest.raises(ValueError, match="^prompts: .*encoder's learned position table"):
        generate(model, [list(range(1, 18))])
    with pytest.raises(ValueError, match="^max_new_tokens: .*decoder's learned position table"):
        generate(model, [[5, 6]], max_new_tokens=17)
    assert generate(model, [[5, 6]], max_new_tokens=16).lengths.item() == 16


def test_encoder_only_model_is_refused():
    model = build_model(dict(SMALL, kind="encoder", head="lm"), VOCAB)
    with pytest.raises(ValueError, match="^model: .*'encoder'"):
        generate(model, [[5, 6]])


def test_generation_needs_torch_alone():
    """Like arch_zoo.models, decoding must not pull Lightning, wandb, pandas or OmegaConf."""
    proc = run_with_torch_only("""
from arch_zoo.generation import generate
from arch_zoo.models import build_model
m = build_model({'kind': 'decoder', 'd_model': 16, 'n_heads': 2, 'n_layers': 1}, 11)
print(generate(m, [[1, 2], [3]], strategy='beam', beams=2, max_new_tokens=3).tokens.shape)
""")
    assert proc.returncode == 0, proc.stderr
    assert "torch.Size([2, 1, 3])" in proc.stdout
