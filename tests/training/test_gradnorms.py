"""`arch-zoo gradnorms`: gradient norms at initialisation over depths and variants."""
import json
import math
import re

import pandas as pd
import pytest

from arch_zoo.cli import main
from arch_zoo.experiment import load
from arch_zoo.training.gradnorms import last_layer_table, measure

TINY = ["model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.max_seq_len=32", "task.seq_len=32",
        "task.max_chars=20000", "train.batch_size=4"]


def test_every_layer_gets_a_finite_positive_norm_per_sublayer():
    cfg = load("configs/experiments/char_lm.yaml", [*TINY, "model.n_layers=3"])
    rows = measure(cfg, 4)
    assert [(r["layer"], r["sublayer"]) for r in rows] == [(i, s) for i in (1, 2, 3) for s in ("mixer", "ffn")]
    assert all(math.isfinite(r["grad_norm"]) and r["grad_norm"] > 0 for r in rows)


def test_the_same_seed_measures_the_same_norms_and_another_seed_does_not():
    cfg = load("configs/experiments/char_lm.yaml", [*TINY, "model.n_layers=2"])
    again = load("configs/experiments/char_lm.yaml", [*TINY, "model.n_layers=2"])
    other = load("configs/experiments/char_lm.yaml", [*TINY, "model.n_layers=2", "seed=1"])
    assert measure(cfg, 4) == measure(again, 4)
    assert measure(cfg, 4) != measure(other, 4)


def test_cli_writes_the_table_and_plots_and_prints_the_last_layer(tmp_path, capsys):
    out = tmp_path / "gn"
    code = main(["gradnorms", "configs/experiments/char_lm.yaml", *TINY, "--depths", "1", "2", "--seeds", "0", "1",
                 "--out", str(out)])
    assert code == 0
    frame = pd.read_csv(out / "gradnorms.csv")
    # 2 placements x (1 + 2 layers) x 2 sublayers x 2 seeds
    assert len(frame) == 2 * 3 * 2 * 2
    assert set(frame["variant"]) == {"norm_placement=pre", "norm_placement=post"}
    last = last_layer_table(frame)
    assert list(last["count"]) == [2, 2, 2, 2]
    for stem in ("gradnorm_last_layer_vs_depth", "gradnorm_by_layer"):
        assert (out / f"{stem}.png").stat().st_size > 1000 and (out / f"{stem}.svg").exists()
    record = json.loads((out / "provenance.json").read_text())
    assert record["command"].startswith("arch-zoo gradnorms configs/experiments/char_lm.yaml") and record["wall_s"] > 0
    assert "logical CPUs" in record["machine"]
    printed = capsys.readouterr().out
    assert re.search(r"^norm_placement=post +depth +2  last-layer FFN grad norm [0-9.e-]+ ± ", printed, re.M)


@pytest.mark.parametrize("args,key", [
    (["--vary", "model.norm_placement"], "--vary"),
    (["--vary", "model.n_layers=2,4"], "--vary"),
    (["--depths", "0", "2"], "--depths"),
    (["--vary", "model.norm_placement=pre,sideways"], "model.norm_placement"),
])
def test_bad_arguments_exit_2_with_one_line_naming_them(args, key, tmp_path, capsys):
    code = main(["gradnorms", "configs/experiments/char_lm.yaml", *TINY, *args, "--out", str(tmp_path / "g")])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("arch-zoo: error")]
    assert len(lines) == 1 and key in lines[0]


def test_a_table_of_an_earlier_version_names_the_mixer_slot_self_attn_and_reads_the_same():
    """gradnorms.csv written before the mixer's slot was renamed calls its rows ``self_attn``."""
    rows = [{"variant": v, "depth": 2, "seed": s, "stack": "decoder", "layer": layer, "sublayer": part,
             "grad_norm": float(10 * layer + s + (part == "ffn") + (v == "b"))}
            for v in ("a", "b") for s in (0, 1) for layer in (1, 2) for part in ("mixer", "ffn")]
    new = pd.DataFrame(rows)
    old = new.replace({"sublayer": {"mixer": "self_attn"}})
    assert (old["sublayer"] == "self_attn").sum() == 8
    mixer = last_layer_table(old, "mixer")
    pd.testing.assert_frame_equal(mixer, last_layer_table(new, "mixer"))
    assert list(mixer["mean"]) == [20.5, 21.5] and list(mixer["count"]) == [2, 2]  # layer 2, seeds 0 and 1
