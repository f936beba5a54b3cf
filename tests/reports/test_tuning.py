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


def test_a_value_pruned_by_successive_halving_shows_its_metric_at_its_rung_and_is_not_chosen(tmp_path):
    record = _record([("a", 0.001, 9, "pruned", 3.0), ("a", 0.01, 9, "pruned", 2.5), ("a", 0.1, 9, "completed", 1.0),
                      ("b", 0.001, 9, "completed", 1.9), ("b", 0.01, 9, "pruned", 0.5),
                      ("b", 0.1, 9, "diverged", None)])
    for run, step in zip(record["runs"], (4, 8, None, None, 4, None)):
        run["pruned_at"] = step
    record["halving"] = {"eta": 2, "min_steps": 4}
    table = tuning_table(record).set_index("variant")
    assert table.loc["a"].tolist() == ["3.000 (pruned at step 4)", "2.500 (pruned at step 8)", "**1.000**", "0.1"]
    assert table.loc["b"].tolist() == ["**1.900**", "0.5000 (pruned at step 4)", "diverged", "0.001"]  # 0.5: early
    assert "successive halving (eta 2, min_steps 4): a value marked pruned stopped at that rung" in "\n".join(
        tuning_notes(record))
    assert tuning_plot(record, tmp_path).is_file()


def test_the_report_chooses_by_the_rule_each_run_recorded_ties_to_the_value_tried_first():
    """run.json records stage 1's rule (values in the order tried, select, goal): with values
    [3e-3, 1e-3, 1e-2] and a tie on val/token_accuracy (max), stage 2 trains 3e-3, and so does the
    report, even given no sweep spec (several inputs); the table's columns stay ascending."""
    from arch_zoo.reports.tuning import choices, tuning_record

    rule = {"stage": "tune", "key": "train.lr", "variant": "a", "values": [3e-3, 1e-3, 1e-2],
            "select": "val/token_accuracy", "goal": "max", "halving": None}
    accuracy = {3e-3: 0.5, 1e-3: 0.5, 1e-2: 0.25}
    rows = [{"_tune": {**rule, "value": v}, "seed": 7, "status": "completed", "reason": None, "run_dir": "",
             "_metrics": {"val/token_accuracy": accuracy[v], "val/loss": 10 * v}, "_pruned_at": None, "_rungs": {}}
            for v in (1e-3, 1e-2, 3e-3)]  # the order run dirs sort in
    record = tuning_record(rows, {})
    assert (record["select"], record["goal"]) == ("val/token_accuracy", "max")
    assert choices(record)["a"].value == 3e-3
    assert list(tuning_table(record).columns) == ["variant", "0.001", "0.003", "0.01", "chosen train.lr"]


def _svg_legend(svg):
    """{label: stroke colour} of a matplotlib SVG's legend (its text is drawn as paths, after a comment)."""
    import re

    legend = svg[svg.index('id="legend_1"'):]
    return dict((label, color) for color, label in re.findall(
        r'<g id="line2d_\d+">\s*<path[^>]*stroke: (#[0-9a-f]{6})[\s\S]*?<!-- (.*?) -->', legend))


def _svg_bars(svg):
    """{x tick label: fill colour} of a matplotlib bar chart's SVG."""
    import re

    fills = re.findall(r'<g id="patch_\d+">\s*<path[^>]*clip-path[^>]*style="fill: (#[0-9a-f]{6})', svg)
    labels = re.findall(r'<g id="xtick_\d+">[\s\S]*?<!-- (.*?) -->', svg)
    return dict(zip(labels, fills))


def test_the_html_report_shows_the_tuning_table_and_each_variant_in_one_colour_in_every_plot(tmp_path):
    """The HTML page has report.md's tuning table (each value's metric, the rung a value was pruned at,
    the choice in bold), and a variant is one colour in every figure: the interactive curves, the
    static curves and bars, and the tuning curves of its stage-1 self, though the table ranks alibi
    first and the plan lists rope first."""
    import json
    import re
    from html.parser import HTMLParser

    from arch_zoo.reports import write_report
    from tests.reports.sweeps import CHOSEN, TUNING, write_tuned_sweep

    out = write_report(write_tuned_sweep(tmp_path / "tuned"), tmp_path / "report", formats="html")["out_dir"]
    page = (out / "report.html").read_text()

    class Tables(HTMLParser):
        """{h2 text: rows of cell texts} of the first table after each h2; <strong> reads as **."""

        def __init__(self):
            super().__init__()
            self.tables, self.title, self.h2, self.rows, self.cell = {}, "", None, None, None

        def handle_starttag(self, tag, attrs):
            if tag == "h2":
                self.h2 = ""
            elif tag == "table" and self.title not in self.tables:
                self.rows = self.tables.setdefault(self.title, [])
            elif tag == "tr" and self.rows is not None:
                self.rows.append([])
            elif tag in ("td", "th") and self.rows is not None:
                self.cell = ""
            elif tag == "strong" and self.cell is not None:
                self.cell += "**"

        def handle_endtag(self, tag):
            if tag == "h2":
                self.title, self.h2 = self.h2, None
            elif tag == "strong" and self.cell is not None:
                self.cell += "**"
            elif tag in ("td", "th") and self.cell is not None:
                self.rows[-1].append(self.cell)
                self.cell = None
            elif tag == "table":
                self.rows = None

        def handle_data(self, data):
            if self.h2 is not None:
                self.h2 += data
            elif self.cell is not None:
                self.cell += data

    parser = Tables()
    parser.feed(page)
    head, *rows = parser.tables["Tuning (stage 1): val/loss against train.lr"]
    assert head == ["variant", "0.001", "0.01", "chosen train.lr"]
    cells = {r[0]: r[1:] for r in rows}
    for (position, lr), outcome in TUNING.items():
        text = f"{outcome[1]:.3f} (pruned at step {outcome[0]})" if isinstance(outcome, tuple) else f"**{outcome:.3f}**"
        assert cells[f"position={position}"][head.index(str(lr)) - 1] == text
    assert {v: c[-1] for v, c in cells.items()} == {f"position={p}": str(lr) for p, lr in CHOSEN.items()}

    data = json.loads(re.search(r'id="az-data">(.*?)</script>', page).group(1))
    curves = _svg_legend((out / "plots" / "curves_val_loss.svg").read_text())
    bars = _svg_bars((out / "plots" / "final_val_loss.svg").read_text())
    tuning = _svg_legend((out / "plots" / "tuning.svg").read_text())
    variants = {f"position={p},lr={lr}": f"position={p}" for p, lr in CHOSEN.items()}
    assert list(bars) == ["position=alibi,lr=0.001", "position=rope,lr=0.01"]  # ranked: alibi first
    for variant, base in variants.items():
        assert data["colors"][variant] == curves[variant] == bars[variant] == tuning[base], variant
    assert len({data["colors"][v] for v in variants}) == len(variants)
