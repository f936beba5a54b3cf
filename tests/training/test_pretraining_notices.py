"""Issue 26 §2, end to end on one real run: `train` says the corpus was cut and warns that the position
signal drowns the tokens out; summary.json records the cut and the unigram loss; the report flags a run
that ended above the unigram loss (two steps: it did not train)."""
import json

import yaml

from arch_zoo.cli import main
from arch_zoo.reports.load import load_runs

MODEL = {"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "max_seq_len": 32,
         "position": "sinusoidal"}


def test_train_says_so_and_records_it(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 300)  # 13,200 characters
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "cut", "model": MODEL, "task": {"name": "char_lm", "files": [str(corpus)], "max_chars": 5000,
                                                "seq_len": 32},
        "train": {"max_steps": 2, "batch_size": 4, "val_every": 2, "val_batches": 1, "progress_bar": False,
                  "exact_match_samples": 0}}))
    assert main(["train", str(cfg), "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "arch-zoo: note: the corpus was cut: read 5,000 of 13,200 characters (max_chars: 5,000)\n" in err
    assert "arch-zoo: warning: model.position: sinusoidal adds a signal 35x the token embeddings'" in err
    task = json.loads((tmp_path / "run" / "summary.json").read_text())["task"]
    assert (task["chars"], task["total_chars"], task["max_chars"]) == (5000, 13_200, 5000)
    train = ("the quick brown fox jumps over the lazy dog\n" * 300)[:4500]
    from collections import Counter

    from scipy.stats import entropy

    assert abs(task["unigram_loss"] - entropy(list(Counter(train).values()))) < 1e-12
    notes = load_runs(tmp_path / "run").attrs["load_notes"]
    assert any(n.startswith("warning: ") and "did not train: 1 of 1 completed runs (seed 0) ended at val/loss" in n
               and f"above the unigram loss {task['unigram_loss']:.3f}" in n for n in notes), notes
    assert "data: the corpus was cut: read 5,000 of 13,200 characters (max_chars: 5,000); every run read only that " \
           "part." in notes
