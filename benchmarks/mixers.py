"""Sequence mixers, side by side in one process (round-robin, benchmarks/common.py).

``train``: one training step (forward, a mean-square loss, backward; no optimizer) of one mixer layer
on random inputs, float32: arch_zoo's ``gated_deltanet`` against Hugging Face's
``Qwen3NextGatedDeltaNet`` and arch_zoo's ``mamba2`` against HF's ``Mamba2Mixer``, each pair at the
same shape (heads, head widths, state size, conv taps, chunk size; weights random and not shared).
HF runs its pure-torch paths (no fla, mamba-ssm or causal-conv1d installed: it says so once).
Ratio = arch_zoo tokens/s / HF tokens/s (> 1: arch_zoo is faster); in brackets, from process CPU time.

``decode``: tokens/s of one greedy step after a context of each length, batch 1, the eager cached path
(``model(ids, cache=...)``, as ``generate`` runs it), for decoders whose every layer is attention,
gated_deltanet, mamba2 or lstm. Each mixer's width options are chosen so that one mixer layer's
parameter count is within 10% of attention's 4 d_model^2 (printed); the rest of the model (embeddings,
feed-forward, norms) is the same. Every (mixer, context) pair is prefilled first, then all of them are
timed in one round-robin, so load on a shared machine falls on every context alike; a timed call
decodes ``--steps`` tokens, continuing from where the last call stopped (the context grows by
``steps`` each call; the printed length is where timing began).

``length``: training tokens/s against sequence length (the chapter's claim that a recurrence cannot run
over positions in parallel): one training step (forward, next-token cross-entropy, backward; no
optimizer) of the ``decode`` decoders plus a GRU, every step holding the same number of tokens
(``--tokens``, as batch x length), so a longer sequence means fewer sequences side by side. Attention
computes every position of a sequence at once (its cost per token grows with the length only through
the score matrix); an LSTM or GRU walks the positions one after another, so its parallelism is the
batch alone and shrinks as the length grows. Every (mixer, length) pair is timed in one round-robin.

Usage: python benchmarks/mixers.py train [--quick] [--seq 512] [--batch 4] [--rounds N] [--threads N] [--json PATH]
       python benchmarks/mixers.py decode [--quick] [--lengths 256 1024 ...] [--steps N] [--rounds N]
                                          [--threads N] [--json PATH]
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
from common import describe_machine, machine_info, pick_device, round_robin, save_json, summarize, table  # noqa: E402

from arch_zoo.components.masks import AttentionMask  # noqa: E402
from arch_zoo.components.mixers import MIXERS, MixerInputs  # noqa: E402
from arch_zoo.config.loading import model_config  # noqa: E402
from arch_zoo.models import build_model  # noqa: E402

TRAIN_SHAPE = dict(d_model=256, seq=512, batch=4)
TRAIN_QUICK = dict(d_model=64, seq=48, batch=2)
DECODE_D, DECODE_VOCAB = 256, 256
TARGET = 1.0


def params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ------------------------------------------------------------------------------------------ train

def gdn_pair(d: int, chunk: int):
    """Qwen3-Next's layout in small: value heads twice the key heads, 64-wide heads (16 when tiny)."""
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    heads, dim = 2, min(64, d // 4)
    cfg = model_config({"d_model": d, "n_heads": heads, "n_layers": 1, "bias": False, "position": "none",
                        "mixer": {"name": "gated_deltanet", "n_heads": heads, "n_v_heads": 2 * heads,
                                  "head_dim": dim, "v_head_dim": dim, "conv_size": 4, "chunk_size": chunk}})
    ours = MIXERS.build(cfg.mixer, cfg, None)
    theirs = Qwen3NextGatedDeltaNet(Qwen3NextConfig(
        hidden_size=d, linear_num_key_heads=heads, linear_num_value_heads=2 * heads, linear_key_head_dim=dim,
        linear_value_head_dim=dim, linear_conv_kernel_dim=4, num_hidden_layers=1, layer_types=["linear_attention"]), 0)
    return ours, theirs, lambda x: theirs(x)


def mamba2_pair(d: int, chunk: int):
    """Mamba-2's defaults in small: expand 2, 64-wide heads (16 when tiny), state 64 (16), one group."""
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    dim = min(64, d // 4)
    heads, state = 2 * d // dim, min(64, d // 4)
    cfg = model_config({"d_model": d, "n_heads": heads, "n_layers": 1, "bias": False, "position": "none",
                        "mixer": {"name": "mamba2", "n_heads": heads, "head_dim": dim, "state_size": state,
                                  "n_groups": 1, "conv_size": 4, "chunk_size": chunk}})
    ours = MIXERS.build(cfg.mixer, cfg, None)
    theirs = Mamba2Mixer(Mamba2Config(hidden_size=d, num_heads=heads, head_dim=dim, expand=2, state_size=state,
                                      n_groups=1, conv_kernel=4, chunk_size=chunk, use_bias=False,
                                      use_conv_bias=True, num_hidden_layers=1), 0)
    return ours, theirs, lambda x: theirs(x)


PAIRS = {"gated_deltanet": (gdn_pair, "hf Qwen3NextGatedDeltaNet"), "mamba2": (mamba2_pair, "hf Mamba2Mixer")}


def train(args) -> dict:
    shape = dict(TRAIN_QUICK if args.quick else TRAIN_SHAPE)
    shape.update({k: v for k, v in (("seq", args.seq), ("batch", args.batch)) if v})
    d, seq, batch = shape["d_model"], shape["seq"], shape["batch"]
    chunk = 16 if args.quick else 64
    torch.manual_seed(0)
    x = torch.randn(batch, seq, d)
    inputs = MixerInputs(AttentionMask(None, True))
    fns, counts, names = {}, {}, {}
    for mixer, (pair, peer) in PAIRS.items():
        ours, theirs, call_theirs = pair(d, chunk)
        ours.train(), theirs.train()

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
    print(f"target (arch_zoo >= {TARGET}x HF): " + ("met" if not misses else "missed: " + ", ".join(misses)))
    return {"shape": shape, "chunk_size": chunk, "rounds": args.rounds, "results": results, "ratios": ratios}


# ----------------------------------------------------------------------------------------- decode

def decode_mixers(d: int) -> Dict[str, dict]:
    """Width options giving one mixer layer ~4 d^2 parameters, attention's (no biases): Gated DeltaNet
    with key width d/2 and value width d (d(2k + 3v) = 4 d^2); Mamba-2 with inner width 1.25 d
    (~3 inner d + small); an LSTM of hidden h with 4h^2 + 5hd ~ 4 d^2 (h ~ 0.55 d)."""
    dim = max(8, d // 4)
    return {"attention": {"name": "attention"},
            "gated_deltanet": {"name": "gated_deltanet", "n_heads": 2, "n_v_heads": 4, "head_dim": dim,
                               "v_head_dim": dim},
            "mamba2": {"name": "mamba2", "n_heads": 5, "head_dim": dim, "state_size": 16},
            "lstm": {"name": "lstm", "hidden_size": (d * 9 // 16 + 7) // 8 * 8}}


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
    models = {name: decoder(m, d, max_len) for name, m in decode_mixers(d).items()}
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
    return {"d_model": d, "n_layers": 2, "steps": steps, "rounds": args.rounds, "mixers": decode_mixers(d),
            "layer_params": layer_params, "results": rows}


# ----------------------------------------------------------------------------------------- length

def length(args, device: torch.device) -> dict:
    d = 64 if args.quick else DECODE_D
    lengths = args.lengths or ([16, 64] if args.quick else [64, 256, 1024, 4096])
    tokens = args.tokens or (128 if args.quick else 4096)
    if any(tokens % n for n in lengths):
        raise SystemExit(f"--tokens {tokens} must be a multiple of every length in --lengths {lengths}")
    mixers = dict(decode_mixers(d), gru={"name": "gru", "hidden_size": matched_hidden("gru", d)})
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
