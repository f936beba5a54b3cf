"""Write a report: CSV and Parquet (per run and per variant), Markdown, LaTeX (booktabs) and a
self-contained HTML page with the plots embedded.

Every string a user controls (variant names, setting values, failure reasons) is escaped for the
format it lands in: HTML entities in Markdown and HTML, LaTeX specials in LaTeX.
"""
from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Union

import pandas as pd

from ..errors import ConfigError
from ..metrics import check_claim
from ..writable import check_dir
from .aggregate import Baseline, check_options, summarize
from .colors import variant_colors
from . import frontier
from .html import page
from .load import goal_for, load_groups
from .provenance import provenance_lines, sample_rows
from .scaling import analyse, render as scaling_render
from . import suite_render
from .suite import analyse as suite_analysis
from .tables import display, footnotes, main_and_more, other_metrics, runs_display, title
from .tuning import tuning_plot, tuning_table
from .within import within as within_levels
from . import within_render

FORMATS = ("md", "csv", "tex", "parquet", "html", "plots")
DEFAULT_FORMATS = ("md", "csv", "tex", "parquet", "html")


def parse_formats(text: Union[str, Iterable[str], None]) -> List[str]:
    if text is None:
        return list(DEFAULT_FORMATS)
    items = [f.strip().lower() for f in (text.split(",") if isinstance(text, str) else text) if f.strip()]
    bad = [f for f in items if f not in FORMATS]
    if bad or not items:
        raise ConfigError("format", f"unknown format '{','.join(bad)}'; choices: {', '.join(FORMATS)}")
    return list(dict.fromkeys(items))


# ---- CSV / Parquet -------------------------------------------------------------------------------------

def _parquet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Arrow needs one type per column: a setting that is 4 in one run and 'auto' in another becomes text."""
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == object:
            kinds = {type(v) for v in out[col] if v is not None and not (isinstance(v, float) and math.isnan(v))}
            if len(kinds) > 1:
                out[col] = out[col].map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v))
                                        else str(v))
    try:
        json.dumps(out.attrs)
    except (TypeError, ValueError):
        out.attrs = {}
    return out


def write_tables(runs: pd.DataFrame, table: pd.DataFrame, out: Path, formats: Sequence[str]) -> List[Path]:
    written = []
    for name, frame in (("runs", runs), ("variants", table)):
        if "csv" in formats:
            frame.to_csv(out / f"{name}.csv", index=False)
            written.append(out / f"{name}.csv")
        if "parquet" in formats:
            _parquet_safe(frame).to_parquet(out / f"{name}.parquet", index=False)
            written.append(out / f"{name}.parquet")
    if "csv" in formats and runs.attrs.get("tuning"):  # a tuned sweep's stage 1, one row per run
        pd.DataFrame(runs.attrs["tuning"]["runs"]).to_csv(out / "tuning.csv", index=False)
        written.append(out / "tuning.csv")
    front = frontier.frontier_frame(table, exclude=_tuned(runs))
    if "csv" in formats and front is not None:  # the ranked metric against decoding-state bytes
        front.to_csv(out / "frontier.csv", index=False)
        written.append(out / "frontier.csv")
    return written


def _tuned(runs: pd.DataFrame) -> List[str]:
    """A tuned sweep's tuned key: each variant's own choice, no axis to group by."""
    key = (runs.attrs.get("tuning") or {}).get("key")
    return [key] if key else []


# ---- Markdown ------------------------------------------------------------------------------------------

def md_escape(text: object) -> str:
    """Markdown renderers pass raw HTML through and '|' ends a table cell."""
    return html.escape(" ".join(str(text).split()), quote=False).replace("|", r"\|")


def _md_table(frame: pd.DataFrame) -> str:
    return frame.rename(columns=md_escape).map(md_escape).to_markdown(index=False, disable_numparse=True)


def _md_code(line: str) -> str:
    """Escape a line but keep its `command` spans as code (inside them only the backtick matters)."""
    pieces = " ".join(line.split()).split("`")
    return "".join(f"`{p}`" if i % 2 else html.escape(p, quote=False).replace("|", r"\|")
                   for i, p in enumerate(pieces))


def _md_tables(table: pd.DataFrame) -> List[str]:
    """The ranked metric's table, then costs and the other metrics, then the footnotes."""
    main, more = main_and_more(table)
    parts = [_md_table(main) if len(main) else "(no runs)", ""]
    if len(main) and len(more.columns) > 1:
        parts += ["Costs and other metrics:", "", _md_table(more), ""]
    return parts + [f"- {md_escape(line)}" for line in footnotes(table)]


def markdown(runs: pd.DataFrame, table: pd.DataFrame, command: Optional[str] = None,
             plots: Sequence[Path] = (), scaling=None, within=None) -> str:
    """The report as Markdown; ``plots`` (paths relative to the report) are shown under "Plots";
    ``scaling`` (a ladder's ``reports.scaling.Scaling``) and ``within`` (``reports.within.Within``) get their
    own sections."""
    run_rows = runs_display(runs, table.attrs.get("metric", ""))
    parts = [f"# {md_escape(title(table))}", ""]
    description = runs.attrs.get("description", "").strip()
    if description:
        parts += [md_escape(p) for p in description.split("\n\n")] + [""]
    parts += _md_tables(table)
    parts += frontier.markdown(table, _md_table, md_escape, exclude=_tuned(runs))
    if within is not None:
        parts += within_render.markdown(within, _md_table, md_escape)
    tuning = runs.attrs.get("tuning")
    if tuning:
        parts += ["", f"## Tuning (stage 1): {md_escape(tuning['select'])} against {md_escape(tuning['key'])}", "",
                  "Mean over the tuning seeds; bold: the value each variant was chosen at (plot: plots/tuning.png).",
                  "", _md_table(tuning_table(tuning))]
    if scaling is not None:
        figure = next((p for p in plots if p.stem.startswith("scaling")), None)
        parts += scaling_render.markdown(scaling, _md_table, md_escape, figure)
    for variant, rows in sample_rows(runs).items():
        parts += ["", f"## Greedy decodings: {md_escape(variant)}", "", _md_table(pd.DataFrame(rows))]
    if plots:
        parts += ["", "## Plots", ""] + [f"![{md_escape(p.stem)}]({p.as_posix()})" for p in plots]
    provenance = provenance_lines(runs, command)
    if provenance:
        parts += ["", "## Provenance", ""] + [f"- {_md_code(line)}" for line in provenance]
    parts += ["", "## Runs", "", _md_table(run_rows) if len(run_rows) else "(no runs)", ""]
    return "\n".join(parts)


# ---- LaTeX ---------------------------------------------------------------------------------------------

_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
        ">": r"\textgreater{}", "|": r"\textbar{}"}
_PM = "\x00pm\x00"  # survives escaping, then becomes $\pm$
_SYMBOLS = {_PM: r"$\pm$", "Δ": r"$\Delta$", "↓": r"$\downarrow$", "↑": r"$\uparrow$", "−": "-"}


def tex_escape(text: object) -> str:
    out = "".join(_TEX.get(ch, ch) for ch in " ".join(str(text).split()))
    for symbol, tex in _SYMBOLS.items():
        out = out.replace(symbol, tex)
    return out


def _best_rows(table: pd.DataFrame, metric: str) -> set:
    col = f"{metric} mean"
    if col not in table.columns or not table[col].notna().any():
        return set()
    goal = goal_for(table.attrs, metric)
    if goal is None:  # nobody said which way it improves: bold nothing
        return set()
    values = table[col]
    best = values.min() if goal == "min" else values.max()
    return set(table.index[values == best])


def latex(table: pd.DataFrame) -> str:
    """A booktabs tabular: mean ± std cells, the best mean of each metric column in bold."""
    shown = display(table, pm=_PM).drop(columns=["notes", "FLOPs/token", "peak MB", "best seed"], errors="ignore")
    if shown.empty:
        return f"% {tex_escape(title(table))}: no runs\n"
    metric = table.attrs.get("metric", "val/loss")
    metric_cols = {c: metric for c in shown.columns if c.startswith(metric + " ")}
    metric_cols.update({m: m for m in other_metrics(table) if m in shown.columns})
    bold = {col: _best_rows(table, m) for col, m in metric_cols.items()}
    numeric = {"rank", "params", "FLOPs/token", "state B/token", "tokens/s", "bytes/s", "peak MB", "p", "p (Holm)",
               "d_z", "seeds needed", "best seed", *metric_cols}
    spec = "".join("r" if c in numeric else "l" for c in shown.columns)
    lines = ["% " + tex_escape(title(table)), "% requires \\usepackage{booktabs}",
             f"\\begin{{tabular}}{{{spec}}}", "\\toprule",
             " & ".join(tex_escape(c) for c in shown.columns) + r" \\", "\\midrule"]
    for i, (_, row) in enumerate(shown.iterrows()):
        cells = []
        for col in shown.columns:
            cell = tex_escape(row[col])
            if cell and i in bold.get(col, ()):
                cell = f"\\textbf{{{cell}}}"
            cells.append(cell)
        lines.append(" & ".join(cells) + r" \\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    lines += ["% " + tex_escape(note) for note in footnotes(table)]
    return "\n".join(lines) + "\n"


# ---- the whole report ----------------------------------------------------------------------------------

def write_report(sweep_dir: Union[str, Path, Sequence[Union[str, Path]]], out_dir: Union[str, Path, None] = None,
                 formats: Union[str, Iterable[str], None] = None, metric: Optional[str] = None,
                 baseline: Baseline = None, command: Optional[str] = None, ci: str = "t",
                 min_effect: Optional[float] = None, refresh_s: Optional[int] = None,
                 extrapolate_to: Optional[float] = None, claim: Optional[Dict[str, float]] = None,
                 within: Optional[str] = None) -> Dict[str, object]:
    """Load a sweep (or several sweep/run dirs), summarize, and write every requested format.
    ``command`` (the `arch-zoo report` call) is printed in the report's provenance; ``ci`` and
    ``min_effect`` and ``claim`` are ``summarize``'s; ``refresh_s`` makes the HTML page reload itself (``--watch``).
    A ladder sweep (``scale``) gets a scaling section (``reports.scaling``); ``extrapolate_to`` (FLOPs past
    its largest rung) adds an extrapolated compute multiplier, labelled as such. ``within`` (a swept key):
    each variant also against the baseline at the same level of that key, and the interaction
    (``reports.within``), in its own section and within.csv.

    Runs of different tasks or evaluations are not ranked together: each task gets its own report
    in ``out_dir/<task>/``, and ``out_dir/report.md`` shows each task's table under its name.

    Returns {"out_dir", "runs", "variants", "files", "groups"}; ``out_dir`` defaults to
    reports/<sweep name>/; ``groups`` holds one {"runs", "variants"} per task (``runs`` and
    ``variants`` are the first's)."""
    fmts = parse_formats(formats)
    check_options(ci, min_effect)  # before loading: a typo costs no time
    check_claim(claim)
    groups = load_groups(sweep_dir)
    tables = [summarize(runs, metric=metric, baseline=baseline, ci=ci, min_effect=min_effect, claim=claim)
              for runs in groups]
    scalings = [analyse(runs, table, extrapolate_to) for runs, table in zip(groups, tables)]  # errors before writing
    suite = suite_analysis(groups, metric, tables)  # a probe suite: every group's runs scored together
    withins = [within_levels(runs, within, metric, baseline, ci, min_effect) if within else None for runs in groups]
    out = Path(out_dir) if out_dir is not None else Path("reports") / str(groups[0].attrs.get("name") or "report")
    check_dir(out, "--out", "the report is written")
    out.mkdir(parents=True, exist_ok=True)
    if len(groups) == 1:
        files = _write_one(groups[0], tables[0], out, fmts, command, refresh_s, scalings[0], withins[0])
    else:
        files, parts = [], [f"# {md_escape(groups[0].attrs.get('name') or 'report')}: "
                            f"{len(groups)} tasks, each ranked on its own", ""]
        for runs, table, scaling, levels in zip(groups, tables, scalings, withins):
            sub = out / _slug(str(runs.attrs["task"]))
            sub.mkdir(parents=True, exist_ok=True)
            files += _write_one(runs, table, sub, fmts, command, refresh_s, scaling, levels)
            parts += [f"## Task: {md_escape(runs.attrs['task'])} ({len(runs)} runs; full report in "
                      f"{md_escape(sub.name)}/)", "", f"{md_escape(title(table))}", "", *_md_tables(table), ""]
        if suite is not None:
            parts[2:2] = suite_render.markdown(suite, _md_table, md_escape)[1:] + [""]
        if "md" in fmts:
            (out / "report.md").write_text("\n".join(parts), encoding="utf-8")
            files.append(out / "report.md")
    if suite is not None:
        files += suite_render.write(suite, out, fmts)
        if len(groups) == 1 and "md" in fmts:
            with (out / "report.md").open("a", encoding="utf-8") as f:
                f.write("\n".join(suite_render.markdown(suite, _md_table, md_escape)) + "\n")
    return {"out_dir": out, "runs": groups[0], "variants": tables[0], "files": files, "suite": suite,
            "groups": [{"runs": r, "variants": t, "scaling": sc, "within": w}
                       for r, t, sc, w in zip(groups, tables, scalings, withins)]}


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text).strip("_")[:60] or "task"


def _write_one(runs: pd.DataFrame, table: pd.DataFrame, out: Path, fmts: Sequence[str],
               command: Optional[str], refresh_s: Optional[int] = None, scaling=None, within=None) -> List[Path]:
    files = write_tables(runs, table, out, fmts)
    if within is not None:
        files += within_render.write(within, out, fmts)
    if scaling is not None:
        files += scaling_render.write(scaling, out, fmts)
    plots: List[Path] = []
    if "html" in fmts or "plots" in fmts:
        from .plots import write_plots  # matplotlib: half a second that tables-only callers never pay

        plots = write_plots(runs, table, out / "plots")
        if runs.attrs.get("tuning"):
            plots.append(tuning_plot(runs.attrs["tuning"], out / "plots", variant_colors(runs)))
        if scaling is not None:
            from .scaling.plot import scaling_figure

            plots += scaling_figure(scaling, out / "plots")
        files += [p for png in plots for p in (png, png.with_suffix(".svg"))]
    if "md" in fmts:
        (out / "report.md").write_text(markdown(runs, table, command, [p.relative_to(out) for p in plots], scaling,
                                                within), encoding="utf-8")
        files.append(out / "report.md")
    if "tex" in fmts:
        (out / "table.tex").write_text(latex(table), encoding="utf-8")
        files.append(out / "table.tex")
        if scaling is not None:
            (out / "scaling.tex").write_text(scaling_render.latex(scaling, tex_escape), encoding="utf-8")
            files.append(out / "scaling.tex")
    if "html" in fmts:
        # replaced whole: a browser reloading it (--watch) never reads half a page
        tmp = out / "report.html.tmp"
        tmp.write_text(page(runs, table, plots, command, refresh_s, scaling, within), encoding="utf-8")
        tmp.replace(out / "report.html")
        files.append(out / "report.html")
    return files
