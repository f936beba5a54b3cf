"""The training benchmark runs end to end and reports every comparison (structure only: no speed bound)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def test_train_step_quick_reports_all_ratios(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("x_transformers")
    out_json = tmp_path / "train_step.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_step.py"), "--quick", "--device", "cpu",
                           "--threads", "1", "--no-memory", "--json", str(out_json)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout

    assert re.search(r"^machine: .+torch \S+, \d+ threads", out, re.M), out
    for impl in ("arch_zoo[gpt]", "torch.nn", "x-transformers", "arch_zoo[llama]", "hf-llama"):
        row = re.search(rf"^{re.escape(impl)}\s+.*$", out, re.M)
        assert row and "skipped" not in row.group(0), f"no measured row for {impl}:\n{out}"
    ratio = r"\d+\.\d+x"
    assert re.search(rf"^ratio gpt-style: arch_zoo\[gpt\] vs fastest of torch\.nn / x-transformers = "
                     rf"(torch\.nn|x-transformers): {ratio} tokens/s", out, re.M), out
    assert re.search(rf"^ratio llama-style: arch_zoo\[llama\] vs hf-llama: {ratio} tokens/s", out, re.M), out
    assert re.search(rf"^summary: gpt-style arch_zoo\[gpt\]/(torch\.nn|x-transformers) = {ratio} .*; "
                     rf"llama-style arch_zoo\[llama\]/hf-llama = {ratio} ", out, re.M), out

    data = json.loads(out_json.read_text())
    assert [r["comparison"] for r in data["ratios"]] == ["gpt-style", "llama-style"]
    for r in data["ratios"]:
        assert r["ratio"] > 0 and r["all_rounds_ratio"] > 0 and r["peer"] in r["peers"]
    for name, res in data["results"].items():
        assert res["tokens_per_s"] > 0 and res["params"] > 0, name


def test_gpu_benchmark_tiny_cpu_smoke_reports_ratios_mfu_and_sdpa_kernel(tmp_path):
    """README "GPU": `python benchmarks/gpu.py` prints tokens/s, the ratio vs the faster peer, MFU, peak
    memory and the SDPA kernel; `--device cpu --tiny` runs that code path here (no speed asserted)."""
    pytest.importorskip("transformers")
    out_json = tmp_path / "gpu.json"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # the CPU GEMM probe's cache
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--device", "cpu", "--tiny",
                           "--precision", "fp32", "--steps", "1", "--json", str(out_json)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"^peak: [\d.,]+ TFLOP/s \(CPU GEMM probe \(.+fp32\), measured now[^)]*\)", out, re.M), out
    for impl in ("arch_zoo[gpt]", "hf-gpt2", "arch_zoo[llama]", "hf-llama"):
        assert re.search(rf"^{re.escape(impl)}\s+.*\d%\s+[\d.]+\s+(flash \(cpu\)|math)$", out, re.M), out
    assert re.search(r"^ratio gpt-style: arch_zoo\[gpt\] vs hf-gpt2 .*: \d+\.\d+x tokens/s .* MFU \d+\.\d%$",
                     out, re.M), out
    assert re.search(r"^ratio llama-style: arch_zoo\[llama\] vs (hf-llama|litgpt) \(faster of hf-llama / litgpt\): "
                     r"\d+\.\d+x tokens/s", out, re.M), out
    assert (tmp_path / "cache" / "arch_zoo" / "gemm_probe.json").exists()

    data = json.loads(out_json.read_text())
    assert data["compiled"] is False and data["tiny"] and data["peak_flops"] > 0
    for name in ("arch_zoo[gpt]", "hf-gpt2", "arch_zoo[llama]", "hf-llama"):
        r = data["results"][name]
        assert r["tokens_per_s"] > 0 and r["peak_bytes"] > 0 and r["sdpa_kernel"] in ("flash (cpu)", "math")
        assert r["mfu"] == pytest.approx(r["train_flops_per_token"] * r["tokens_per_s"] / data["peak_flops"])
    # same shape, same work: every member of a comparison is credited the same FLOPs/token
    res = data["results"]
    assert res["hf-gpt2"]["train_flops_per_token"] == res["arch_zoo[gpt]"]["train_flops_per_token"]


def test_gpu_benchmark_without_a_gpu_skips_in_one_line():
    """README "GPU": without a CUDA GPU the benchmark says so in one line and exits 0."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the benchmark would run for real")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py")], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines() == [proc.stdout.strip()] and "skipped, no CUDA GPU" in proc.stdout


@pytest.mark.slow
def test_train_step_compile_adds_compiled_rows_and_takes_each_sides_fastest_mode(tmp_path):
    """README: "`benchmarks/train_step.py --compile` adds compiled rows for arch_zoo[llama] and
    hf-llama; the llama-style ratio takes each side in its fastest mode (eager or compiled)"."""
    pytest.importorskip("transformers")
    out_json = tmp_path / "ts.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_step.py"), "--quick", "--device", "cpu",
                           "--threads", "1", "--no-memory", "--compile", "--json", str(out_json)],
                          capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    data = json.loads(out_json.read_text())
    res = data["results"]
    for name in ("arch_zoo[llama] +compile", "hf-llama +compile"):
        assert res[name]["tokens_per_s"] > 0 and res[name]["init_loss"] == res[name.split(" +")[0]]["init_loss"]
    llama = next(r for r in data["ratios"] if r["comparison"] == "llama-style")
    mine = max(("arch_zoo[llama]", "arch_zoo[llama] +compile"), key=lambda n: res[n]["tokens_per_s"])
    peer = max(("hf-llama", "hf-llama +compile"), key=lambda n: res[n]["tokens_per_s"])
    assert (llama["ours"], llama["peer"]) == (mine, peer)
    assert llama["ratio"] == pytest.approx(res[mine]["tokens_per_s"] / res[peer]["tokens_per_s"])
    assert re.search(rf"^ratio llama-style: {re.escape(mine)} vs {re.escape(peer)}: \d+\.\d+x", proc.stdout, re.M)


def test_eval_share_times_exact_match_decoding_and_agrees_with_the_runs_own_record(tmp_path):
    """benchmarks/eval_share.py: its wrapper's decoding seconds (an independent timer around
    objectives.greedy_outputs) equal what the run records in summary.json, and the share is that over
    the run's wall time."""
    out = tmp_path / "share.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "eval_share.py"), "--config",
                           "configs/experiments/copy.yaml", "--modes", "eager", "--json", str(out), "--",
                           "train.max_steps=4", "train.val_every=2", "train.exact_match_samples=16"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())["results"]["eager"]
    assert result["calls"] == 3  # val at steps 2 and 4, then test
    assert result["used"] == "eager"
    assert result["decode_s"] > 0
    # the run's timer wraps the call the benchmark's timer wraps: never less (but for its rounding to 1 ms), more
    # only by the call around it and whatever the scheduler took between the two clocks on a loaded machine
    assert result["decode_s"] - 5e-4 <= result["recorded_decode_s"] <= result["decode_s"] * 1.1 + 0.01
    assert result["share"] == pytest.approx(result["decode_s"] / result["wall_s"])
    assert "eager" in proc.stdout and "share of the run" in proc.stdout


def _mixers(tmp_path, what, *extra):
    out_json = tmp_path / f"mixers_{what}.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mixers.py"), what, "--quick", "--threads", "1",
                           "--quiet", "--json", str(out_json), *extra], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(out_json.read_text())


def _bench_module(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mixers_train_reports_each_mixer_against_its_peer_layer_at_the_same_shape(tmp_path):
    """benchmarks/mixers.py train: every pair of benchmarks/mixer_pairs.py (arch_zoo's mixers against HF's own
    layers, or the same layer at chunk 1 where HF has none), each with the same parameter count (same shape, so
    the same work), and the ratio is tokens/s over tokens/s."""
    pytest.importorskip("transformers")
    out, data = _mixers(tmp_path, "train")
    assert re.search(r"^machine: .+torch \S+, 1 threads", out, re.M), out
    res = data["results"]
    assert list(data["ratios"]) == list(_bench_module("mixer_pairs").PAIRS)
    for mixer, r in data["ratios"].items():
        ours, peer = res[r["ours"]], res[r["peer"]]
        assert ours["params"] == peer["params"] > 0, mixer
        assert r["ratio"] == pytest.approx(ours["tokens_per_s"] / peer["tokens_per_s"])
        assert r["cpu_ratio"] == pytest.approx(peer["cpu_s"] / ours["cpu_s"])
        shape = data["shape"]
        assert ours["tokens_per_s"] == pytest.approx(shape["batch"] * shape["seq"] / ours["wall"]["median_s"])
        assert re.search(rf"^ratio {re.escape(mixer)}: .* = {r['ratio']:.2f}x tokens/s "
                         rf"\({r['cpu_ratio']:.2f}x by CPU time\)$", out, re.M), out
    assert re.search(r"^target \(arch_zoo >= 1.0x its peer\): (met|missed: .+)$", out, re.M), out


def test_mixers_train_pairs_on_shared_weights_compute_one_function():
    """A pair said to share weights (HF's module loaded from arch_zoo's through the interop mapping, or the
    same layer at chunk 1) gives the same outputs and the same input gradient: the benchmark times two ways
    of computing one function (it checks the outputs too, before timing)."""
    pytest.importorskip("transformers")
    pairs = _bench_module("mixer_pairs")
    shared = [name for name, pair in pairs.PAIRS.items() if pair.same_weights]
    assert {"mamba2_bamba", "kda", "rg_lru", "mlstm", "short_conv", "rwkv7", "gated_deltaproduct", "lightning",
            "parallel"} <= set(shared)
    for name in shared:
        ours, theirs, call = pairs.PAIRS[name].build(32, True)
        x = torch.randn(2, 32, 32)
        got, want = [], []
        for fn, into in ((lambda t: ours(t, pairs.ours_inputs()), got), (call, want)):
            leaf = x.clone().requires_grad_(True)
            out = fn(leaf)
            out.pow(2).sum().backward()
            into += [out.detach(), leaf.grad]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, msg=name)


def test_mixers_benchmark_refuses_an_unknown_mixer_in_one_line():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mixers.py"), "decode", "--mixers", "kda", "nope"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "--mixers nope: decode takes attention, gated_deltanet" in proc.stderr.strip().splitlines()[-1]


def test_mixers_decode_reports_tokens_per_s_at_each_context_for_matched_mixers(tmp_path):
    """benchmarks/mixers.py decode: one row per context length asked for, every mixer timed in each, and
    the mixers' printed parameter counts are those of the layers built here."""
    out, data = _mixers(tmp_path, "decode", "--lengths", "8", "24", "--steps", "2")
    assert [r["context"] for r in data["results"]] == [8, 24] and data["steps"] == 2
    names = list(_bench_module("mixers").DECODE_MIXERS)
    for row in data["results"]:
        assert list(row["tokens_per_s"]) == names
        assert all(row["tokens_per_s"][n] > 0 and row["cpu_s_per_token"][n] > 0 for n in names)
    from arch_zoo.components.mixers import MIXERS
    from arch_zoo.config.loading import model_config

    for name, mixer in data["mixers"].items():  # an independent build of the same layer
        cfg = model_config({"d_model": data["d_model"], "n_heads": 4, "n_layers": 1, "bias": False, "mixer": mixer})
        n = sum(p.numel() for p in MIXERS.build(cfg.mixer, cfg, None).parameters())
        assert data["layer_params"][name] == n
        assert re.search(rf"^mixer params per layer {name}: {n:,} ", out, re.M), out
    for n in names:
        assert re.search(rf"^cost growth {n}: \d+\.\d+x per token from context 8 to 24", out, re.M), out


def test_mixers_length_reports_training_tokens_per_s_at_each_length_with_the_same_tokens_a_step(tmp_path):
    """benchmarks/mixers.py length: one row per sequence length, each step holding --tokens tokens (batch x
    length), every mixer (the decode set and a GRU) timed at each; tokens/s is tokens over the median step;
    a --tokens that a length does not divide is one line and a non-zero exit."""
    out, data = _mixers(tmp_path, "length", "--lengths", "8", "32", "--tokens", "64")
    assert [(r["length"], r["batch"]) for r in data["results"]] == [(8, 8), (32, 2)]
    names = ["attention", "gated_deltanet", "mamba2", "lstm", "gru"]
    for row in data["results"]:
        assert list(row["tokens_per_s"]) == names
        assert all(row["tokens_per_s"][n] > 0 and row["cpu_s"][n] > 0 for n in names)
    first, last = data["results"]
    for n in names:
        growth = last["tokens_per_s"][n] / first["tokens_per_s"][n]
        assert re.search(rf"^tokens/s {n}: {growth:.2f}x at length 32 of its value at length 8$", out, re.M), out
    assert data["mixers"]["gru"]["name"] == "gru" and data["layer_params"]["gru"] > 0
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mixers.py"), "length", "--quick",
                          "--lengths", "8", "24", "--tokens", "64"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "--tokens 64 must be a multiple of every length" in bad.stderr


def test_mixers_benchmark_widths_match_attentions_parameters_within_ten_percent_at_the_benchmarked_width():
    """The decode and length comparisons are at matched parameters: at d_model 256 each mixer layer they build
    has within 10% of attention's parameters, which are 4 d_model^2 (q, k, v, o; no biases)."""
    from arch_zoo.components.mixers import MIXERS
    from arch_zoo.config.loading import model_config

    bench = _bench_module("mixers")
    d = bench.DECODE_D
    counts = {}
    for name, mixer in dict(bench.decode_mixers(d), gru={"name": "gru", "hidden_size": bench.matched_hidden("gru", d)}
                            ).items():
        cfg = model_config({"d_model": d, "n_heads": 4, "n_layers": 1, "bias": False, "mixer": mixer})
        counts[name] = sum(p.numel() for p in MIXERS.build(cfg.mixer, cfg, None).parameters())
    assert counts["attention"] == 4 * d * d
    for name, n in counts.items():
        assert abs(n / counts["attention"] - 1) <= 0.10, (name, n, counts["attention"])
