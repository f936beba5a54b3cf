"""Exports parse back, LaTeX is well-formed, and user strings are escaped in every format."""
import base64
import hashlib
import html
import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest

from arch_zoo.formatting import number
from arch_zoo.reports import write_report
from arch_zoo.reports.export import latex, tex_escape
from tests.reports.sweeps import LOSS, write_sweep

EVIL = "<script>alert(1)</script>"
TEX_EVIL = r"50%_a&b$#{}~^\x"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = write_sweep(tmp_path_factory.mktemp("sweep") / "pos")
    return write_report(root, root.parent / "report")


@pytest.mark.parametrize("name", ["runs", "variants"])
def test_csv_round_trip(report, name):
    frame = report[name]
    back = pd.read_csv(report["out_dir"] / f"{name}.csv")
    assert list(back.columns) == list(frame.columns)
    pd.testing.assert_frame_equal(back, frame.reset_index(drop=True), check_dtype=False, check_exact=False,
                                  rtol=1e-12)


@pytest.mark.parametrize("name", ["runs", "variants"])
def test_parquet_round_trip(report, name):
    frame = report[name]
    back = pd.read_parquet(report["out_dir"] / f"{name}.parquet")
    pd.testing.assert_frame_equal(back, frame, check_dtype=False)
    assert back.attrs.get("metric") == "val/loss"  # a saved frame can be summarized again


def _strip_escaped(text):
    return re.sub(r"\\[{}]", "", re.sub(r"(?m)(?<!\\)%.*$", "", text))


def _balanced(text):
    depth = 0
    for ch in _strip_escaped(text):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _rows(tex):
    body = tex.split("\\midrule")[1].split("\\bottomrule")[0]
    return [line for line in body.strip().splitlines() if line.strip()]


def test_latex_is_well_formed_booktabs_with_best_in_bold(report):
    tex = (report["out_dir"] / "table.tex").read_text()
    assert _balanced(tex)
    assert tex.index("\\begin{tabular}") < tex.index("\\toprule") < tex.index("\\midrule") \
        < tex.index("\\bottomrule") < tex.index("\\end{tabular}")
    assert tex.count("\\toprule") == tex.count("\\midrule") == tex.count("\\bottomrule") == 1
    spec = re.search(r"\\begin\{tabular\}\{([lrc]+)\}", tex).group(1)
    header = tex.split("\\toprule")[1].split("\\midrule")[0]
    for line in [header.strip()] + _rows(tex):
        assert line.endswith("\\\\")
        assert len(re.findall(r"(?<!\\)&", line)) == len(spec) - 1
    rows = {line.split(" & ")[1]: line for line in _rows(tex)}
    assert set(rows) == {"rope", "alibi", "sinusoidal"}
    # val/loss (min) and val/token_accuracy (max): rope is best on both; sinusoidal is worst on both
    assert rows["rope"].count("\\textbf{") == len(re.findall(r"\\textbf\{", tex)) >= 2
    assert "\\textbf{" not in rows["sinusoidal"]
    assert re.search(r"\\textbf\{2\.0\d+ \$\\pm\$ 0\.\d+\}", rows["rope"])  # mean ± std in the bold cell
    assert "±" not in _strip_escaped(tex)  # only $\pm$ in the tabular body


def test_latex_escapes_special_characters(tmp_path):
    root = write_sweep(tmp_path / "pos", labels={"rope": TEX_EVIL})
    tex = latex(write_report(root, tmp_path / "out", formats="csv")["variants"])
    assert tex_escape(TEX_EVIL) in tex
    assert tex_escape(TEX_EVIL) == (r"50\%\_a\&b\$\#\{\}\textasciitilde{}\textasciicircum{}\textbackslash{}x")
    assert _balanced(tex)
    for line in _rows(tex):
        assert len(re.findall(r"(?<!\\)&", line)) == len(_rows(tex)[0].split(" & ")) - 1


def test_markdown_shows_every_plot_written(report):
    md = (report["out_dir"] / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\((plots/[^)]+\.png)\)", md)
    pngs = sorted(p.relative_to(report["out_dir"]).as_posix() for p in (report["out_dir"] / "plots").glob("*.png"))
    assert "## Plots" in md and sorted(links) == pngs and "plots/curves_val_loss.png" in links


def test_markdown_table(report):
    md = (report["out_dir"] / "report.md").read_text()
    tables = [[line for line in block.splitlines() if line.startswith("|")] for block in md.split("\n\n")]
    tables = [t for t in tables if t]
    widths = [{len(re.findall(r"(?<!\\)\|", line)) for line in t} for t in tables]
    assert len(tables) == 3 and all(len(w) == 1 for w in widths)  # ranked metric, costs and others, runs
    main, more = ([c.strip() for c in t[0].strip("|").split("|")] for t in tables[:2])
    # README: the ranked metric's statistics first, in a table that fits a screen
    assert main == ["position", "seeds ok", "val/loss ↓", "95% CI", "Δ vs baseline [Holm CI]", "CI level", "p",
                    "p (Holm)", "verdict", "margin", "d_z", "seeds needed", "rank"]
    assert more[0] == "position" and "params" in more and "val/token_accuracy" in more and "val/loss ↓" not in more
    csv_columns = pd.read_csv(report["out_dir"] / "variants.csv").columns
    assert {"val/loss best_seed", "val/token_accuracy p", "params", "wall_time_s"} <= set(csv_columns)  # complete
    rope = np.array([LOSS["rope"][s] for s in (0, 1, 3)])  # seed 2 failed
    assert "| rope " in md and f"{number(rope.mean())} ± {number(rope.std(ddof=1))}" in md
    assert "failed" in md and "CUDA out of memory" in md and "diverged" in md


@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    root = write_sweep(tmp_path_factory.mktemp("evil") / "pos", labels={"rope": EVIL},
                       status={("rope", 1): ("failed", "<b>bold</b> & <img src=x onerror=alert(2)>")})
    return write_report(root, root.parent / "report")


def test_markdown_escapes_html(evil):
    md = (evil["out_dir"] / "report.md").read_text()
    assert EVIL not in md and "<img" not in md and "<b>" not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md


class _Collector(HTMLParser):
    VOID = {"meta", "link", "img", "br", "hr", "input"}

    def __init__(self):
        super().__init__()
        self.stack, self.tags, self.text, self.errors = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def test_html_escapes_user_strings_and_is_self_contained(evil):
    page = (evil["out_dir"] / "report.html").read_text()
    assert EVIL not in page and "<img src=x" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    parsed = _Collector()
    parsed.feed(page)
    assert not parsed.errors and not parsed.stack  # every tag closed, in order
    # scripts: the interactive curves' data (never executed) and two inline scripts, each allowed by
    # its hash in the CSP and nothing else; none is fetched
    scripts = [a for t, a in parsed.tags if t == "script"]
    assert [a.get("type") for a in scripts] == ["application/json", None, None] and all("src" not in a for a in scripts)
    bodies = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    hashes = ["'sha256-" + base64.b64encode(hashlib.sha256(b.encode()).digest()).decode() + "'" for b in bodies]
    csp = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1))
    assert csp == "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src " + " ".join(hashes)
    assert EVIL in "".join(parsed.text)  # shown to the reader as text
    images = [a["src"] for t, a in parsed.tags if t == "img"]
    assert len(images) >= 3 and all(src.startswith("data:image/png;base64,") for src in images)
    assert all(base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG") for src in images)
    links = [a.get(k) or "" for _, a in parsed.tags for k in ("src", "href")]
    assert not [u for u in links if u.startswith(("http:", "https:", "//"))]  # nothing fetched from the network


def test_greedy_decodings_of_the_lowest_completed_seed_are_shown_escaped(tmp_path):
    import json

    root = write_sweep(tmp_path / "pos", status={})
    for run in (root / "runs").iterdir():
        summary = json.loads((run / "summary.json").read_text())
        seed = run.name.rsplit("-s", 1)[1]
        summary["samples"] = [{"prompt": f"a b | {EVIL}", "target": "a b", "greedy": f"seed {seed}", "exact": False}]
        (run / "summary.json").write_text(json.dumps(summary))
    result = write_report(root, tmp_path / "r", formats="md,html")
    md = (tmp_path / "r" / "report.md").read_text()
    section = md.split("## Greedy decodings: position=rope")[1].split("##")[0]
    assert "seed 0" in section and "seed 1" not in section
    assert r"a b \| &lt;script&gt;" in section and EVIL not in md
    html_text = (tmp_path / "r" / "report.html").read_text()
    assert "<h2>Greedy decodings: position=alibi</h2>" in html_text and EVIL not in html_text
    assert result["runs"].attrs["samples"]["position=sinusoidal"][0]["greedy"] == "seed 0"


def test_markdown_costs_show_each_variants_budget_and_mfu(tmp_path):
    """README: the report "states the budget and each variant's actual tokens, parameters and FLOPs"
    (issue 16 §2) and "reports show MFU" (issue 18 §2), in the Markdown table as in the CSV."""
    import json

    root = write_sweep(tmp_path / "pos")
    for run_dir in (root / "runs").iterdir():
        record = json.loads((run_dir / "run.json").read_text())
        steps = 60 if "alibi" in record["variant"] else 30
        record["budget"] = {"match": "flops", "steps": steps, "tokens": steps * 1000, "params": 1000,
                            "flops": steps * 2.0e9}
        (run_dir / "run.json").write_text(json.dumps(record))
        if (run_dir / "summary.json").exists():
            summary = json.loads((run_dir / "summary.json").read_text())
            (run_dir / "summary.json").write_text(json.dumps({**summary, "mfu": 0.125, "step": steps}))
    report = write_report(root, tmp_path / "report", formats="md,csv")
    costs = [b for b in (report["out_dir"] / "report.md").read_text().split("\n\n") if "train FLOPs" in b][0]
    header = [c.strip() for c in costs.splitlines()[0].strip("|").split("|")]
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.strip("|").split("|")] for r in costs.splitlines()[2:]}
    col = {name: header.index(name) for name in ("train tokens", "train FLOPs", "MFU")}
    assert [rows["alibi"][col[c]] for c in col] == ["60.0k", "120G", "12.5%"]
    assert [rows["rope"][col[c]] for c in col] == ["30.0k", "60.0G", "12.5%"]
    variants = pd.read_csv(report["out_dir"] / "variants.csv").set_index("model.position")
    assert variants.loc["alibi", "train_flops"] == pytest.approx(1.2e11) and variants.loc["rope", "mfu"] == 0.125
