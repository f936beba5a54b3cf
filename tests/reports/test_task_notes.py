"""Issue 26 §2: the report flags a variant whose runs ended at or near the unigram loss (they did not
train) instead of ranking it silently, and says when the corpus was cut."""
import json

from arch_zoo.reports.aggregate import summarize
from arch_zoo.reports.load import load_runs
from arch_zoo.reports.tables import footnotes
from tests.reports.sweeps import write_sweep

UNIGRAM = 3.30


def _with_task(sweep, task):
    for summary in sweep.glob("runs/*/summary.json"):
        data = json.loads(summary.read_text())
        summary.write_text(json.dumps({**data, "task": task}))


def test_a_variant_stalled_at_the_unigram_loss_is_flagged(tmp_path):
    losses = {"sinusoidal": [3.29, 3.30, 3.28, 3.31], "rope": [2.01, 2.06, 1.99, 2.03],
              "alibi": [2.05, 3.25, 2.09, 2.07]}  # alibi: one seed of four stalled
    sweep = write_sweep(tmp_path / "s", losses, status={})
    _with_task(sweep, {"unigram_loss": UNIGRAM, "chars": 1_000_000, "total_chars": 20_011_402, "max_chars": 1_000_000})
    notes = footnotes(summarize(load_runs(sweep)))
    stalled = [n for n in notes if "did not train" in n]
    assert len(stalled) == 2, notes
    assert stalled[0].startswith("warning: position=sinusoidal did not train: 4 of 4 completed runs (seed 0, 1, 2, 3) "
                                 "ended at val/loss 3.280-3.310, within 5% of (or above) the unigram loss 3.300")
    assert "never got below it" in stalled[0] and "not the architecture" in stalled[0]
    assert stalled[1].startswith("warning: position=alibi did not train: 1 of 4 completed runs (seed 1) ended at "
                                 "val/loss 3.250")
    assert "data: the corpus was cut: read 1,000,000 of 20,011,402 characters (max_chars: 1,000,000)" in "\n".join(notes)


def test_no_flag_without_a_recorded_unigram_loss_or_when_runs_learned(tmp_path):
    sweep = write_sweep(tmp_path / "old", {"sinusoidal": [3.29] * 4, "rope": [2.0] * 4}, status={})
    notes = footnotes(summarize(load_runs(sweep)))  # summaries from before the unigram loss was recorded
    assert not [n for n in notes if "did not train" in n or "corpus was cut" in n]
    _with_task(sweep, {"unigram_loss": 4.0, "chars": 10, "total_chars": 10, "max_chars": None})
    notes = footnotes(summarize(load_runs(sweep)))  # 3.29 is 18% below 4.0: it learned something
    assert not [n for n in notes if "did not train" in n or "corpus was cut" in n]


def _documents(sweep, separate):
    """Records task.documents: separate in the runs of the variants ``separate`` (the others record nothing,
    as a joined run and every run before the option do)."""
    for summary in sweep.glob("runs/*/summary.json"):
        variant = json.loads((summary.parent / "run.json").read_text())["variant"]
        data = json.loads(summary.read_text())
        summary.write_text(json.dumps({**data, "task": {"documents": "separate"} if variant in separate else {}}))


def test_the_report_says_which_variants_kept_their_documents_apart(tmp_path):
    sweep = write_sweep(tmp_path / "s", {"sinusoidal": [2.1, 2.2], "rope": [2.0, 2.1]}, status={})
    assert not [n for n in footnotes(summarize(load_runs(sweep))) if "task.documents" in n]
    _documents(sweep, ["position=rope"])
    notes = [n for n in footnotes(summarize(load_runs(sweep))) if "task.documents" in n]
    assert notes == ["data: the variants differ in task.documents (separate: each document on its own; joined: "
                     "documents run into each other): separate in position=rope; joined in position=sinusoidal."]
    _documents(sweep, ["position=rope", "position=sinusoidal"])
    notes = [n for n in footnotes(summarize(load_runs(sweep))) if "task.documents" in n]
    assert notes == ["data: every run kept the documents a window packs apart (task.documents: separate): masked "
                     "attention, states reset at each document start."]
