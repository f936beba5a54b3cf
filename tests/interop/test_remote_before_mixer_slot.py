"""A remote-code export written before the layer's mixer slot was renamed (``self_attn`` -> ``mixer``):
its own copy of the modelling file builds today's model, and transformers loads the tensors by key,
without load_state_dict's hooks. It still loads, in a fresh process, to the function its tensors compute."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from arch_zoo.generation import generate
from arch_zoo.models import build_model

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "remote_export_before_mixer_slot"


def _by_hand(export: Path):
    """The arch_zoo model of the export's config, its tensors renamed here (not by any hook or conversion)."""
    config = json.loads((export / "config.json").read_text())
    model = build_model(config["arch_zoo_model"], config["vocab_size"])
    tensors = {k.removeprefix("model.").replace(".self_attn.", ".mixer."): v
               for k, v in load_file(str(export / "model.safetensors")).items()}
    with torch.no_grad():
        for name, tensor in model.state_dict(keep_vars=True).items():
            tensor.copy_(tensors.pop(name) if name != "head.proj.weight" else model.embed.weight)  # tied: saved once
    assert not tensors, tensors
    return model.eval(), config


def test_an_earlier_remote_code_export_loads_in_transformers_to_its_tensors_function(tmp_path):
    export = tmp_path / "export"
    shutil.copytree(FIXTURE, export)
    keys = list(load_file(str(export / "model.safetensors")))
    assert sum(".self_attn." in k for k in keys) == 2 * 7 and not any(".mixer." in k for k in keys)
    model, config = _by_hand(export)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, config["vocab_size"], (3, 9), generator=g)
    right = torch.tensor([[1] * 9, [1] * 5 + [0] * 4, [1] * 2 + [0] * 7])
    job = {"dir": str(export), "auto_class": "AutoModelForCausalLM", "remote": True, "right": (ids, right),
           "left": (ids, right.flip(-1)), "prompts": [[5, 9, 14, 3], [7]], "new_tokens": 6}
    torch.save([job], tmp_path / "job.pt")
    subprocess.run([sys.executable, "-m", "tests.interop.hf_load", str(tmp_path / "job.pt"), str(tmp_path / "out.pt")],
                   cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf"),
                                              "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    got = torch.load(tmp_path / "out.pt")[str(export)]
    with torch.no_grad():
        for side in ("right", "left"):
            mask = job[side][1]
            ours = model(ids, mask).logits[mask.bool()]
            assert torch.isfinite(got[side]).all()
            torch.testing.assert_close(got[side][mask.bool()], ours, atol=1e-5, rtol=0)
    for prompt, theirs in zip(job["prompts"], got["greedy"]):
        ours = generate(model, [prompt], max_new_tokens=6).to_lists()[0][0]
        assert theirs[len(prompt):] == ours
