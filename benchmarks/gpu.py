"""GPU training throughput and MFU of arch_zoo against Hugging Face GPT-2 and Llama (and litgpt), side by side.

One training step is forward (bf16 autocast), cross-entropy, backward and a fused AdamW step, each
model compiled with ``torch.compile``; random weights, dropout off, tied embeddings everywhere.
Shape: vocab 32768, d_model 1024, 16 heads, 12 layers, d_ff 4096, seq 1024, batch 8.

* gpt-style: arch_zoo (pre-LN, learned positions, GELU, biases) vs ``GPT2LMHeadModel`` (sdpa).
* llama-style: arch_zoo (RoPE, RMSNorm, SwiGLU, no biases) vs ``LlamaForCausalLM`` (sdpa) and
  litgpt's ``GPT`` with a Llama config if litgpt is importable; the ratio is against the faster.

Ratio = arch_zoo tokens/s / peer tokens/s (> 1: arch_zoo faster). Targets: >= 1.0x the faster peer,
and >= 45% MFU on an H100/H200-class GPU. MFU counts, for every model of a comparison, the same
analytic training FLOPs/token (3 x ``arch-zoo describe``'s forward count of the arch_zoo model)
against the GPU's datasheet peak (arch_zoo/models/mfu.py).

Without a CUDA GPU it prints one line and exits 0; ``--device cpu --tiny`` runs the same code path
at a tiny shape without compiling, as a smoke test (its numbers mean nothing).

Usage: python benchmarks/gpu.py [--steps N] [--batch B] [--no-compile] [--precision bf16|fp32] [--json OUT]
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict, replace
from typing import Dict

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # common.py and train_step.py, and arch_zoo from this checkout
from common import (PeakMemory, describe_machine, machine_info, mib, round_robin, save_json,  # noqa: E402
                    summarize, table)
from train_step import (IMPLS as CPU_IMPLS, Comparison, Impl, Shape, Trainer, available, n_params,  # noqa: E402
                        ratio_line)

from arch_zoo.models.mfu import device_peak, mfu, train_flops_per_token  # noqa: E402

FULL = Shape(vocab=32768, d_model=1024, n_layers=12, n_heads=16, d_ff=4096, seq=1024, batch=8)
TINY = Shape(vocab=256, d_model=64, n_layers=2, n_heads=4, d_ff=256, seq=64, batch=2)


def hf_gpt2(s: Shape) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=s.vocab, n_positions=s.seq, n_embd=s.d_model, n_layer=s.n_layers, n_head=s.n_heads,
                     n_inner=s.d_ff, activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     layer_norm_epsilon=1e-5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
                     attn_implementation="sdpa")
    model = GPT2LMHeadModel(cfg)
    assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
    return model


def litgpt_llama(s: Shape) -> nn.Module:
    from litgpt.config import Config
    from litgpt.model import GPT

    cfg = Config(block_size=s.seq, vocab_size=s.vocab, padded_vocab_size=s.vocab, n_layer=s.n_layers,
                 n_head=s.n_heads, n_query_groups=s.n_heads, n_embd=s.d_model, rotary_percentage=1.0,
                 parallel_residual=False, bias=False, norm_class_name="RMSNorm", norm_eps=1e-6,
                 mlp_class_name="LLaMAMLP", intermediate_size=s.d_ff)
    model = GPT(cfg)
    model.lm_head.weight = model.transformer.wte.weight  # tied, like the others
    return model


IMPLS: Dict[str, Impl] = {i.name: i for i in [
    CPU_IMPLS["arch_zoo[gpt]"],
    Impl("hf-gpt2", "GPT2LMHeadModel, sdpa", hf_gpt2, lambda m, x: m(input_ids=x, use_cache=False).logits,
         "transformers"),
    CPU_IMPLS["arch_zoo[llama]"],
    CPU_IMPLS["hf-llama"],
    Impl("litgpt", "litgpt GPT, Llama config", litgpt_llama, lambda m, x: m(x), "litgpt"),
]}
COMPARISONS = [
    Comparison("gpt-style", "arch_zoo[gpt]", ("hf-gpt2",)),
    Comparison("llama-style", "arch_zoo[llama]", ("hf-llama", "litgpt")),
]

# aten ops that scaled_dot_product_attention dispatches to, by the kernel they are.
SDPA_OPS = {"aten::_scaled_dot_product_flash_attention": "flash",
            "aten::_scaled_dot_product_efficient_attention": "mem-efficient",
            "aten::_scaled_dot_product_cudnn_attention": "cudnn",
            "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (cpu)",
            "aten::_scaled_dot_product_attention_math": "math"}
# CUDA kernel names, in case a compiled graph calls the kernels without an aten op the profiler sees.
SDPA_KERNEL_NAMES = {"flash_fwd": "flash", "flash_bwd": "flash", "fmha_cutlass": "mem-efficient"}


class GPUTrainer(Trainer):
    """train_step's Trainer in bf16 autocast, with a fused AdamW on CUDA and an optionally compiled model."""

    def __init__(self, impl: Impl, s: Shape, device: torch.device, bf16: bool, compile: bool):
        super().__init__(impl, s, device)
        self.device, self.bf16 = device, bf16
        self.params = n_params(self.model)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.01,
                                     fused=device.type == "cuda")
        if compile:
            self.model = torch.compile(self.model)

    def loss(self) -> torch.Tensor:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            return super().loss()


def sdpa_kernels(trainer: GPUTrainer) -> str:
    """Which SDPA kernels one training step ran, read from the profiler's aten ops."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if trainer.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        trainer.step()
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)
    seen = {e.key for e in prof.key_averages()}
    kernels = {kernel for op, kernel in SDPA_OPS.items() if op in seen}
    kernels |= {kernel for part, kernel in SDPA_KERNEL_NAMES.items() if any(part in name for name in seen)}
    return ", ".join(sorted(kernels)) or "none (no SDPA call)"


def enabled_sdpa_backends() -> str:
    if not torch.cuda.is_available():
        return "n/a (CPU)"
    b = torch.backends.cuda
    flags = {"flash": b.flash_sdp_enabled(), "mem-efficient": b.mem_efficient_sdp_enabled(),
             "math": b.math_sdp_enabled(), "cudnn": getattr(b, "cudnn_sdp_enabled", lambda: False)()}
    return ", ".join(k for k, on in flags.items() if on)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--tiny", action="store_true", help="tiny shape, no compile: a smoke test, not a measurement")
    p.add_argument("--steps", type=int, default=None, help="timed round-robin rounds (default 20; 2 with --tiny)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps each, compilation included "
                   "(default 3; 1 with --tiny)")
    p.add_argument("--batch", type=int, default=None, help="sequences per step (default 8; 2 with --tiny)")
    p.add_argument("--precision", default="bf16", choices=("bf16", "fp32"), help="bf16 autocast or plain fp32")
    p.add_argument("--no-compile", action="store_true", help="run eagerly")
    p.add_argument("--json", metavar="OUT", help="also write the results here")
    args = p.parse_args(argv)
    if args.device == "cpu" and not args.tiny:
        p.error("--device cpu runs only the --tiny smoke test; benchmarks/train_step.py is the CPU benchmark")
    args.steps = args.steps if args.steps is not None else (2 if args.tiny else 20)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 3)
    if args.steps < 1 or args.warmup < 1 or (args.batch is not None and args.batch < 1):
        p.error("--steps, --warmup and --batch must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"benchmarks/gpu.py: skipped, no CUDA GPU (torch {torch.__version__}); "
              "`--device cpu --tiny` runs a smoke test")
        return 0
    device = torch.device(args.device)
    base = TINY if args.tiny else FULL
    s = replace(base, batch=args.batch or base.batch)
    bf16 = args.precision == "bf16"
    compile = not args.no_compile and not (args.tiny and device.type == "cpu")
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32 for whatever autocast leaves in fp32
    peak = device_peak(device, "bf16-mixed" if bf16 else "32-true")

    info = machine_info(device)
    print(f"gpu train step: forward + cross-entropy + backward + AdamW, {'bf16 autocast' if bf16 else 'fp32'}, "
          f"{'compiled' if compile else 'eager'}, dropout 0, tied embeddings"
          + (" [--tiny: smoke test, numbers are meaningless]" if args.tiny else ""))
    print(f"shape: vocab {s.vocab}, d_model {s.d_model}, layers {s.n_layers}, heads {s.n_heads}, d_ff {s.d_ff}, "
          f"seq {s.seq}, batch {s.batch} ({s.tokens} tokens/step)")
    print(describe_machine(info))
    print(f"peak: {'n/a' if peak.flops is None else f'{peak.flops / 1e12:,.4g} TFLOP/s'} ({peak.source}); "
          f"SDPA backends enabled: {enabled_sdpa_backends()}")

    flops: Dict[str, float] = {}  # every member of a comparison is credited its arch_zoo model's FLOPs/token
    for comp in COMPARISONS:
        with torch.device("meta"):  # shapes are all the count needs
            train_flops = train_flops_per_token(IMPLS[comp.ours].build(s), s.seq)
        flops.update({name: train_flops for name in (comp.ours, *comp.peers)})

    results: Dict[str, dict] = {}
    trainers: Dict[str, GPUTrainer] = {}
    for name, impl in IMPLS.items():
        missing = available(impl)
        if missing:
            results[name] = {"skipped": missing}
            print(f"skipping {name}: {missing}")
            continue
        # Built and warmed up one at a time, the others idle (their grads freed), so the peak over
        # this window is this model's own: weights, AdamW state, activations, compile workspaces.
        meter = PeakMemory(device)
        meter.start()
        trainers[name] = GPUTrainer(impl, s, device, bf16, compile)
        for _ in range(args.warmup):
            trainers[name].step()
        results[name] = {"config": impl.config, "params": trainers[name].params, **meter.stop()}
        results[name].pop("rss_peak_bytes", None)  # other models share the process: not this one's
        print(f"built and warmed up {name}", flush=True)

    times = round_robin({n: t.step for n, t in trainers.items()}, device, 0, args.steps,
                        log=None if args.tiny else lambda line: print(line, flush=True))
    for name, timing in times.items():
        stats = summarize(timing.wall)
        tps = s.tokens / stats["median_s"]
        results[name].update(step_s=timing.wall, cpu_step_s=timing.cpu, **stats, tokens_per_s=tps,
                             cpu_median_s=summarize(timing.cpu)["median_s"], train_flops_per_token=flops[name],
                             mfu=mfu(flops[name], tps, peak.flops), sdpa_kernel=sdpa_kernels(trainers[name]))
    del trainers

    rows = []
    for name, r in results.items():
        if "skipped" in r:
            rows.append([name, "skipped: " + r["skipped"].split(" (")[0]])
            continue
        rows.append([name, r["config"], f"{r['params']:,}", f"{r['median_s'] * 1e3:.1f}", f"{r['tokens_per_s']:,.0f}",
                     "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%", mib(r.get("peak_bytes")),
                     r["sdpa_kernel"]])
    print()
    print(table(["impl", "config", "params", "ms/step", "tokens/s", "MFU", "peak MiB", "SDPA kernel"], rows))
    print(f"ms/step: median of {args.steps} round-robin rounds after {args.warmup} warmup steps each; MFU: "
          "3 x describe's forward FLOPs/token x tokens/s / peak; peak MiB: "
          f"{PeakMemory(device).method}, over building + warmup")
    print()
    ratios = [ratio_line(c, results) for c in COMPARISONS]
    for r in ratios:
        ours = results.get(r["ours"], {})
        mfu_text = "n/a" if ours.get("mfu") is None else f"{100 * ours['mfu']:.1f}%"
        if r["ratio"] is None:
            print(f"ratio {r['comparison']}: {r['ours']} vs {' / '.join(r['peers'])}: n/a (not measured)")
            continue
        print(f"ratio {r['comparison']}: {r['ours']} vs {r['peer']} (faster of {' / '.join(r['peers'])}): "
              f"{r['ratio']:.2f}x tokens/s (per-round range {r['paired_min']:.2f}-{r['paired_max']:.2f}); "
              f"{r['ours']} MFU {mfu_text}")
    print("targets: >= 1.0x the faster peer in tokens/s; >= 45% MFU on an H100/H200-class GPU")

    if args.json:
        save_json(args.json, {"shape": asdict(s), "machine": info, "precision": args.precision, "compiled": compile,
                              "warmup": args.warmup, "rounds": args.steps, "tiny": args.tiny,
                              "peak_flops": peak.flops, "peak_source": peak.source,
                              "sdpa_backends_enabled": enabled_sdpa_backends(), "results": results, "ratios": ratios})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
