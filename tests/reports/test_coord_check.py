"""µP's coordinate check (issue 42 item 6): `arch-zoo coord-check` trains a config a few steps at several
widths under standard and mup and measures each layer output's mean absolute entry."""
import csv
import re

import pytest
import torch
import torch.nn.functional as F
import yaml

from arch_zoo.cli import main
from arch_zoo.experiment import load
from arch_zoo.models import build_model
from arch_zoo.reports.coord_check import coord_check, growth, recording, width_overrides
from arch_zoo.training.datamodule import TaskDataModule
from arch_zoo.training.run import prepare

BASE = {"name": "tiny", "seed": 0,
        "model": {"kind": "decoder", "d_model": 16, "n_layers": 2, "n_heads": 2, "d_ff": 64, "max_seq_len": 32,
                  "position": "rope", "dropout": 0.0},
        "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
        "train": {"max_steps": 10, "batch_size": 8, "lr": 0.03, "weight_decay": 0.0, "progress_bar": False}}


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tiny.yaml"
    base = {**BASE, "seed": int(torch.randint(0, 10_000, ()))}  # the test's seed: ARCH_ZOO_TEST_SEED moves it
    path.write_text(yaml.safe_dump(base))
    return path


def _by_hand(model, batch):
    """Each measured output's mean |x|, from hooks this test registers itself, in float64."""
    got = {}

    def keep(name):
        return lambda _m, _i, out: got.__setitem__(name, out.double().abs().sum().item() / out.numel())

    handles = [model.embed.register_forward_hook(keep("embedding"))]
    handles += [layer.register_forward_hook(keep(f"decoder.layers.{i}"))
                for i, layer in enumerate(model.decoder.layers)]
    with torch.no_grad():
        logits = model(batch["input_ids"], batch["attention_mask"]).logits
    for h in handles:
        h.remove()
    got["logits"] = logits.double().abs().sum().item() / logits.numel()
    return got


def test_the_recorded_sizes_are_each_output_s_mean_absolute_entry(config):
    cfg = load(config)
    model = build_model(cfg.model, 65).eval()
    batch = {"input_ids": torch.randint(0, 65, (3, 32)), "attention_mask": torch.ones(3, 32, dtype=torch.bool)}
    with torch.no_grad(), recording(model) as sizes:
        model(batch["input_ids"], batch["attention_mask"])
    expected = _by_hand(model, batch)
    assert list(sizes) == ["embedding", "decoder.layers.0", "decoder.layers.1", "logits"]
    assert sizes == pytest.approx(expected, rel=1e-12)


def test_the_check_equals_a_hand_written_training_loop(config):
    """Standard parametrization, no weight decay: the config's AdamW over every parameter at train.lr,
    gradients clipped to train.grad_clip, a next-character cross-entropy; sizes after every step."""
    frame = coord_check(config, [], [16, 32], steps=3, parametrizations=["standard"])
    base = load(config)
    data = prepare(base, quiet=True)
    batches = list(TaskDataModule(data, base.train.__class__(**{**base.train.__dict__, "max_steps": 3}),
                                  base.seed).train_dataloader())
    for width in (16, 32):
        cfg = load(config, width_overrides(base, width, "standard", 16))
        assert (cfg.model.d_model, cfg.model.n_heads, cfg.model.d_ff, cfg.model.n_layers) == (width, width // 8,
                                                                                             4 * width, 2)
        torch.manual_seed(cfg.seed)
        model = build_model(cfg.model, data.tokenizer.vocab_size)
        opt = torch.optim.AdamW(model.parameters(), lr=0.03, betas=tuple(cfg.train.betas), weight_decay=0.0)
        expected = [_by_hand(model.eval(), batches[0])]
        for batch in batches:
            model.train()
            logits = model(batch["input_ids"], batch["attention_mask"]).logits[:, :-1]
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1),
                                   ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
            opt.step()
            expected.append(_by_hand(model.eval(), batches[0]))
        for step, sizes in enumerate(expected):
            part = frame[(frame["width"] == width) & (frame["step"] == step)]
            assert dict(zip(part["layer"], part["coord"])) == pytest.approx(sizes, rel=1e-5), (width, step)


@pytest.mark.outcome
def test_at_a_large_lr_standard_grows_with_width_and_mup_stays_flat(config):
    """The µP paper's signature. Measured (widths 16 -> 128, lr 1e-2, 4 steps, 10 seeds): the logits grow
    4.3-6.1x under standard and 0.93-1.12x under mup; the last layer's output 20-54x against 0.66-1.19x.
    (At lr 3e-2 the logits' growth under standard is not robust: 0.6-4.6x over 10 seeds.)"""
    frame = coord_check(config, ["train.lr=1e-2"], [16, 128], steps=4)
    table = growth(frame).set_index(["parametrization", "layer"])["growth"]
    assert table["standard", "logits"] > 2.5 * table["mup", "logits"]
    assert table["standard", "decoder.layers.1"] > 8 * table["mup", "decoder.layers.1"]
    assert 0.6 < table["mup", "logits"] < 1.6
    last = frame[frame["step"] == 4]
    for (p, layer), value in table.items():  # growth is the widest width's size over the narrowest's
        sizes = last[(last["parametrization"] == p) & (last["layer"] == layer)].set_index("width")["coord"]
        assert value == sizes[128] / sizes[16]


def test_the_command_writes_the_table_and_plot_and_refuses_bad_widths(config, tmp_path, capsys):
    out = tmp_path / "cc"
    assert main(["coord-check", str(config), "--widths", "16", "32", "--steps", "2", "--parametrizations", "mup",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"coord_check.csv", "coord_check.md", "coord_check.png",
                                               "coord_check.svg"}
    rows = list(csv.DictReader((out / "coord_check.csv").open()))
    assert {r["parametrization"] for r in rows} == {"mup"} and {r["step"] for r in rows} == {"0", "1", "2"}
    final = {(r["layer"], int(r["width"])): float(r["coord"]) for r in rows if r["step"] == "2"}
    for layer in ("embedding", "decoder.layers.0", "decoder.layers.1", "logits"):
        line = next(x for x in printed.splitlines() if x.startswith(f"| mup | {layer} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[2:] == [f"{final[layer, 16]:.4g}", f"{final[layer, 32]:.4g}",
                             f"{final[layer, 32] / final[layer, 16]:.4g}"]
    assert (out / "coord_check.md").read_text() in printed
    for argv, message in ((["--widths", "16", "20"], r"--widths: 20 is not a multiple of the config's head size 8"),
                          (["--widths", "32", "16"], r"--widths: expected at least two widths, each once, smallest"),
                          (["--widths", "16"], r"--widths: expected at least two widths"),
                          (["--widths", "16", "32", "--parametrizations", "ntk"], r"invalid choice: 'ntk'")):
        assert main(["coord-check", str(config), *argv, "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and re.search(message, err), err
        assert not (tmp_path / "bad").exists()
