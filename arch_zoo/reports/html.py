"""The self-contained HTML report: sortable tables, interactive curves (interactive.py) and base64
PNG plots in one file that needs no network.

Every user string goes through ``html.escape``; a Content-Security-Policy forbids any fetch besides
``data:`` images and any script but the page's own inline ones (allowed by hash), so a missed
escape still cannot run code.
"""
from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Callable, List, Optional

import pandas as pd

from .interactive import progress, section, unfinished
from .provenance import provenance_lines, sample_rows
from .scaling import render as scaling_render
from .scaling.interactive import section as scaling_plot
from .tables import footnotes, main_and_more, runs_display, title
from .tuning import tuning_table
from . import within_render

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1400px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 1em 0; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 10px; border-bottom: 1px solid #ddd; text-align: left; vertical-align: top; }
th { border-bottom: 2px solid #444; white-space: nowrap; }
table.sortable th { cursor: pointer; } th[aria-sort=ascending]::after { content: " ▲"; }
th[aria-sort=descending]::after { content: " ▼"; }
#az-variants label { margin-right: 1em; white-space: nowrap; }
td { white-space: nowrap; } td.wrap { white-space: normal; min-width: 16em; }
div.scroll { overflow-x: auto; }
tr.baseline td { background: #f3f6fb; }
td.status-completed { color: #1a7f37; } td.status-diverged, td.status-failed { color: #b42318; font-weight: 600; }
td.status-running, td.status-pending, td.status-interrupted { color: #9a6700; }
ul.notes li { margin: .2em 0; }
figure { display: inline-block; margin: 1em 1em 1em 0; } figure img { max-width: 640px; width: 100%; }
figcaption { font-size: .9em; color: #555; }
"""
WRAP = ("notes", "reason", "variant")
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src {scripts}"


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _table(frame: pd.DataFrame, row_classes: List[str] = (), status_col: str = "", sortable: bool = True,
           cell: Callable[[object], str] = esc) -> str:
    """An escaped table (``cell`` escapes each value); free-text columns wrap, numbers do not."""
    if frame.empty:
        return "<p>(no runs)</p>"
    head = "".join(f"<th>{esc(c)}</th>" for c in frame.columns)
    body = []
    for i, (_, row) in enumerate(frame.iterrows()):
        cls = f' class="{esc(row_classes[i])}"' if i < len(row_classes) and row_classes[i] else ""
        cells = []
        for col in frame.columns:
            attr = f' class="status-{esc(row[col])}"' if col == status_col else \
                ' class="wrap"' if col in WRAP else ""
            cells.append(f"<td{attr}>{cell(row[col])}</td>")
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    cls = ' class="sortable"' if sortable else ""
    return f'<div class="scroll"><table{cls}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _strong(value: object) -> str:
    """The tuning table marks each variant's choice as Markdown does (``**1.653**``): bold here."""
    text = str(value)
    return f"<strong>{esc(text[2:-2])}</strong>" if len(text) > 4 and text[:2] == text[-2:] == "**" else esc(text)


def _tuning(record: dict) -> List[str]:
    """Stage 1 of a tuned sweep, as report.md shows it: each value's metric (or its status, or the rung
    it was pruned at) and the value chosen."""
    return [f"<h2>Tuning (stage 1): {esc(record['select'])} against {esc(record['key'])}</h2>",
            "<p>Mean over the tuning seeds; bold: the value each variant was chosen at (plot: tuning, under "
            "Plots).</p>", _table(tuning_table(record), cell=_strong)]


def _figure(png: Path) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    caption = png.stem.replace("_", " ")
    return (f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{esc(caption)} (SVG: plots/{esc(png.with_suffix('.svg').name)})</figcaption></figure>")


def _code_spans(line: str) -> str:
    pieces = line.split("`")
    return "".join(f"<code>{esc(p)}</code>" if i % 2 else esc(p) for i, p in enumerate(pieces))


def page(runs: pd.DataFrame, table: pd.DataFrame, plots: List[Path], command: Optional[str] = None,
         refresh_s: Optional[int] = None, scaling=None, within=None) -> str:
    """``refresh_s``: reload every so many seconds (``arch-zoo report --watch`` while runs remain);
    ``scaling``: a ladder's scaling section (``reports.scaling``); ``within``: ``--within``'s
    (``reports.within``)."""
    main, more = main_and_more(table)
    classes = ["baseline" if b else "" for b in table["baseline"]] if "baseline" in table.columns else []
    metric = table.attrs.get("metric", "")
    run_rows = runs_display(runs, metric)
    order = [str(v) for v in table["variant"]] if "variant" in table.columns else []
    interactive, scripts = section(runs, metric, esc, order)
    ladder: List[str] = []
    if scaling is not None:
        plotted, more_scripts = scaling_plot(scaling, esc) if len(scripts) > 1 else ([], [])  # Plotly is inlined
        ladder, scripts = scaling_render.html(scaling, _table, esc) + plotted, scripts + more_scripts
    parts = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP.format(scripts=" ".join(scripts)))}">',
        *([f'<meta http-equiv="refresh" content="{int(refresh_s)}">'] if refresh_s else []),
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">', f"<title>{esc(title(table))}</title>", f"<style>{CSS}</style>",
        "</head>", "<body>", f"<h1>{esc(title(table))}</h1>",
        *(f"<p>{esc(p)}</p>" for p in runs.attrs.get("description", "").strip().split("\n\n") if p),
    ]
    if unfinished(runs):
        parts += ["<h2>Progress</h2>", _table(progress(runs))]
    parts += [
        _table(main, classes),
        *(["<h2>Costs and other metrics</h2>", _table(more, classes)] if len(more.columns) > 1 else []),
        '<ul class="notes">' + "".join(f"<li>{esc(line)}</li>" for line in footnotes(table)) + "</ul>",
        *(within_render.html(within, lambda frame: _table(frame, sortable=False), esc) if within is not None else []),
        *(_tuning(runs.attrs["tuning"]) if runs.attrs.get("tuning") else []),
        *interactive[:-1],
        *ladder,
    ]
    if plots:
        parts += ["<h2>Plots</h2>", "<div>" + "".join(_figure(p) for p in plots) + "</div>"]
    for variant, rows in sample_rows(runs).items():
        parts += [f"<h2>Greedy decodings: {esc(variant)}</h2>", _table(pd.DataFrame(rows))]
    provenance = provenance_lines(runs, command)
    if provenance:
        parts += ["<h2>Provenance</h2>",
                  '<ul class="notes">' + "".join(f"<li>{_code_spans(line)}</li>" for line in provenance) + "</ul>"]
    parts += ["<h2>Runs</h2>", _table(run_rows, status_col="status"), interactive[-1], "</body>", "</html>"]
    return "\n".join(parts) + "\n"
