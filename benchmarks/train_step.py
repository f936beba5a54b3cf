"""Training throughput of arch_zoo against peer implementations, side by side in one process.

One training step is forward, cross-entropy over the vocabulary, backward and an AdamW step, all in
float32. Every implementation gets the same tokens, the same loss code and the same optimizer
settings; dropout is off everywhere and input/output embeddings are tied everywhere.

Comparisons (ratio = arch_zoo tokens/s / peer tokens/s, so > 1 means arch_zoo is faster):

* gpt-style: arch_zoo (pre-norm, learned positions, GELU, LayerNorm, biases) against
  ``torch.nn.TransformerEncoder`` (causal, norm_first, with the same embeddings and LM head) and
  x-transformers ``TransformerWrapper`` + ``Decoder``; the ratio is taken against the faster peer.
* llama-style: arch_zoo (RoPE, RMSNorm, SwiGLU, no biases) against Hugging Face
  ``LlamaForCausalLM`` (random init, sdpa attention).

Usage: python benchmarks/train_step.py [--device auto|cpu|cuda] [--steps N] [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # common.py, and arch_zoo from this checkout
from common import (PeakMemory, describe_machine, emit_child_result, machine_info, mib, pick_device,  # noqa: E402
                    round_robin, run_children, save_json, summarize, table)


@dataclass(frozen=True)
class Shape:
    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    seq: int
    batch: int

    @property
    def tokens(self) -> int:
        return self.seq * self.batch


FULL = Shape(vocab=4096, d_model=256, n_layers=4, n_heads=4, d_ff=1024, seq=256, batch=8)
QUICK = Shape(vocab=256, d_model=64, n_layers=2, n_heads=2, d_ff=256, seq=32, batch=2)


# ---------------------------------------------------------------------------------- implementations

def _arch_zoo(s: Shape, **arch) -> nn.Module:
    from arch_zoo.models import build_model

    cfg = dict(kind="decoder", d_model=s.d_model, n_layers=s.n_layers, n_heads=s.n_heads, d_ff=s.d_ff,
               max_seq_len=s.seq, norm_placement="pre", attention_kernel="sdpa", dropout=0.0, tie_embeddings=True,
               **arch)
    return build_model(cfg, s.vocab)


def arch_zoo_gpt(s: Shape) -> nn.Module:
    return _arch_zoo(s, position="learned", norm="layernorm", ffn="gelu", bias=True)


def arch_zoo_llama(s: Shape) -> nn.Module:
    return _arch_zoo(s, position="rope", norm="rmsnorm", ffn="swiglu", bias=False)


class TorchNNLM(nn.Module):
    """torch.nn.TransformerEncoder as a causal LM: token + learned position embeddings, pre-norm
    layers, final LayerNorm, tied LM head: the same work as arch_zoo's gpt-style config."""

    def __init__(self, s: Shape):
        super().__init__()
        self.tok = nn.Embedding(s.vocab, s.d_model)
        self.pos = nn.Embedding(s.seq, s.d_model)
        layer = nn.TransformerEncoderLayer(s.d_model, s.n_heads, s.d_ff, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, s.n_layers, norm=nn.LayerNorm(s.d_model),
                                             enable_nested_tensor=False)
        self.head = nn.Linear(s.d_model, s.vocab, bias=False)
        self.head.weight = self.tok.weight
        for emb in (self.tok, self.pos):  # N(0, 1), torch's default, gives a tied head huge logits
            nn.init.normal_(emb.weight, std=0.02)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(s.seq), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(length, device=ids.device))
        x = self.encoder(x, mask=self.mask[:length, :length], is_causal=True)
        return self.head(x)


def x_transformers_gpt(s: Shape) -> nn.Module:
    from x_transformers import Decoder, TransformerWrapper

    # attn_flash routes attention through F.scaled_dot_product_attention, x-transformers' fast path.
    return TransformerWrapper(num_tokens=s.vocab, max_seq_len=s.seq, tie_embedding=True,
                              attn_layers=Decoder(dim=s.d_model, depth=s.n_layers, heads=s.n_heads,
                                                  attn_dim_head=s.d_model // s.n_heads,
                                                  ff_mult=s.d_ff / s.d_model, attn_flash=True))


def hf_llama(s: Shape) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=s.vocab, hidden_size=s.d_model, intermediate_size=s.d_ff,
                      num_hidden_layers=s.n_layers, num_attention_heads=s.n_heads, num_key_value_heads=s.n_heads,
                      max_position_embeddings=s.seq, rms_norm_eps=1e-6, attention_bias=False, mlp_bias=False,
                      tie_word_embeddings=True, attention_dropout=0.0, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg)
    assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
    return model


@dataclass(frozen=True)
class Impl:
    name: str
    config: str  # one line, for the table
    build: Callable[[Shape], nn.Module]
    forward: Callable[[nn.Module, torch.Tensor], torch.Tensor]  # ids -> logits
    module: str  # the package it needs, imported before memory is measured


IMPLS: Dict[str, Impl] = {i.name: i for i in [
    Impl("arch_zoo[gpt]", "pre-LN, learned pos, GELU, bias", arch_zoo_gpt, lambda m, x: m(x).logits, "arch_zoo"),
    Impl("torch.nn", "TransformerEncoder norm_first, causal", TorchNNLM, lambda m, x: m(x), "torch"),
    Impl("x-transformers", "TransformerWrapper+Decoder, flash", x_transformers_gpt, lambda m, x: m(x),
         "x_transformers"),
    Impl("arch_zoo[llama]", "RoPE, RMSNorm, SwiGLU, no bias", arch_zoo_llama, lambda m, x: m(x).logits, "arch_zoo"),
    Impl("hf-llama", "LlamaForCausalLM, sdpa", hf_llama, lambda m, x: m(input_ids=x, use_cache=False).logits,
         "transformers"),
]}


@dataclass(frozen=True)
class Comparison:
    name: str
    ours: str
    peers: Sequence[str]  # the ratio is taken against the fastest of these


COMPILED = " +compile"  # suffix of a compiled row's name
COMPILE_IMPLS = ("arch_zoo[llama]", "hf-llama")  # --compile adds a compiled row for each


def modes(name: str, results: Dict[str, dict]) -> List[str]:
    """An implementation's measured rows: eager, and compiled where --compile ran it."""
    return [n for n in (name, name + COMPILED) if "tokens_per_s" in results.get(n, {})]


COMPARISONS = [
    Comparison("gpt-style", "arch_zoo[gpt]", ("torch.nn", "x-transformers")),
    Comparison("llama-style", "arch_zoo[llama]", ("hf-llama",)),
]


# ----------------------------------------------------------------------------------- measurement

def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once


def batch(s: Shape, device: torch.device):
    g = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, s.vocab, (s.batch, s.seq + 1), generator=g).to(device)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


class Trainer:
    """One implementation's model, optimizer and fixed batch; ``step()`` is one training step."""

    def __init__(self, impl: Impl, s: Shape, device: torch.device, compiled: bool = False):
        torch.manual_seed(0)
        self.impl, self.vocab = impl, s.vocab
        with device:  # built where it will run: no host copy, and no reliance on every module's .to()
            self.model = impl.build(s).train()
        # the step's forward (and so its backward) through torch.compile; the optimizer stays eager
        self.run = torch.compile(self.model) if compiled else self.model
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.01)
        self.ids, self.targets = batch(s, device)

    def loss(self) -> torch.Tensor:
        logits = self.impl.forward(self.run, self.ids)
        return F.cross_entropy(logits.reshape(-1, self.vocab), self.targets.reshape(-1))

    def step(self) -> None:
        self.loss().backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def static_bytes(self) -> int:
        """Weights + grads + AdamW's two moments: the part of the peak that is not activations."""
        return sum(4 * p.numel() * p.element_size() for p in self.model.parameters())


def available(impl: Impl) -> Optional[str]:
    try:
        importlib.import_module(impl.module)
        return None
    except ImportError as exc:
        return f"{impl.module} not installed ({exc})"


CHILD_STEPS = 3  # the second step is the first with AdamW state, grads and activations all alive


def memory_child(name: str, s: Shape, device: torch.device, steps: int) -> None:
    """Runs in a fresh process: peak memory of building and training one implementation."""
    impl = IMPLS[name]
    importlib.import_module(impl.module)
    # A throwaway tiny run first: lazy imports and library init on the first step (tens of MiB on CPU)
    # then land in the baseline instead of in this implementation's peak.
    primer = Trainer(impl, QUICK, device)
    for _ in range(2):
        primer.step()
    del primer
    gc.collect()
    meter = PeakMemory(device)
    meter.start()
    trainer = Trainer(impl, s, device)
    for _ in range(steps):
        trainer.step()
    emit_child_result({**meter.stop(), "static_bytes": trainer.static_bytes(), "memory_method": meter.method})


def child_argv(args, name: str) -> List[str]:
    argv = [os.path.abspath(__file__), "--memory-child", name, "--device", args.device_resolved,
            "--threads", str(torch.get_num_threads())]
    return argv + (["--quick"] if args.quick else [])


# ------------------------------------------------------------------------------------------- main

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--steps", type=int, default=None, help="timed round-robin rounds, one step per "
                   "implementation each (default 10; 2 with --quick)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per implementation (default 2; 1 with --quick)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="tiny shape and few steps: a smoke test, not a measurement")
    p.add_argument("--no-memory", action="store_true", help="skip the per-implementation memory subprocesses")
    p.add_argument("--json", metavar="PATH", help="also write the results here")
    p.add_argument("--compile", action="store_true", help="add torch.compile rows for " + " and ".join(COMPILE_IMPLS)
                   + "; the llama-style ratio takes each side in its fastest mode")
    p.add_argument("--memory-child", metavar="IMPL", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.steps = args.steps if args.steps is not None else (2 if args.quick else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    return args


def ratio_line(comp: Comparison, results: Dict[str, dict]) -> dict:
    """Ours against the fastest peer, each side in its fastest mode (eager or compiled, by median)."""
    fastest = lambda names: max(names, key=lambda n: results[n]["tokens_per_s"])  # noqa: E731
    mine = modes(comp.ours, results)
    peers = [m for n in comp.peers for m in modes(n, results)]
    if not mine or not peers:
        return {"comparison": comp.name, "ours": comp.ours, "peer": None, "peers": list(comp.peers), "ratio": None}
    name, peer = fastest(mine), fastest(peers)
    ours = results[name]
    # Round r of every implementation ran back to back, so per-round ratios share the machine's state.
    paired = sorted(b / a for a, b in zip(ours["step_s"], results[peer]["step_s"]))
    mem = (ours["peak_bytes"] / results[peer]["peak_bytes"]
           if ours.get("peak_bytes") and results[peer].get("peak_bytes") else None)
    return {"comparison": comp.name, "ours": name, "peer": peer, "peers": list(comp.peers),
            "ratio": ours["tokens_per_s"] / results[peer]["tokens_per_s"],
            "all_rounds_ratio": sum(results[peer]["step_s"]) / sum(ours["step_s"]),  # total tokens / total time
            "cpu_ratio": results[peer]["cpu_median_s"] / ours["cpu_median_s"],
            "paired_min": paired[0], "paired_max": paired[-1], "memory_ratio": mem}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    args.device_resolved = device.type
    s = QUICK if args.quick else FULL
    if args.memory_child:
        memory_child(args.memory_child, s, device, steps=CHILD_STEPS)
        return 0

    info = machine_info(device)
    print("train step: forward + cross-entropy + backward + AdamW step, float32, dropout 0, tied embeddings"
          + (" [--quick: smoke test, numbers are meaningless]" if args.quick else ""))
    print(f"shape: vocab {s.vocab}, d_model {s.d_model}, layers {s.n_layers}, heads {s.n_heads}, d_ff {s.d_ff}, "
          f"seq {s.seq}, batch {s.batch} ({s.tokens} tokens/step)")
    print(describe_machine(info))
    print(f"timing: {args.warmup} warmup steps each, then {args.steps} round-robin rounds of one step each "
          f"(order rotates every round); tokens/s from the median step (and, in the ratios, over all rounds)"
          + ("; compiled rows compile during their warmup" if args.compile else ""))

    results: Dict[str, dict] = {}
    trainers: Dict[str, Trainer] = {}
    for name, impl in IMPLS.items():
        missing = available(impl)
        if missing:
            results[name] = {"skipped": missing}
            print(f"skipping {name}: {missing}")
            continue
        trainers[name] = Trainer(impl, s, device)
        with torch.no_grad():
            init_loss = trainers[name].loss().item()
        results[name] = {"config": impl.config, "params": n_params(trainers[name].model), "init_loss": init_loss}
        if args.compile and name in COMPILE_IMPLS:
            trainers[name + COMPILED] = Trainer(impl, s, device, compiled=True)
            results[name + COMPILED] = {**results[name], "config": "torch.compile(model)"}

    times = round_robin({n: t.step for n, t in trainers.items()}, device, args.warmup, args.steps,
                        log=None if args.quick else lambda line: print(line, flush=True))
    for name, timing in times.items():
        stats = summarize(timing.wall)
        results[name].update(step_s=timing.wall, cpu_step_s=timing.cpu, **stats,
                             cpu_median_s=summarize(timing.cpu)["median_s"], tokens_per_s=s.tokens / stats["median_s"])
    del trainers

    method = PeakMemory(device).method
    if not args.no_memory:
        # Timing is over and each child measures only its own process, so they may run side by side.
        names = [n for n in times if not n.endswith(COMPILED)]  # a compiled row's memory is not measured
        for name, got in zip(names, run_children([child_argv(args, n) for n in names], parallel=os.cpu_count() or 1)):
            if isinstance(got, Exception):
                results[name]["memory_error"] = str(got)
                print(f"memory of {name} not measured: {got}")
            else:
                results[name].update(got)

    rss = device.type == "cpu" and not args.no_memory
    rows = []
    for name, r in results.items():
        if "skipped" in r:
            rows.append([name, "skipped: " + r["skipped"].split(" (")[0]])
            continue
        rows.append([name, r["config"], f"{r['params']:,}", f"{r['init_loss']:.3f}", f"{r['median_s'] * 1e3:.1f}",
                     f"{r['q1_s'] * 1e3:.0f}-{r['q3_s'] * 1e3:.0f}", f"{r['cpu_median_s'] * 1e3:.0f}",
                     f"{r['tokens_per_s']:,.0f}",
                     mib(r.get("peak_bytes")), mib(r.get("static_bytes"))] + ([mib(r.get("rss_peak_bytes"))] * rss))
    print()
    print(table(["impl", "config", "params", "init loss", "ms/step", "IQR ms", "CPU ms", "tokens/s", "peak MiB",
                 "static MiB"]
                + ["RSS MiB"] * rss, rows))
    print("ms/step: median wall time of a step; IQR: its interquartile range; CPU ms: median process CPU "
          "time of a step (all threads; less sensitive to other load on the machine than wall time)")
    if not args.no_memory:
        print(f"peak MiB: {method}, one fresh process per implementation, model build + {CHILD_STEPS} steps; "
              f"static MiB: weights + grads + AdamW moments (the rest of the peak is activations and temporaries)"
              + ("; RSS MiB: growth of the resident-set high-water mark, a cross-check that includes "
                 "allocator slack" if rss else ""))
    print()

    ratios = [ratio_line(c, results) for c in COMPARISONS]
    for r in ratios:
        if r["ratio"] is None:
            print(f"ratio {r['comparison']}: {r['ours']} vs {' / '.join(r['peers'])}: n/a (not measured)")
            continue
        against = "fastest of " + " / ".join(r["peers"]) + f" = {r['peer']}" if len(r["peers"]) > 1 else r["peer"]
        mem = f"; peak memory {r['ours']}/{r['peer']} {r['memory_ratio']:.2f}x" if r["memory_ratio"] else ""
        print(f"ratio {r['comparison']}: {r['ours']} vs {against}: {r['ratio']:.2f}x tokens/s "
              f"(over all rounds {r['all_rounds_ratio']:.2f}x; per-round range {r['paired_min']:.2f}-"
              f"{r['paired_max']:.2f}; by CPU time {r['cpu_ratio']:.2f}x){mem}")
    print("summary: " + "; ".join(
        f"{r['comparison']} {r['ours']}/{r['peer'] or 'n/a'} = "
        + ("n/a" if r["ratio"] is None else f"{r['ratio']:.3f}x ({'meets' if r['ratio'] >= 1.0 else 'below'} 1.0x target)")
        for r in ratios))

    if args.json:
        save_json(args.json, {"shape": asdict(s), "machine": info, "warmup": args.warmup, "rounds": args.steps,
                              "quick": args.quick, "memory_method": None if args.no_memory else method,
                              "results": results, "ratios": ratios})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
