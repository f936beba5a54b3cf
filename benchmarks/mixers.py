"""Sequence mixers, side by side in one process (round-robin, benchmarks/common.py).

``train``: one training step (forward, a mean-square loss, backward; no optimizer) of one mixer layer
on random inputs, float32, for each pair of ``mixer_pairs.PAIRS``: arch_zoo's mixer against Hugging
Face's module for the same layer at the same shape (``gated_deltanet``: ``Qwen3NextGatedDeltaNet``,
``mamba2``: ``Mamba2Mixer`` and Bamba's ``BambaMixer``, ``kda``: Kimi Linear's layer, ``rg_lru``:
RecurrentGemma's recurrent block, ``mlstm``: xLSTM's layer, ``short_conv``: LFM2's), or, for the
mixers transformers lacks (``rwkv7``, ``gated_deltaproduct``), the same layer at chunk_size 1, a
Python loop over positions. Where the pair shares weights, the outputs are checked equal first.
HF runs its pure-torch paths (no fla, mamba-ssm or causal-conv1d installed).
Ratio = arch_zoo tokens/s / peer tokens/s (> 1: arch_zoo is faster); in brackets, from process CPU time.

``decode``: tokens/s of one greedy step after a context of each length, batch 1, the eager cached path
(``model(ids, cache=...)``, as ``generate`` runs it), for decoders whose every layer is one mixer of
``DECODE_MIXERS`` (attention, the contrast, and each recurrent mixer; ``--mixers`` picks some). Each mixer's
width options are chosen so that one mixer layer's parameter count is within 10% of attention's 4 d_model^2
(printed); the rest of the model (embeddings, feed-forward, norms) is the same. Every (mixer, context) pair is
prefilled first, then all of them are timed in one round-robin, so load on a shared machine falls on every
context alike; a timed call decodes ``--steps`` tokens, continuing from where the last call stopped (the
context grows by ``steps`` each call; the printed length is where timing began).

``length``: training tokens/s against sequence length (the chapter's claim that a recurrence cannot run over
positions in parallel): one training step (forward, next-token cross-entropy, backward; no optimizer) of the
``decode`` decoders of attention, gated_deltanet, mamba2 and lstm plus a GRU, every step holding the same
number of tokens (``--tokens``, as batch x length), so a longer sequence means fewer sequences side by side.
Attention computes every position of a sequence at once (its cost per token grows with the length only through
the score matrix); an LSTM or GRU walks the positions one after another, so its parallelism is the batch alone
and shrinks as the length grows. Every (mixer, length) pair is timed in one round-robin.

Usage: python benchmarks/mixers.py train [--quick] [--mixers NAME ...] [--seq 512] [--batch 4] [--rounds N]
                                         [--threads N] [--json PATH]
       python benchmarks/mixers.py decode [--quick] [--mixers NAME ...] [--lengths 256 1024 ...] [--steps N]
                                          [--rounds N] [--threads N] [--json PATH]
       python benchmarks/mixers.py length [--quick] [--lengths 64 256 ...] [--tokens N] [--rounds N]
                                          [--device auto|cpu|cuda] [--threads N] [--json PATH]
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Dict

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # common.py, and arch_zoo from this checkout
from mixer_pairs import PAIRS  # noqa: E402
from common import describe_machine, machine_info, pick_device, round_robin, save_json, summarize, table  # noqa: E402

from arch_zoo.components.masks import AttentionMask  # noqa: E402
from arch_zoo.components.mixers import MIXERS, MixerInputs  # noqa: E402
from arch_zoo.config.loading import model_config  # noqa: E402
from arch_zoo.models import build_model  # noqa: E402

TRAIN_SHAPE = dict(d_model=256, seq=512, batch=4)
TRAIN_QUICK = dict(d_model=64, seq=48, batch=2)
DECODE_D, DECODE_VOCAB = 256, 256
TARGET = 1.0
LENGTH_MIXERS = ("gated_deltanet", "mamba2", "lstm")  # length's recurrences (and a GRU), as first measured


def params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ------------------------------------------------------------------------------------------ train

def train(args) -> dict:
    shape = dict(TRAIN_QUICK if args.quick else TRAIN_SHAPE)
    shape.update({k: v for k, v in (("seq", args.seq), ("batch", args.batch)) if v})
    d, seq, batch = shape["d_model"], shape["seq"], shape["batch"]
    torch.manual_seed(0)
    x = torch.randn(batch, seq, d)
    inputs = MixerInputs(AttentionMask(None, True))
    fns, counts, names = {}, {}, {}
    for mixer in args.mixers or PAIRS:
        pair = PAIRS[mixer]
        ours, theirs, call_theirs = pair.build(d, args.quick)
        ours.train(), theirs.train()
        if pair.same_weights:  # one function on one set of weights, or the timing compares nothing
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.testing.assert_close(ours(x, inputs), call_theirs(x), rtol=1e-4, atol=1e-4)
        peer = pair.peer

        def step(model, call, x=x):
            def run():
                model.zero_grad(set_to_none=True)
                xi = x.clone().requires_grad_(True)
                call(xi).pow(2).mean().backward()
            return run

        fns[f"arch_zoo {mixer}"] = step(ours, lambda xi, m=ours: m(xi, inputs))
        fns[peer] = step(theirs, call_theirs)
        counts[f"arch_zoo {mixer}"], counts[peer] = params(ours), params(theirs)
        names[mixer] = (f"arch_zoo {mixer}", peer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        times = round_robin(fns, torch.device("cpu"), warmup=1, rounds=args.rounds,
                            log=None if args.quiet else print)
    tokens = batch * seq
    results = {name: {"tokens_per_s": tokens / summarize(t.wall)["median_s"], "cpu_s": summarize(t.cpu)["median_s"],
                      "wall": summarize(t.wall), "params": counts[name]} for name, t in times.items()}
    ratios = {mixer: {"ours": a, "peer": b, "ratio": results[a]["tokens_per_s"] / results[b]["tokens_per_s"],
                      "cpu_ratio": results[b]["cpu_s"] / results[a]["cpu_s"]} for mixer, (a, b) in names.items()}
    print()
    print(table(["layer", "params", "tokens/s", "median ms", "cpu ms"],
                [[n, f"{r['params']:,}", f"{r['tokens_per_s']:,.0f}", f"{r['wall']['median_s'] * 1e3:.0f}",
                  f"{r['cpu_s'] * 1e3:.0f}"] for n, r in results.items()]))
    for mixer, r in ratios.items():
        print(f"ratio {mixer}: {r['ours']} / {r['peer']} = {r['ratio']:.2f}x tokens/s "
              f"({r['cpu_ratio']:.2f}x by CPU time)")
    misses = [f"{m} {r['ratio']:.2f}x" for m, r in ratios.items() if r["ratio"] < TARGET]
    print(f"target (arch_zoo >= {TARGET}x its peer): " + ("met" if not misses else "missed: " + ", ".join(misses)))
    return {"shape": shape, "rounds": args.rounds, "results": results, "ratios": ratios,
            "same_weights": {m: PAIRS[m].same_weights for m in names}}


# ----------------------------------------------------------------------------------------- decode

def _eighth(x: float) -> int:
    return max(8, int(x) // 8 * 8)


# width options giving one mixer layer ~4 d^2 parameters, attention's (no biases); adding a mixer to the
# decode (and length) comparison is one entry here (the width test in tests/test_benchmarks.py checks it)
DECODE_MIXERS = {
    "attention": lambda d: {"name": "attention"},
    # key width d/2, value width d: d(2k + 3v) = 4 d^2
    "gated_deltanet": lambda d: {"name": "gated_deltanet", "n_heads": 2, "n_v_heads": 4, "head_dim": max(8, d // 4),
                                 "v_head_dim": max(8, d // 4)},
    "mamba2": lambda d: {"name": "mamba2", "n_heads": 5, "head_dim": max(8, d // 4), "state_size": 16},  # inner 1.25 d
    "lstm": lambda d: {"name": "lstm", "hidden_size": (d * 9 // 16 + 7) // 8 * 8},  # 4h^2 + 5hd ~ 4 d^2
    "kda": lambda d: {"name": "kda", "n_heads": 4, "head_dim": _eighth(3 * d / 16)},  # q, k, v, out ~ 4 x 3/4 d^2
    "rg_lru": lambda d: {"name": "rg_lru", "width": _eighth(9 * d / 8), "n_heads": 4},  # ~3 w d + 2 w^2 / 4
    "mlstm": lambda d: {"name": "mlstm", "n_heads": 4},  # q, k d/2 wide, v, gate, out d: 4 d^2
    "short_conv": lambda d: {"name": "short_conv"},  # in 3 d^2, out d^2
    "lightning": lambda d: {"name": "lightning", "n_heads": 4, "head_dim": _eighth(d / 5)},  # qkv, gate, out: 5 w d
    "rwkv7": lambda d: {"name": "rwkv7", "n_heads": 4, "head_dim": _eighth(7 * d / 32)},  # r, k, v, out ~ 4 x 7/8 d^2
    "gated_deltaproduct": lambda d: {"name": "gated_deltaproduct", "n_heads": 2, "n_v_heads": 4,
                                     "head_dim": _eighth(3 * d / 16), "v_head_dim": _eighth(3 * d / 16),
                                     "n_householder": 2},  # two keys and values a token: 3/4 of GDN's widths
}


def decode_mixers(d: int, names=None) -> Dict[str, dict]:
    """The decode mixers' options at width d: attention (the contrast) and ``names`` (default all)."""
    picked = ["attention", *(n for n in names or DECODE_MIXERS if n != "attention")]
    return {name: DECODE_MIXERS[name](d) for name in picked}


def matched_hidden(name: str, d: int) -> int:
    """The hidden size (a multiple of 8) whose recurrent mixer layer is closest to attention's 4 d^2."""
    target = 4 * d * d

    def layer(h):
        cfg = model_config({"d_model": d, "n_heads": 4, "n_layers": 1, "bias": False, "position": "none",
                            "mixer": {"name": name, "hidden_size": h}})
        return params(MIXERS.build(cfg.mixer, cfg, None))
    return min(range(8, 2 * d + 1, 8), key=lambda h: abs(layer(h) - target))


def decoder(mixer: dict, d: int, max_len: int):
    position = "rope" if mixer["name"] == "attention" else "none"
    return build_model({"kind": "decoder", "d_model": d, "n_layers": 2, "n_heads": 4, "d_ff": 4 * d, "bias": False,
                        "norm": "rmsnorm", "ffn": "swiglu", "position": position, "max_seq_len": max_len,
                        "attention_kernel": "sdpa", "mixer": mixer}, DECODE_VOCAB).eval()


def decode(args) -> dict:
    d = 64 if args.quick else DECODE_D
    lengths = args.lengths or ([16, 64] if args.quick else [256, 1024, 4096, 8192])
    steps = args.steps or (4 if args.quick else 32)
    max_len = max(lengths) + steps * (args.rounds + 2)
    torch.manual_seed(0)
    mixers = decode_mixers(d, args.mixers)
    models = {name: decoder(m, d, max_len) for name, m in mixers.items()}
    layer_params = {name: params(model.decoder.layers[0].mixer.sublayer) for name, model in models.items()}
    for name, n in layer_params.items():
        print(f"mixer params per layer {name}: {n:,} ({n / layer_params['attention']:.2f}x attention)")
    fns = {}
    for length in lengths:
        ids = torch.randint(1, DECODE_VOCAB, (1, length), generator=torch.Generator().manual_seed(length))
        with torch.inference_mode():
            for name, model in models.items():
                cache = model.new_cache()
                last = model(ids, cache=cache, logits_to_keep=1).logits[:, -1].argmax(-1, keepdim=True)

                def run(model=model, cache=cache, box=[last]):
                    with torch.inference_mode():
                        for _ in range(steps):
                            box[0] = model(box[0], cache=cache, logits_to_keep=1).logits[:, -1].argmax(-1, keepdim=True)
                fns[(name, length)] = run
    print(f"prefilled {len(fns)} caches; timing them all in one round-robin", flush=True)
    times = round_robin({f"{n} @ {c}": fn for (n, c), fn in fns.items()}, torch.device("cpu"), warmup=1,
                        rounds=args.rounds)
    rows = []
    for length in lengths:
        picked = {n: times[f"{n} @ {length}"] for n in models}
        tps = {n: steps / summarize(t.wall)["median_s"] for n, t in picked.items()}
        cpu = {n: summarize(t.cpu)["median_s"] / steps for n, t in picked.items()}
        rows.append({"context": length, "tokens_per_s": tps, "cpu_s_per_token": cpu})
    names = list(models)
    print()
    print(table(["context", *(f"{n} tok/s" for n in names), *(f"{n} / attention" for n in names[1:])],
                [[r["context"], *(f"{r['tokens_per_s'][n]:,.0f}" for n in names),
                  *(f"{r['tokens_per_s'][n] / r['tokens_per_s']['attention']:.2f}x "
                    f"({r['cpu_s_per_token']['attention'] / r['cpu_s_per_token'][n]:.2f}x)" for n in names[1:])]
                 for r in rows]))
    print("(in brackets: the same ratio from process CPU time)")
    first, last = rows[0], rows[-1]
    for n in names:  # how the per-token cost grows from the shortest to the longest context
        growth = first["tokens_per_s"][n] / last["tokens_per_s"][n]
        cpu_growth = last["cpu_s_per_token"][n] / first["cpu_s_per_token"][n]
        print(f"cost growth {n}: {growth:.2f}x per token from context {first['context']} to {last['context']} "
              f"({cpu_growth:.2f}x by CPU time)")
    return {"d_model": d, "n_layers": 2, "steps": steps, "rounds": args.rounds, "mixers": mixers,
            "layer_params": layer_params, "results": rows}


# ----------------------------------------------------------------------------------------- length

def length(args, device: torch.device) -> dict:
    d = 64 if args.quick else DECODE_D
    lengths = args.lengths or ([16, 64] if args.quick else [64, 256, 1024, 4096])
    tokens = args.tokens or (128 if args.quick else 4096)
    if any(tokens % n for n in lengths):
        raise SystemExit(f"--tokens {tokens} must be a multiple of every length in --lengths {lengths}")
    mixers = dict(decode_mixers(d, LENGTH_MIXERS), gru={"name": "gru", "hidden_size": matched_hidden("gru", d)})
    torch.manual_seed(0)
    models = {name: decoder(m, d, max(lengths)).train().to(device) for name, m in mixers.items()}
    layer_params = {name: params(model.decoder.layers[0].mixer.sublayer) for name, model in models.items()}
    for name, n in layer_params.items():
        print(f"mixer params per layer {name}: {n:,} ({n / layer_params['attention']:.2f}x attention)")
    fns = {}
    for n in lengths:
        ids = torch.randint(1, DECODE_VOCAB, (tokens // n, n + 1), generator=torch.Generator().manual_seed(n)).to(device)

        def run(model, ids=ids):
            model.zero_grad(set_to_none=True)
            logits = model(ids[:, :-1]).logits
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
        for name, model in models.items():
            fns[f"{name} @ {n}"] = lambda model=model, run=run: run(model)
    print(f"timing {len(fns)} (mixer, length) pairs in one round-robin, {tokens} tokens a step", flush=True)
    times = round_robin(fns, device, warmup=1, rounds=args.rounds, log=None if args.quiet else print)
    rows = []
    for n in lengths:
        picked = {m: times[f"{m} @ {n}"] for m in models}
        rows.append({"length": n, "batch": tokens // n,
                     "tokens_per_s": {m: tokens / summarize(t.wall)["median_s"] for m, t in picked.items()},
                     "cpu_s": {m: summarize(t.cpu)["median_s"] for m, t in picked.items()}})
    names = list(models)
    print()
    print(table(["length", "batch", *(f"{m} tok/s" for m in names), *(f"{m} / attention" for m in names[1:])],
                [[r["length"], r["batch"], *(f"{r['tokens_per_s'][m]:,.0f}" for m in names),
                  *(f"{r['tokens_per_s'][m] / r['tokens_per_s']['attention']:.2f}x "
                    f"({r['cpu_s']['attention'] / r['cpu_s'][m]:.2f}x)" for m in names[1:])] for r in rows]))
    print("(in brackets: the same ratio from process CPU time)")
    first, last = rows[0], rows[-1]
    for m in names:
        print(f"tokens/s {m}: {last['tokens_per_s'][m] / first['tokens_per_s'][m]:.2f}x at length {last['length']} "
              f"of its value at length {first['length']}")
    return {"d_model": d, "n_layers": 2, "tokens_per_step": tokens, "rounds": args.rounds, "mixers": mixers,
            "layer_params": layer_params, "results": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Sequence mixers: a training step against HF's torch paths "
                                     "(train), decoding tokens/s against context length (decode), training tokens/s "
                                     "against sequence length (length)")
    parser.add_argument("what", choices=["train", "decode", "length"])
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny shapes, one round")
    parser.add_argument("--rounds", type=int, default=None, help="timed round-robin rounds (default 3; 1 with --quick)")
    parser.add_argument("--seq", type=int, default=None, help="train: sequence length (default 512)")
    parser.add_argument("--batch", type=int, default=None, help="train: batch size (default 4)")
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="decode: context lengths (default 256 1024 4096 8192); "
                        "length: sequence lengths (default 64 256 1024 4096)")
    parser.add_argument("--tokens", type=int, default=None,
                        help="length: tokens in every training step, batch x length (default 4096)")
    parser.add_argument("--mixers", nargs="+", default=None,
                        help="train: which pairs (default all: " + ", ".join(PAIRS) + "); decode: which mixers "
                        "(default all: " + ", ".join(DECODE_MIXERS) + ")")
    parser.add_argument("--steps", type=int, default=None, help="decode: tokens per timed call (default 32)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"],
                        help="length: where the models train (train and decode run on the CPU)")
    parser.add_argument("--quiet", action="store_true", help="no per-round lines")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    for name in ("lengths", "seq", "batch", "steps", "rounds", "threads", "tokens"):
        value = getattr(args, name)
        if value is not None and min(value if isinstance(value, list) else [value]) < 1:
            parser.error(f"--{name} must be positive, got {value}")
    known = {"train": PAIRS, "decode": DECODE_MIXERS}.get(args.what, {})
    unknown = [m for m in args.mixers or () if m not in known]
    if unknown or (args.mixers and args.what == "length"):
        parser.error(f"--mixers {' '.join(unknown or args.mixers)}: {args.what} takes "
                     + (", ".join(known) if known else "no --mixers"))
    if args.what == "train" and "mlstm" in (args.mixers or PAIRS) and (args.seq or 0) % (16 if args.quick else 64):
        parser.error(f"--seq {args.seq}: HF's xLSTM trains only on a multiple of its chunk "
                     f"({16 if args.quick else 64}); pick another --seq or --mixers without mlstm")
    if args.device != "cpu" and args.what != "length":
        parser.error(f"--device {args.device}: only `length` runs off the CPU")
    args.rounds = args.rounds or (1 if args.quick else 3)
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    device = pick_device(args.device)
    info = machine_info(device)
    print(describe_machine(info) + f", transformers {transformers.__version__}", flush=True)
    result = length(args, device) if args.what == "length" else {"train": train, "decode": decode}[args.what](args)
    if args.json:
        save_json(args.json, {"benchmark": args.what, "machine": info, "quick": args.quick, **result})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
