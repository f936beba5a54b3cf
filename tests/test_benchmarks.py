"""The training benchmark runs end to end and reports every comparison (structure only: no speed bound)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
