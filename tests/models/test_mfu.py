"""MFU: the GPU peak table, the arithmetic, and the cached CPU GEMM probe (issue 18 §2: "divided by the
device's peak for the run's precision: from a table of known GPUs, or on CPU from a GEMM probe
measured once and cached")."""
import json

import pytest
import torch

from arch_zoo.models import build_model
from arch_zoo.models import mfu as M
from arch_zoo.models.summary import flops_per_token


@pytest.mark.parametrize("name, precision, tflops, label", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.5, "H100 SXM"),
    ("NVIDIA H100 PCIe", "bf16", 756.5, "H100 PCIe"),
    ("NVIDIA H100 NVL", "tf32", 417.5, "H100 NVL"),
    ("NVIDIA H200", "bf16", 989.5, "H200 SXM"),
    ("NVIDIA H200 NVL", "fp16", 835.5, "H200 NVL"),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312, "A100"),
    ("NVIDIA A100-PCIE-40GB", "tf32", 156, "A100"),
    ("NVIDIA L4", "bf16", 121, "L4"),
    ("NVIDIA L40S", "bf16", 362.05, "L40S"),
    ("NVIDIA A10", "fp32", 31.2, "A10"),
    ("NVIDIA GeForce RTX 4090", "bf16", 165.2, "GeForce RTX 4090"),
    ("Tesla V100-SXM2-32GB", "fp16", 125, "V100 SXM2"),
    ("Tesla T4", "fp16", 65, "T4"),
])
def test_gpu_table_matches_names_as_torch_reports_them(name, precision, tflops, label):
    peak = M.gpu_peak(name, precision)
    assert peak.flops == pytest.approx(tflops * 1e12)
    assert peak.source.startswith(label + " datasheet")


def test_unknown_gpu_and_missing_precision_give_none_with_the_reason():
    peak = M.gpu_peak("NVIDIA Imaginary X9000", "bf16")
    assert peak.flops is None and "unknown GPU 'NVIDIA Imaginary X9000'" in peak.source
    v100 = M.gpu_peak("Tesla V100-SXM2-16GB", "bf16")  # Volta has no bf16 tensor cores
    assert v100.flops is None and "no bf16" in v100.source
    assert M.mfu(1e9, 1e3, None) is None


def test_lightning_precisions_map_to_matmul_dtypes_and_bad_ones_name_the_choices():
    assert [M.matmul_precision(p) for p in ("bf16-mixed", "16-mixed", "32-true", 32)] == ["bf16", "fp16", "fp32",
                                                                                          "fp32"]
    with pytest.raises(ValueError, match="precision 'int8'.*bf16-mixed"):
        M.matmul_precision("int8")


def test_mfu_arithmetic_against_a_hand_computed_example():
    # 2 layers, d_model 64, 4 heads, d_ff 256, vocab 100, no bias, seq 32, causal:
    # per layer: qkv 2*64*192 + out 2*64*64 + ffn 2*(2*64*256) = 24576 + 8192 + 65536 = 98304
    # attention: 4 * 64 per key * (33/2) keys = 4224 per layer; head: 2*64*100 = 12800
    # forward = 2*98304 + 2*4224 + 12800 = 217856; training = 3x = 653568 FLOPs/token
    model = build_model(dict(kind="decoder", d_model=64, n_layers=2, n_heads=4, d_ff=256, max_seq_len=32,
                             position="learned", norm="layernorm", ffn="gelu", bias=False, tie_embeddings=True), 100)
    assert flops_per_token(model, 32)["total"] == 217856
    assert M.train_flops_per_token(model, 32) == 653568
    # 10,000 tokens/s on a device with a 1e10 FLOP/s peak: 6.53568e9 / 1e10
    assert M.mfu(653568, 10_000, 1e10) == pytest.approx(0.653568)


def test_mfu_for_run_on_cpu_probes_once_then_reuses_the_cache(tmp_path, monkeypatch):
    calls = []
    real = M.measure_gemm
    monkeypatch.setattr(M, "measure_gemm", lambda dtype: calls.append(dtype) or real(dtype, max_size=256, repeats=2))
    monkeypatch.setattr(M, "cores_to_spare", lambda threads: True)  # an idle machine

    first = M.mfu_for_run(3e9, "cpu", "32-true", cache_dir=tmp_path)  # 3 GFLOP/s of training achieved
    assert calls == ["fp32"] and "measured now" in first["peak_source"]
    assert first["peak_flops"] > 0
    assert first["mfu"] == pytest.approx(3e9 / first["peak_flops"])
    cached = json.loads((tmp_path / "gemm_probe.json").read_text())
    key = M.probe_key("fp32")
    assert cached == {key: {"flops": first["peak_flops"], "settled": True}}
    assert f"{torch.get_num_threads()} threads" in key and torch.__version__ in key

    again = M.mfu_for_run(6e9, "cpu", "32-true", cache_dir=tmp_path)
    assert calls == ["fp32"], "the cached probe must be reused, not measured again"
    assert again["peak_flops"] == first["peak_flops"] and "cached in" in again["peak_source"]
    assert again["mfu"] == pytest.approx(2 * first["mfu"])

    two = M.mfu_for_run(6e9, "cpu", "32-true", cache_dir=tmp_path, n_devices=2)  # data parallel
    assert two["peak_flops"] == 2 * first["peak_flops"] and two["mfu"] == pytest.approx(first["mfu"])
    assert two["peak_source"].startswith("2 x CPU GEMM probe")

    M.mfu_for_run(3e9, "cpu", "bf16-mixed", cache_dir=tmp_path)  # another dtype: its own entry
    assert calls == ["fp32", "bf16"]
    assert set(json.loads((tmp_path / "gemm_probe.json").read_text())) == {key, M.probe_key("bf16")}


def test_a_probe_on_busy_cores_is_not_trusted_and_the_best_probe_is_kept(tmp_path, monkeypatch):
    """A probe slowed by other work measures the peak low, which would inflate every MFU after it:
    the cache keeps the highest probe and probes again until one ran with cores to spare."""
    probes = iter([2e10, 5e10, 3e10, 9e10])
    busy = iter([True, True, False])  # the first two probes ran on busy cores, the third did not
    monkeypatch.setattr(M, "measure_gemm", lambda dtype: next(probes))
    monkeypatch.setattr(M, "cores_to_spare", lambda threads: not next(busy))
    key = M.probe_key("fp32")
    path = tmp_path / "gemm_probe.json"

    first = M.cpu_peak("fp32", tmp_path)
    assert first.flops == 2e10 and "busy cores" in first.source
    assert json.loads(path.read_text())[key] == {"flops": 2e10, "settled": False}
    second = M.cpu_peak("fp32", tmp_path)  # probed again; higher, still busy
    assert second.flops == 5e10 and "best of this and earlier probes" in second.source
    third = M.cpu_peak("fp32", tmp_path)  # idle, but measured 3e10: the best so far stays
    assert third.flops == 5e10 and "busy" not in third.source
    assert json.loads(path.read_text())[key] == {"flops": 5e10, "settled": True}
    assert M.cpu_peak("fp32", tmp_path).flops == 5e10  # settled: the fourth probe (9e10) never runs
    assert next(probes) == 9e10

    old = tmp_path / "gemm_peak.json"  # what older arch_zoo caches (bare numbers): neither read nor written
    old.write_text(json.dumps({key: 1.0}))
    path.write_text(json.dumps({key: 4e10}))  # a malformed entry is no entry: probed again
    monkeypatch.setattr(M, "measure_gemm", lambda dtype: 1e10)
    monkeypatch.setattr(M, "cores_to_spare", lambda threads: True)
    assert M.cpu_peak("fp32", tmp_path).flops == 1e10
    assert json.loads(path.read_text())[key] == {"flops": 1e10, "settled": True}
    assert json.loads(old.read_text()) == {key: 1.0}


def test_cores_to_spare_reads_the_load_average_against_the_logical_cpus(monkeypatch):
    monkeypatch.setattr(M.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(M.os, "getloadavg", lambda: (1.0, 0.0, 0.0))  # the asking run itself
    assert M.cores_to_spare(1) and M.cores_to_spare(2)
    monkeypatch.setattr(M.os, "getloadavg", lambda: (2.5, 0.0, 0.0))  # two more busy threads
    assert not M.cores_to_spare(1)
    monkeypatch.setattr(M.os, "getloadavg", lambda: (1.9, 0.0, 0.0))
    assert M.cores_to_spare(1) and not M.cores_to_spare(2)


def test_other_device_types_and_unknown_precisions_have_no_peak_and_say_why():
    peak = M.device_peak("meta", "32-true")
    assert peak.flops is None and "'meta'" in peak.source
    peak = M.device_peak("cpu", "transformer-engine")
    assert peak.flops is None and "precision 'transformer-engine'" in peak.source
    assert M.gpu_peak("NVIDIA H100 80GB HBM3", "fp64").flops is None  # the table has no fp64 column


def test_mfu_module_needs_torch_alone():
    """Run summaries and benchmarks share it, and arch_zoo.models must import with torch alone."""
    from tests.conftest import run_with_torch_only

    proc = run_with_torch_only("from arch_zoo.models.mfu import mfu_for_run, gpu_peak\n"
                               "print(gpu_peak('NVIDIA H200', 'bf16').flops)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["989500000000000.0"]
