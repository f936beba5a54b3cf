"""Issue 28: the training recipe as components. WSD gives the stated lr at every step, across a
resume; muon is torch.optim.Muon on the hidden matrices and torch.optim.AdamW on the rest, and the
split lands in summary.json; train.z_loss is the squared log-normaliser, logged as train/z_loss;
a plugin optimizer passes arch_zoo.testing's checks (trains, resumes, survives DDP)."""
import copy
import csv
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from arch_zoo import testing
from arch_zoo.cli import main
from arch_zoo.config import TrainConfig
from arch_zoo.config.parse import from_dict
from arch_zoo.errors import ConfigError
from arch_zoo.experiment import load
from arch_zoo.models import build_model
from arch_zoo.optimizer_checks import train_config
from arch_zoo.config.plugins import load_plugins
from arch_zoo.training import run_one
from arch_zoo.training.objectives import IGNORE, z_loss
from arch_zoo.recipes import build_optimizer, schedule_for
from tests.conftest import tiny
from tests.test_plugins import isolated_registries  # noqa: F401  (autouse: registries restored)


def train(**data):
    return from_dict(TrainConfig, data, "train")


@pytest.mark.parametrize("shape, floor, expected", [
    # max_steps 10, warmup 2, decay_fraction 0.3: steps 1-2 warm up, 3-7 hold, 8-10 decay (s = step + 1)
    ("linear", 0.0, [0.5, 1, 1, 1, 1, 1, 1, 2 / 3, 1 / 3, 0.0]),
    ("1-sqrt", 0.1, [0.5, 1, 1, 1, 1, 1, 1] + [0.1 + 0.9 * (1 - math.sqrt(k / 3)) for k in (1, 2, 3)]),
])
def test_wsd_gives_the_stated_multiplier_at_every_step(shape, floor, expected):
    t = train(schedule={"name": "wsd", "decay_fraction": 0.3, "decay_shape": shape}, max_steps=10, warmup_steps=2,
              min_lr_ratio=floor)
    assert [schedule_for(t)(step) for step in range(10)] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("warmup, fraction, max_steps", [(5, 0.5, 8), (7, 0.5, 8), (4, 0.5, 8), (0, 1.0, 8), (3, 0.3, 10),
                                                       (6, 0.25, 9)])
def test_wsd_warns_exactly_when_warmup_and_decay_leave_the_decay_cut_short(warmup, fraction, max_steps):
    """The warning fires when the schedule, stepped through, decays over fewer steps than
    decay_fraction * max_steps asks (counted from its multipliers), and names the three numbers."""
    from arch_zoo.recipes import recipe_warnings

    t = train(schedule={"name": "wsd", "decay_fraction": fraction, "decay_shape": "linear"}, max_steps=max_steps,
              warmup_steps=warmup)
    multipliers = [schedule_for(t)(step) for step in range(max_steps)]
    decaying = sum(1 for s, m in enumerate(multipliers, start=1) if s > warmup and m < 1.0)
    asked = max(1, round(fraction * max_steps))
    warnings = recipe_warnings(t)
    assert bool(warnings) == (decaying < asked)
    if warnings:
        (line,) = warnings
        assert f"train.warmup_steps={warmup}" in line and f"train.max_steps={max_steps}" in line
        assert f"({asked} steps, decay_fraction={fraction:g})" in line and f"cut to {decaying} steps" in line
    assert recipe_warnings(train(schedule="cosine", max_steps=max_steps, warmup_steps=warmup)) == []


def test_wsd_without_a_stable_phase_is_said_at_the_start_of_training_and_in_a_dry_run(tmp_path, capsys):
    import yaml

    base = {**RUN, "train": {**RUN["train"], "max_steps": 2, "warmup_steps": 2, "val_every": 2,
                             "optimizer": "adamw"}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"name": "w", "base": "exp.yaml", "seeds": [0, 1],
                                                        "grid": {"train.warmup_steps": [0, 2]}}))
    expected = ("wsd's warmup (train.warmup_steps=2) plus its decay (1 steps, decay_fraction=0.5) exceed "
                "train.max_steps=2")
    capsys.readouterr()
    assert main(["sweep", str(tmp_path / "spec.yaml"), "--out", str(tmp_path / "sweeps"), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert err.count(expected) == 1 and err.count("arch-zoo: warning:") == 1 and "2 of 4 runs" in err
    assert not (tmp_path / "sweeps").exists()
    assert main(["train", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"arch-zoo: warning: train.schedule: {expected}" in err
    assert main(["train", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "run0"), "--quiet",
                 "train.warmup_steps=0"]) == 0
    assert "wsd's warmup" not in capsys.readouterr().err


def test_recipe_options_override_onto_the_defaults_and_strings_stay_shorthand():
    """`train.optimizer: adamw` (today's form) is {name: adamw}; an option of the default needs no name."""
    assert load({"train": {"optimizer": "adamw"}}).train == load({"train": {"optimizer": {"name": "adamw"}}}).train
    cfg = load({"model": tiny()}, ["train.optimizer.eps=1e-6", "train.schedule.decay_fraction=0.5",
                                   "train.schedule=wsd"])
    assert cfg.train.optimizer.options.eps == 1e-6 and cfg.train.schedule.options.decay_fraction == 0.5


def _reference_muon(model, t, o):
    """torch.optim.Muon on the Linear weights outside the head, torch.optim.AdamW on the rest, written
    from the module types rather than arch_zoo's roles."""
    hidden = [m.weight for n, m in model.named_modules() if isinstance(m, nn.Linear) and not n.startswith("head")]
    ids = {id(p) for p in hidden}
    rest = [p for p in model.parameters() if id(p) not in ids]
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decayed = [p for p in rest if p.dim() == 2 and id(p) not in embeddings]
    muon = torch.optim.Muon(hidden, lr=t.lr, weight_decay=t.weight_decay, momentum=o["momentum"])
    adamw = torch.optim.AdamW([{"params": decayed, "weight_decay": t.weight_decay},
                               {"params": [p for p in rest if p.dim() < 2 or id(p) in embeddings], "weight_decay": 0.0}],
                              lr=o["adamw_lr"], betas=tuple(o["adamw_betas"]))
    return [muon, adamw], hidden


def test_muon_is_torch_muon_on_the_hidden_matrices_and_adamw_on_the_rest():
    o = {"momentum": 0.9, "adamw_lr": 3e-3, "adamw_betas": [0.8, 0.95]}
    t = train(optimizer={"name": "muon", **o}, lr=2e-2, weight_decay=0.1)
    torch.manual_seed(0)
    ours = build_model(tiny(n_layers=2, tie_embeddings=False), 31)
    theirs = copy.deepcopy(ours)
    built = build_optimizer(ours, t)
    reference, hidden = _reference_muon(theirs, t, o)
    assert [g["part"] for g in built.groups] == ["muon", "adamw", "adamw"]
    assert built.groups[0]["numel"] == sum(p.numel() for p in hidden)
    for step in range(3):
        ids = torch.randint(0, 31, (4, 9), generator=torch.Generator().manual_seed(step))
        for model, optimizers in ((ours, [built.optimizer]), (theirs, reference)):
            logits = model(ids).logits
            F.cross_entropy(logits.reshape(-1, 31), ids.reshape(-1)).backward()
            for opt in optimizers:
                opt.step()
                opt.zero_grad()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("momentum", [-0.1, 1.0])
def test_muon_momentum_is_a_fraction_below_one(momentum):
    """At 1 the buffer never takes a gradient (buf.lerp_(grad, 1 - momentum)): every step would be zero."""
    with pytest.raises(ConfigError) as err:
        train(optimizer={"name": "muon", "momentum": momentum})
    assert err.value.key == "train.optimizer.momentum" and "[0, 1)" in err.value.message


def test_muon_needs_a_hidden_matrix():
    with pytest.raises(ConfigError) as err:
        build_optimizer(nn.Sequential(nn.Embedding(5, 4), nn.LayerNorm(4)), train(optimizer="muon"))
    assert err.value.key == "train.optimizer" and "muon needs 2-D hidden matrices" in err.value.message


def test_z_loss_is_the_mean_squared_log_normaliser_over_scored_positions():
    logits = torch.randn(2, 3, 5, dtype=torch.float64)
    labels = torch.tensor([[1, IGNORE, 2], [IGNORE, 0, 4]])
    terms = [math.log(sum(math.exp(v) for v in logits[b, i].tolist())) ** 2
             for b in range(2) for i in range(3) if labels[b, i] != IGNORE]
    assert z_loss(logits, labels).item() == pytest.approx(sum(terms) / len(terms), rel=1e-6)


RUN = {"name": "recipe", "seed": 0, "model": tiny(d_model=32, n_layers=2, n_heads=2, d_ff=64, bias=True),
       "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
       "train": {"max_steps": 12, "batch_size": 4, "val_every": 6, "val_batches": 1, "log_every": 1, "lr": 1e-2,
                 "warmup_steps": 2, "progress_bar": False, "exact_match_samples": 0, "z_loss": 1e-3,
                 "optimizer": {"name": "muon", "adamw_lr": 3e-3},
                 "schedule": {"name": "wsd", "decay_fraction": 0.5, "decay_shape": "linear"}}}


def test_a_muon_wsd_run_resumes_on_schedule_logs_z_loss_and_records_the_split(tmp_path):
    """Stopped at step 6 and resumed, the run's lr at every step is lr * the stated WSD multiplier;
    train/z_loss is logged at every step; summary.json says which parameters Muon and AdamW own."""
    cfg = load(RUN)
    assert run_one(cfg, tmp_path / "run", quiet=True, stop_at=6).status == "paused"
    result = run_one(cfg, tmp_path / "run", quiet=True)
    assert result.status == "completed" and result.summary["resumed_from_step"] == 6
    with (tmp_path / "run" / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["lr"]]
    steps = [int(r["step"]) for r in rows]
    assert steps == list(range(12))
    stated = [1e-2 * m for m in [0.5, 1, 1, 1, 1, 1, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6, 0]]  # s = 1..12: decay 7-12
    assert [float(r["lr"]) for r in rows] == [float(np.float32(v)) for v in stated]
    assert all(float(r["train/z_loss"]) > 0 for r in rows)
    split = result.summary["optimizer"]
    assert split["name"] == "muon"
    model = build_model(cfg.model, 100)  # names only: the vocabulary's size changes none
    linears = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, nn.Linear) and not n.startswith("head")}
    muon = [n for g in split["groups"] if g["part"] == "muon" for n in g["names"]]
    adamw = [n for g in split["groups"] if g["part"] == "adamw" for n in g["names"]]
    assert set(muon) == linears and set(adamw) == {n for n, _ in model.named_parameters()} - linears
    assert {g["lr"] for g in split["groups"]} == {1e-2, 3e-3}
    assert all(g["parameters"] > 0 and g["names"] for g in split["groups"])  # no empty group is shown
    with (tmp_path / "run" / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["lr"]]
    columns = [g["lr_column"] for g in split["groups"]]
    assert len(set(columns)) == len(columns) and {c.split(".")[0] for c in columns} == {"lr/muon", "lr/adamw"}
    for g in split["groups"]:  # every group's lr at every step: its own base lr times the stated multiplier
        assert [float(r[g["lr_column"]]) for r in rows] == pytest.approx([g["lr"] * v / 1e-2 for v in stated],
                                                                         rel=1e-6, abs=1e-12)
    json.dumps(split)  # plain data


def test_an_empty_parameter_group_stays_in_the_optimizer_but_is_not_shown():
    """Muon's AdamW part of a model whose every 2-D parameter outside the hidden matrices is an
    embedding (tied head, no bias) has no decayed group: the torch optimizer keeps it (a checkpoint
    keeps its layout), the summary's groups leave it out."""
    from arch_zoo.recipes import shown_groups

    cfg = load({**RUN, "model": tiny(d_model=32, n_layers=2, n_heads=2, d_ff=64, bias=False)})
    model = build_model(cfg.model, 50)
    optimizer, groups, _ = build_optimizer(model, cfg.train)
    empty = [i for i, g in enumerate(optimizer.param_groups) if not g["params"]]
    assert empty and len(groups) == len(optimizer.param_groups)
    shown = shown_groups(groups)
    assert [i for i, _ in shown] == [i for i in range(len(groups)) if i not in empty]
    assert sum(g["parameters"] for _, g in shown) == len(list(model.parameters()))


NADAM = '''
from dataclasses import dataclass

import torch

from arch_zoo.recipes import OPTIMIZERS, OptimizerRecipe


@dataclass(frozen=True)
class NAdamOptions:
    momentum_decay: float = 4e-3


@OPTIMIZERS.register("nadam", NAdamOptions, "NAdam (Dozat 2016): Adam with Nesterov momentum")
class NAdam(OptimizerRecipe):
    update = "adam"

    def make(self, groups):
        return torch.optim.NAdam(groups, lr=self.train.lr, betas=tuple(self.train.betas),
                                 momentum_decay=self.options.momentum_decay)
'''


@pytest.mark.outcome
def test_a_plugin_optimizer_trains_resumes_and_survives_ddp(tmp_path, capsys):
    """Issue 28 §1: one class, one registration; listed by `arch-zoo components`, then every check
    of arch_zoo.testing.check_optimizer, DDP (two gloo processes) included."""
    plugin = tmp_path / "nadam.py"
    plugin.write_text(NADAM)
    assert main(["components", "--plugin", str(plugin)]) == 0
    assert "  nadam  NAdam (Dozat 2016)" in capsys.readouterr().out
    load_plugins([str(plugin)])
    assert testing.check_optimizer("nadam", {"momentum_decay": 5e-3}) == [
        "optimizer_trains", "optimizer_resumes", "optimizer_survives_ddp"]


@pytest.mark.outcome
def test_the_built_in_optimizers_train_and_resume():
    """8 steps cut the loss by at least 25% (measured: adamw 43%, sgd 56%, muon 60%, muon with
    match_rms_adamw 60%), and a resume at step 3 ends with the unbroken run's weights."""
    for name, lr in (("adamw", 5e-2), ("adam", 5e-2), ("sgd", 0.5), ("muon", 5e-2)):
        assert testing.check_optimizer(name, lr=lr, ddp=False) == ["optimizer_trains", "optimizer_resumes"]
    testing.check_optimizer("muon", {"adjust_lr_fn": "match_rms_adamw", "nesterov": False}, lr=5e-2, ddp=False)


@pytest.mark.slow
def test_muon_survives_ddp():
    """Ranks agree exactly; bf16 Newton-Schulz turns rounding differences of the all-reduced
    gradient into ~0.02 apart after 8 steps at lr 5e-2, against ~0.4 for one rank's data alone."""
    testing.optimizer_survives_ddp(train_config("muon"))


def test_recipes_are_sweep_axes_and_tuning_keys(tmp_path):
    """A grid over optimizers (a bare name and a {name, options} mapping) and schedules, tuning an
    option every optimizer there takes: each planned run's config holds its own recipe."""
    import yaml

    from arch_zoo.sweeps.plan import make_plan
    from arch_zoo.sweeps.spec import load_spec

    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({**RUN, "train": {**RUN["train"], "optimizer": "adamw"}}))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "recipes", "base": str(base), "seeds": [0],
        "grid": {"train.optimizer": ["adamw", {"name": "muon", "adamw_lr": 1e-3}], "train.schedule": ["cosine", "wsd"]},
        "tune": {"key": "train.optimizer.eps", "values": [1e-8, 1e-6], "seeds": [9]}}))
    runs = make_plan(load_spec(spec)).runs
    got = {(r.config.train.optimizer.name, r.config.train.schedule.name, r.config.train.optimizer.options.eps,
            getattr(r.config.train.optimizer.options, "adamw_lr", None)) for r in runs}
    assert got == {(o, s, e, lr) for o, lr in (("adamw", None), ("muon", 1e-3)) for s in ("cosine", "wsd")
                   for e in (1e-8, 1e-6)}
