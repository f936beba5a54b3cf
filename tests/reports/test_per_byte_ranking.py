"""A report never ranks across tokenizations by a per-token metric: a char-vs-BPE sweep ranks by
bits per byte and says so in one line (the sweep's closing table, `compare`, the report); a sweep
whose variants share one tokenizer keeps ranking by val/loss with no such line."""
import json
from pathlib import Path

import pytest

from arch_zoo.cli import main
from arch_zoo.metrics import per_byte_instead
from arch_zoo.reports import load_runs, summarize
from arch_zoo.reports.tables import display
from tests.sweeps.conftest import BASE, write_spec

TINY = {**BASE, "train": {**BASE["train"], "max_steps": 4, "val_every": 4}}
NOTE = "ranked by val/bpb, not val/loss: val/loss is per token and the variants' tokens cover different text"


def _sweep(spec_dir, tmp_path, capsys, grid, baseline):
    spec = {"name": "tok", "grid": grid, "seeds": [0, 1], "baseline": baseline}
    out = tmp_path / "runs"
    assert main(["sweep", str(write_spec(spec_dir, spec, TINY)), "--out", str(out), "--workers", "1"]) == 0
    return out / "tok", capsys.readouterr().out


def test_char_vs_bpe_ranks_by_bits_per_byte_and_says_so(tmp_path, capsys):
    sweep, closing = _sweep(tmp_path / "specs", tmp_path, capsys,
                            {"task.tokenizer": ["char", {"name": "bpe", "vocab_size": 300}]},
                            {"task.tokenizer": "char"})
    assert "variants ranked by val/bpb (min)" in closing and NOTE in closing
    runs = load_runs(sweep)
    per_token = runs.attrs["bytes_per_token"]
    assert len({round(v["val"], 6) for v in per_token.values()}) == 2  # measured: BPE tokens cover more bytes
    table = summarize(runs)
    assert table.attrs["metric"] == "val/bpb" and sum(NOTE in n for n in table.attrs["notes"]) == 1
    by_bpb = runs[runs["status"] == "completed"].groupby("variant")["val/bpb"].mean().sort_values()
    assert list(table["variant"]) == list(by_bpb.index)  # ranked by bits per byte, not by loss per token
    assert main(["compare", str(sweep)]) == 0
    assert NOTE in capsys.readouterr().out
    # throughput in text: tokens/s times the training split's measured bytes per token, from summary.json
    for _, run in runs[runs["status"] == "completed"].iterrows():
        summary = json.loads((Path(run["run_dir"]) / "summary.json").read_text())
        expected = summary["train_tokens_per_s"] * summary["task"]["bytes_per_token"]["train"]
        assert run["train_bytes_per_s"] == pytest.approx(expected, rel=1e-12)
    assert display(table)["bytes/s"].ne("").all()
    # asked for by name, the per-token metric is still refused as the ranking metric
    assert summarize(runs, metric="val/loss").attrs["metric"] == "val/bpb"


def test_a_shared_tokenizer_keeps_val_loss_and_no_note(tmp_path, capsys):
    sweep, closing = _sweep(tmp_path / "specs", tmp_path, capsys, {"model.position": ["rope", "alibi"]},
                            {"model.position": "rope"})
    assert "variants ranked by val/loss (min)" in closing and "bpb" not in closing.split("\n", 1)[0]
    table = summarize(load_runs(sweep))
    assert table.attrs["metric"] == "val/loss"
    assert not any("ranked by" in n or "bytes per token" in n for n in table.attrs["notes"])


@pytest.mark.parametrize("metric, measured, expected", [
    ("val/loss", {"a": 1.0, "b": 2.6}, "val/bpb"),
    ("val@128/loss", {"a": 1.0, "b": 2.6}, "val@128/bpb"),
    ("val/loss", {"a": 2.6, "b": 2.6}, "val/loss"),  # the same text per token: loss ranks
    ("val/bpc", {"a": 1.0, "b": 2.6}, "val/bpc"),  # per character already
    ("val/token_accuracy", {"a": 1.0, "b": 2.6}, "val/bpb"),
    ("val/loss", {"a": 1.0, "b": None}, "val/loss"),  # one unknown: nothing measured to differ
])
def test_per_token_metrics_give_way_to_bits_per_byte_only_when_tokens_differ(metric, measured, expected):
    split = metric.rsplit("/", 1)[0]
    chosen, note = per_byte_instead(metric, measured, [f"{split}/bpb", metric])
    assert chosen == expected and (note is not None) == (chosen != metric)


def test_without_bits_per_byte_the_ranking_warns():
    chosen, note = per_byte_instead("val/loss", {"a": 1.0, "b": 2.0}, ["val/loss"])
    assert chosen == "val/loss" and note.startswith("warning: ranked by val/loss, though")


def test_a_ladder_over_tokenizations_fits_bits_per_byte(tmp_path):
    """The ladder's fits take the table's ranking metric: per byte when the variants' tokens differ."""
    import json
    import math

    from arch_zoo.reports.scaling import analyse
    from tests.reports.ladders import write_ladder

    curves = {"relu": (1.5, 60.0, 0.15), "swiglu": (1.4, 55.0, 0.15)}
    per_token = {"relu": 1.0, "swiglu": 2.5}  # as if the variants' tokens covered 1 and 2.5 bytes
    root = write_ladder(tmp_path / "lad", curves)
    for summary in (root / "runs").glob("*/summary.json"):
        record = json.loads(summary.read_text())
        name = "relu" if "ffn-relu" in summary.parent.name else "swiglu"
        loss = record["final"]["val/loss"]
        record["final"]["val/bpb"] = loss / math.log(2) / per_token[name]
        record["task"] = {**record.get("task", {}), "bytes_per_token": {"val": per_token[name]}}
        summary.write_text(json.dumps(record))
    runs = load_runs(root)
    table = summarize(runs)
    scaling = analyse(runs, table, replicates=50)
    assert scaling.metric == "val/bpb"
    assert any(n.startswith("ranked by val/bpb, not val/loss") for n in table.attrs["notes"])
    fits = scaling.fits[scaling.fits["x"] == "compute"].set_index("variant")
    for name, (E, _, _) in curves.items():  # bpb = loss / ln 2 / bytes per token: the floor scales the same way
        assert fits.loc[f"ffn={name}", "E"] == pytest.approx(E / math.log(2) / per_token[name], rel=1e-4)
