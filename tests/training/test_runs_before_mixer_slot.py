"""Run directories written before the layer's mixer slot was renamed (``self_attn`` -> ``mixer``) still
restore, generate, report and resume. tests/fixtures/README.md says how each was made; every test
works on a copy in tmp_path, so the fixtures are never written."""
import csv
import hashlib
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from arch_zoo.cli import main
from arch_zoo.experiment import load
from arch_zoo.data.tokenizers import load_tokenizer
from arch_zoo.generation import generate
from arch_zoo.models import build_model
from arch_zoo.training.restore import prompt_ids, restore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
COMPLETED = FIXTURES / "run_before_mixer_slot"  # 6 steps of 6
PAUSED = FIXTURES / "run_before_mixer_slot_paused"  # the same run asked for 9 steps, paused at step 6
CKPT = "checkpoints/last.ckpt"


def _copy(fixture: Path, tmp_path: Path) -> Path:
    shutil.copytree(fixture, tmp_path / fixture.name)
    return tmp_path / fixture.name


def _digest(directory: Path) -> dict:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _raw(fixture: Path) -> dict:
    return torch.load(fixture / CKPT, map_location="cpu", weights_only=True)


def _by_hand(state: dict) -> dict:
    """The checkpoint's tensors under today's names, renamed here rather than by the layer's hook."""
    return {k.removeprefix("model.").replace(".self_attn.", ".mixer."): v for k, v in state.items()}


def _hand_model(fixture: Path):
    cfg = load(fixture / "config.yaml")
    tokenizer = load_tokenizer(fixture)
    model = build_model(cfg.model, tokenizer.vocab_size)
    hand = _by_hand(_raw(fixture)["state_dict"])
    with torch.no_grad():  # copied tensor by tensor: no load_state_dict, so no hook
        for name, tensor in model.state_dict(keep_vars=True).items():
            tensor.copy_(hand.pop(name))
    assert not hand, hand  # every checkpoint tensor found its place
    return cfg, model.eval(), tokenizer


def _reference_logits(t: dict, ids: torch.Tensor, heads: int = 2, eps: float = 1e-6, base: float = 1e4):
    """The fixture's model (pre-RMSNorm, RoPE on halves, causal softmax attention, GELU MLP, tied head)
    written out in float64 over the raw checkpoint tensors, read by their old names."""
    t = {k.removeprefix("model."): v.double() for k, v in t.items()}

    def rms(x, w):
        return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    x = t["embed.weight"][ids]
    b, n, d = x.shape
    hd = d // heads
    angles = torch.arange(n, dtype=torch.float64)[:, None] * base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    cos, sin = angles.cos(), angles.sin()

    def rope(u):
        u1, u2 = u[..., : hd // 2], u[..., hd // 2:]
        return torch.cat((u1 * cos - u2 * sin, u2 * cos + u1 * sin), -1)

    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    for i in range(2):
        p = f"decoder.layers.{i}."
        h = rms(x, t[p + "self_attn.norm.weight"])
        qkv = h @ t[p + "self_attn.sublayer.qkv.weight"].T + t[p + "self_attn.sublayer.qkv.bias"]
        q, k, v = (u.reshape(b, n, heads, hd).transpose(1, 2) for u in qkv.split(d, -1))
        scores = (rope(q) @ rope(k).transpose(-1, -2) / math.sqrt(hd)).masked_fill(future, -math.inf)
        mixed = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
        x = x + mixed @ t[p + "self_attn.sublayer.out.weight"].T + t[p + "self_attn.sublayer.out.bias"]
        h = rms(x, t[p + "ffn.norm.weight"])
        up = F.gelu(h @ t[p + "ffn.sublayer.up.weight"].T + t[p + "ffn.sublayer.up.bias"])
        x = x + up @ t[p + "ffn.sublayer.down.weight"].T + t[p + "ffn.sublayer.down.bias"]
    return rms(x, t["decoder.final_norm.weight"]) @ t["head.proj.weight"].T


@pytest.mark.parametrize("fixture", [COMPLETED, PAUSED], ids=lambda p: p.name)
def test_the_fixtures_hold_the_earlier_names(fixture):
    keys = list(_raw(fixture)["state_dict"])
    assert sum(".self_attn." in k for k in keys) == 2 * 5 and not any(".mixer." in k for k in keys)
    for name in ("config.yaml", "status.json", "summary.json"):  # nothing tied to the machine that wrote them
        if (fixture / name).exists():
            assert "/tmp/" not in (fixture / name).read_text()


@pytest.mark.parametrize("fixture", [COMPLETED, PAUSED], ids=lambda p: p.name)
def test_an_earlier_run_restores_to_the_function_its_tensors_compute(fixture, tmp_path):
    run = _copy(fixture, tmp_path)
    cfg, model, tokenizer = restore(run)
    state = _raw(fixture)["state_dict"]
    assert set(model.state_dict()) == set(_by_hand(state))
    ids = torch.randint(1, tokenizer.vocab_size, (3, 17))
    with torch.no_grad():
        got = model(ids).logits.double()
    torch.testing.assert_close(got, _reference_logits(state, ids), rtol=0, atol=1e-5)
    again = build_model(cfg.model, tokenizer.vocab_size)  # torch.load + load_state_dict, strict, old names
    result = again.load_state_dict({k.removeprefix("model."): v for k, v in state.items()}, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    for name, tensor in again.state_dict().items():
        torch.testing.assert_close(tensor, model.state_dict()[name], rtol=0, atol=0)
    assert _digest(run) == _digest(fixture)


@pytest.mark.parametrize("strategy", [["--strategy", "greedy"], ["--strategy", "sample", "--seed", "5"],
                                      ["--strategy", "beam", "--beams", "3"]], ids=lambda s: s[1])
def test_an_earlier_run_generates_what_its_tensors_generate(strategy, tmp_path, capsys):
    run = _copy(COMPLETED, tmp_path)
    prompt = "def get(self"
    assert main(["generate", str(run), "--prompt", prompt, "--max-new-tokens", "12", *strategy]) == 0
    printed = capsys.readouterr().out.rstrip("\n")
    cfg, model, tokenizer = _hand_model(COMPLETED)
    extra = {"sample": {"seed": 5}, "beam": {"beams": 3}}.get(strategy[1], {})
    out = generate(model, [prompt_ids(cfg, tokenizer, prompt)], strategy=strategy[1], max_new_tokens=12,
                   eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id, **extra)
    assert printed == tokenizer.decode(out.to_lists()[0][0])
    assert _digest(run) == _digest(COMPLETED)


def test_an_earlier_run_reports_the_metrics_it_recorded(tmp_path, capsys):
    run = _copy(COMPLETED, tmp_path)
    assert main(["report", str(run), "--out", str(tmp_path / "report"), "--format", "csv", "--quiet"]) == 0
    rows = pd.read_csv(tmp_path / "report" / "runs.csv")
    assert len(rows) == 1 and rows["status"][0] == "completed" and rows["step"][0] == 6
    with open(COMPLETED / "metrics.csv") as f:
        last_val = [r for r in csv.DictReader(f) if r["val/loss"]][-1]
    summary = json.loads((COMPLETED / "summary.json").read_text())
    assert rows["val/loss"][0] == summary["final"]["val/loss"]
    assert rows["val/loss"][0] == pytest.approx(float(last_val["val/loss"]), rel=1e-6)  # float32 in the csv
    assert rows["params"][0] == sum(p.numel() for p in _hand_model(COMPLETED)[1].parameters()) == 5952


def test_an_earlier_paused_run_resumes_from_step_6_with_its_optimizer_state(tmp_path):
    run = _copy(PAUSED, tmp_path)
    assert main(["train", str(run / "config.yaml"), "--out", str(run), "--quiet"]) == 0
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "completed" and status["step"] == 9
    assert [(a["from_step"], a["step"]) for a in status["attempts"]] == [(0, 6), (6, 9)]
    with open(run / "metrics.csv") as f:
        val = [(int(r["step"]), float(r["val/loss"])) for r in csv.DictReader(f) if r.get("val/loss")]
    with open(PAUSED / "metrics.csv") as f:
        before = [(int(r["step"]), float(r["val/loss"])) for r in csv.DictReader(f) if r.get("val/loss")]
    assert [s for s, _ in val] == [3, 6, 9] and val[:2] == before  # the earlier rows kept, one more validation
    ckpt = torch.load(run / CKPT, map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 9
    assert any(".mixer." in k for k in ckpt["state_dict"]) and not any(".self_attn." in k for k in ckpt["state_dict"])
    # Adam counts its steps per parameter: 9 = the 6 restored from the earlier checkpoint + 3 taken now
    steps = {float(s["step"]) for s in ckpt["optimizer_states"][0]["state"].values()}
    assert steps == {9.0}
    # The optimizer's state is matched by position: its groups hold the same parameters in the same order as
    # the earlier version's (the completed fixture's summary names them), today's names read with the old slot's
    old = json.loads((COMPLETED / "summary.json").read_text())["optimizer"]["groups"]
    new = json.loads((run / "summary.json").read_text())["optimizer"]["groups"]
    assert [[n.replace(".mixer.", ".self_attn.") for n in g["names"]] for g in new] == [g["names"] for g in old]
    assert [len(g["params"]) for g in ckpt["optimizer_states"][0]["param_groups"]] == [len(g["names"]) for g in old]
    before = _raw(PAUSED)["optimizer_states"][0]["state"]
    assert {i: s["exp_avg"].shape for i, s in before.items()} == \
        {i: s["exp_avg"].shape for i, s in ckpt["optimizer_states"][0]["state"].items()}
