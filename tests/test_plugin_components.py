"""Plugins beyond the README's example: a module plugin adds a norm, a feed-forward, a placement
with learned parameters and an attention pattern, and runs them through arch_zoo.testing,
describe, train and a 2-worker sweep; an init scheme from a file sees each layer's context; an
installed distribution's entry point is discovered by importlib.metadata. Nothing in
``arch_zoo/`` names any of them (issue 14, Done when).
"""
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from arch_zoo import testing
from arch_zoo.cli import main
from arch_zoo.experiment import all_registries
from tests.test_plugins import ROOT, TINY, isolated_registries  # noqa: F401  (autouse: registries restored)


LAB_BLOCKS = """
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from arch_zoo.components.attention_patterns import ATTENTION, AttentionPattern
from arch_zoo.components.feedforward import FEEDFORWARD, MLP
from arch_zoo.components.norms import NORMS
from arch_zoo.components.placements import PLACEMENTS, Placement


@dataclass(frozen=True)
class ScaleNormOptions:
    eps: float = 1e-5


@NORMS.register("lab_scalenorm", ScaleNormOptions, "one learned scale over the unit vector (Nguyen & Salazar 2019)")
class ScaleNorm(nn.Module):
    def __init__(self, options, dim):
        super().__init__()
        self.eps = options.eps
        self.g = nn.Parameter(torch.tensor(float(dim) ** 0.5))

    def forward(self, x):
        return self.g * x / x.norm(dim=-1, keepdim=True).clamp(min=self.eps)


@FEEDFORWARD.register("squared_relu", description="relu(x W1)^2 W2 (So et al. 2021, Primer)")
class SquaredReLU(MLP):
    @staticmethod
    def act(x):
        return F.relu(x).square()


@dataclass(frozen=True)
class LayerScaleOptions:
    init: float = 0.1  # every channel's scale at the start


@PLACEMENTS.register("layerscale", LayerScaleOptions, "x + gamma * f(norm(x)), gamma learned per channel "
                                                      "(Touvron et al. 2021, CaiT)")
class LayerScale(Placement):
    formula = "x + gamma * f(norm(x))"

    def __init__(self, options, ctx):
        super().__init__(options, ctx)
        # one vector per sublayer: 1-D, so no weight decay and no init scheme redraws it (as timm's)
        self.gamma = nn.ParameterList(torch.full((ctx.d_model,), options.init) for _ in range(3 if ctx.cross else 2))

    def forward(self, x, slots, branches):
        for gamma, slot, branch in zip(self.gamma, slots, branches):
            x = x + gamma * branch(slot.norm(x))
        return x


@dataclass(frozen=True)
class StridedOptions:
    stride: int = 128


@ATTENTION.register("strided", StridedOptions, "the last `stride` keys and every stride-th one before them "
                                               "(Child et al. 2019)")
class Strided(AttentionPattern):
    example_options = {"stride": 3}  # short enough to matter in the invariants' tiny sequences

    def band(self, q_len, k_len, device=None):
        dist = (torch.arange(q_len, device=device).unsqueeze(1) + (k_len - q_len)
                - torch.arange(k_len, device=device).unsqueeze(0)).abs()
        return (dist < self.options.stride) | (dist % self.options.stride == 0)

    def restrict(self, mask, q_len, k_len, device):
        return mask.restrict(self.band(q_len, k_len, device))

    def visible_keys(self, seq_len, causal):
        band = self.band(seq_len, seq_len)
        return float((band.tril() if causal else band).sum(-1).double().mean())
"""


def _package(root: Path, name: str) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    (root / name / "blocks.py").write_text(LAB_BLOCKS)
    return root / name / "blocks.py"


def test_a_module_plugin_adds_a_norm_an_ffn_a_placement_and_an_attention_pattern(tmp_path, monkeypatch, capsys):
    """README: "module names (my_lab.blocks) work too"; what a plugin registers (a norm, a
    feed-forward, a placement, an attention pattern) is validated like a built-in (typed options,
    did-you-mean), shown by `describe`, and passes the grid's invariants (arch_zoo.testing). README: a
    placement's "parameters of its own are trained, counted under `placement` by `describe`"; an
    attention pattern says "how many keys a query sees in `visible_keys` (FLOP counts use it)"."""
    from arch_zoo.experiment import load
    from arch_zoo.errors import ConfigError

    blocks = _package(tmp_path / "lab", "my_lab")
    monkeypatch.syspath_prepend(str(tmp_path / "lab"))
    cfg = load({"plugins": ["my_lab.blocks"], "model": {"norm": {"name": "lab_scalenorm", "eps": 1e-6},
                                                         "ffn": "squared_relu", "norm_placement": "layerscale",
                                                         "attention": {"name": "strided", "stride": 8}}})
    assert cfg.model.norm.options.eps == 1e-6 and cfg.model.ffn.name == "squared_relu"
    assert cfg.model.norm_placement.options.init == 0.1 and cfg.model.attention.options.stride == 8
    assert all_registries()["norms"].get("lab_scalenorm").source == "my_lab.blocks"
    assert all_registries()["placements"].get("layerscale").source == "my_lab.blocks"
    with pytest.raises(ConfigError, match=r"model.norm.eps: expected a number, got 'small'"):
        load({"plugins": ["my_lab.blocks"], "model": {"norm": {"name": "lab_scalenorm", "eps": "small"}}})
    with pytest.raises(ConfigError, match=r"unknown norm 'lab_scalenrom' \(did you mean 'lab_scalenorm'\?\)"):
        load({"plugins": ["my_lab.blocks"], "model": {"norm": "lab_scalenrom"}})
    with pytest.raises(ConfigError, match=r"model.norm_placement.int: unknown option for norm placement "
                                          r"'layerscale' \(did you mean 'init'\?\)"):
        load({"plugins": ["my_lab.blocks"], "model": {"norm_placement": {"name": "layerscale", "int": 0.5}}})
    with pytest.raises(ConfigError, match=r"unknown attention pattern 'stride' \(did you mean 'strided'\?\)"):
        load({"plugins": ["my_lab.blocks"], "model": {"attention": "stride"}})
    with pytest.raises(ConfigError, match=r"model.attention.stride: expected an integer, got 'wide'"):
        load({"plugins": ["my_lab.blocks"], "model": {"attention": {"name": "strided", "stride": "wide"}}})
    assert main(["describe", "preset:decoder-small", "plugins=[my_lab.blocks]", "model.norm=lab_scalenorm",
                 "model.ffn=squared_relu", "model.norm_placement=layerscale", "model.attention={name: strided, "
                 "stride: 16}", "model.n_layers=2", "model.d_model=32", "--vocab-size", "50"]) == 0
    out = capsys.readouterr().out
    assert "lab_scalenorm(eps=1e-05)" in out and "squared_relu" in out
    assert "placement layerscale(init=0.1): x + gamma * f(norm(x))" in out
    assert "attention     strided(stride=16), sdpa kernel" in out
    assert re.search(r"\n  decoder placement +128 ", out)  # gamma: 2 sublayers x 32 channels x 2 layers
    # FLOPs count the keys the pattern lets a query see: at length 256, query i sees min(i, 15) + 1 keys
    # within the stride and i // 16 before, against i + 1 under global attention
    from arch_zoo.formatting import si

    keys = sum(min(i, 15) + 1 + i // 16 for i in range(256)) / 256
    assert re.search(r"\n  decoder attention +" + re.escape(si(4 * 32 * 2 * keys)) + "\n", out)
    from arch_zoo.config.plugins import records

    assert records(["my_lab.blocks"])[0]["path"] == str(blocks)
    assert len(testing.check_component("norms", "lab_scalenorm")) == 14  # every invariant, every kind
    assert len(testing.check_component("feedforward", "squared_relu")) == 14
    assert len(testing.check_component("placements", "layerscale")) == 14
    assert len(testing.check_component("attention", "strided", kinds=["encoder", "decoder"])) == 9


def test_a_plugin_placement_and_attention_pattern_train_and_sweep(tmp_path, monkeypatch, capsys):
    """README: plugin components work in `train` and `sweep` ("local and Ray workers import it"):
    a module plugin's placement (with parameters of its own) and attention pattern, trained in
    this process and swept against the built-ins by two worker processes; each run's summary
    counts the placement's parameters and the pattern's FLOPs."""
    _package(tmp_path, "lab_sweep")
    monkeypatch.chdir(tmp_path)  # a module plugin beside the configs imports, in the workers too
    (tmp_path / "experiment.yaml").write_text(
        "name: lab\nplugins: [lab_sweep.blocks]\ntask: {name: char_lm}\n"
        "model: {base: preset:decoder-small, norm_placement: layerscale, attention: {name: strided, stride: 4}}\n")
    assert main(["train", "experiment.yaml", "--out", "run", "--quiet", *TINY]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["plugins"][0]["plugin"] == "lab_sweep.blocks"
    assert summary["parameters_by_part"]["decoder placement"] == 2 * 16  # gamma: 2 sublayers x d_model

    (tmp_path / "sweep.yaml").write_text(
        "name: lab_vs_builtin\nbase: experiment.yaml\nseeds: [0]\n"
        "zip: {model.norm_placement: [pre, layerscale], model.attention: [global, {name: strided, stride: 4}]}\n")
    assert main(["sweep", "sweep.yaml", "--workers", "2", "--out", "sweeps", *TINY]) == 0
    capsys.readouterr()
    runs = {}
    for r in (tmp_path / "sweeps" / "lab_vs_builtin" / "runs").iterdir():
        status = json.loads((r / "status.json").read_text())
        assert status["status"] == "completed", status
        model = yaml.safe_load((r / "config.yaml").read_text())["model"]
        runs[model["norm_placement"]["name"], model["attention"]["name"]] = (status["pid"], json.loads(
            (r / "summary.json").read_text()))
    assert set(runs) == {("pre", "global"), ("layerscale", "strided")}
    pids = {pid for pid, _ in runs.values()}
    assert os.getpid() not in pids and len(pids) == 2  # trained in the two worker processes
    ours, builtin = runs["layerscale", "strided"][1], runs["pre", "global"][1]
    assert ours["parameters"] == builtin["parameters"] + 2 * 16
    assert ours["flops_per_token"] < builtin["flops_per_token"]  # a query sees fewer keys


LAB_INIT = """
import math

from torch import nn

from arch_zoo.components.init import INITS, NormalInit, NormalInitOptions

SEEN = []


@INITS.register("depth_scaled", NormalInitOptions, "normal, each layer's matrices / sqrt(index + 1) (Zhang et al. 2019)")
class DepthScaled(NormalInit):
    def init_layer(self, layer, ctx):
        SEEN.append((ctx.stack, ctx.index, ctx.depth, ctx.model_kind))
        for p in layer.parameters():
            if p.dim() > 1:
                p.data.div_(math.sqrt(ctx.index + 1))
"""


def test_a_plugin_init_scheme_sees_each_layers_context(tmp_path):
    """README: an init scheme "initialises the whole model in `__call__(model)`, then each layer in
    `init_layer(layer, ctx)` with its `LayerContext`, so a depth-scaled init is one method": it runs
    once per layer of each stack, in order, with the layer's index and its stack's depth, and the
    rest of the model keeps the draws of the scheme it extends."""
    import torch

    from arch_zoo.models import build_model
    from arch_zoo.config.plugins import load_plugins

    (tmp_path / "my_init.py").write_text(LAB_INIT)
    module = sys.modules[load_plugins([tmp_path / "my_init.py"])[0]["module"]]
    base = {"kind": "encoder_decoder", "d_model": 16, "n_encoder_layers": 2, "n_decoder_layers": 3, "n_heads": 2}
    torch.manual_seed(0)
    scaled = build_model({**base, "init": "depth_scaled"}, 31)
    assert module.SEEN == [("encoder", 0, 2, "encoder_decoder"), ("encoder", 1, 2, "encoder_decoder"),
                           ("decoder", 0, 3, "encoder_decoder"), ("decoder", 1, 3, "encoder_decoder"),
                           ("decoder", 2, 3, "encoder_decoder")]
    torch.manual_seed(0)
    plain = build_model({**base, "init": "normal"}, 31).state_dict()
    for name, value in scaled.state_dict().items():
        index = int(name.split(".")[2]) if ".layers." in name else 0
        expected = plain[name] / math.sqrt(index + 1) if value.dim() > 1 else plain[name]
        torch.testing.assert_close(value, expected, rtol=0, atol=0, msg=name)


def test_an_installed_entry_point_is_loaded_by_every_command(tmp_path):
    """README: "An installed package can declare its plugin module as an entry point in the group
    `arch_zoo.plugins`; such plugins load in every command". A real distribution (a dist-info
    directory with entry_points.txt on the path, as pip leaves it) found by importlib.metadata."""
    site = tmp_path / "site"
    _package(site, "lab_ep")
    dist = site / "lab_ep-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-ep\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[arch_zoo.plugins]\nlab = lab_ep.blocks\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    proc = subprocess.run([sys.executable, "-m", "arch_zoo", "components"], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"\n  lab_scalenorm +one learned scale .*  \(plugin: entry point 'lab' \(lab-ep 0.1\)\)", proc.stdout)
    assert re.search(r"\n  squared_relu .*\(plugin: entry point 'lab'", proc.stdout)
    assert re.search(r"\n  layerscale +x \+ gamma .*\[init=0.1\]  \(plugin: entry point 'lab'", proc.stdout)
    assert re.search(r"\n  strided +the last .*\[stride=128\]  \(plugin: entry point 'lab'", proc.stdout)
