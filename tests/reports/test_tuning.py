"""README "Per-variant tuning": the report shows each variant's tuning curve (a table and
plots/tuning.png) and its chosen value, and warns when the choice is an end of the range."""
from arch_zoo.reports.tuning import tuning_notes, tuning_plot, tuning_table


def _record(rows):
    return {"key": "train.lr", "select": "val/loss", "goal": None,
            "runs": [{"variant": v, "value": x, "seed": s, "status": st, "reason": None, "metric": m, "run_dir": ""}
                     for v, x, s, st, m in rows]}


RECORD = _record([("a", 0.001, 9, "completed", 2.0), ("a", 0.01, 9, "completed", 1.5), ("a", 0.1, 9, "diverged", None),
                  ("b", 0.001, 9, "completed", 1.9), ("b", 0.01, 9, "completed", 1.8), ("b", 0.1, 9, "completed", 1.2),
                  ("c", 0.001, 9, "completed", 1.0), ("c", 0.01, 9, "running", None), ("c", 0.1, 9, "pending", None)])


def test_the_tuning_table_marks_each_choice_and_shows_what_did_not_complete(tmp_path):
    table = tuning_table(RECORD).set_index("variant")
    assert list(table.columns) == ["0.001", "0.01", "0.1", "chosen train.lr"]
    assert table.loc["a"].tolist() == ["2.000", "**1.500**", "diverged", "0.01"]
    assert table.loc["b", "0.1"] == "**1.200**" and table.loc["b", "chosen train.lr"] == "0.1"
    assert table.loc["c"].tolist() == ["1.000", "running", "pending", "not yet (stage 1 is unfinished)"]
    notes = "\n".join(tuning_notes(RECORD))
    assert "warning: the best train.lr for b is the largest tried (0.1)" in notes
    assert "for a is" not in notes and "for c is" not in notes  # a: inside the range; c: not chosen yet
    png = tuning_plot(RECORD, tmp_path)
    assert png.is_file() and png.with_suffix(".svg").is_file()
