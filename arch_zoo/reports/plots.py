"""Report figures, each written as PNG and SVG: validation curves (mean line, ±std band over
seeds), final-metric bars with error bars, the final metric against decoding-state bytes per token,
the final metric against a numeric setting (a width, a length; one line per value of the others),
loss against evaluation length, accuracy curves.

Figures are built on ``matplotlib.figure.Figure`` with the Agg canvas, never through pyplot: no
global backend, no display needed, safe to call from a sweep's process. Legends name the varied
settings (the variant), never run ids.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from ..formatting import si
from ..run_names import settings_label
from ..rundir import CONFIG
from .colors import palette, variant_colors
from .curves import read_curves
from .frontier import frontier_frame, numeric_axis
from .runstore import read_yaml

LENGTH = re.compile(r"^val@(\d+)/loss$")
ACCURACY = ("val/exact_match", "val/token_accuracy", "val/accuracy")
MARKERS = "osD^vP*X<>hpd8H"  # one a family on the frontier figure: more families than tab10's colours


def _text(label: str) -> str:
    """User text for matplotlib: '$' would start mathtext."""
    return str(label).replace("$", r"\$")


def _figure(width: float = 6.4, height: float = 4.0) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, out_dir: Path, stem: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / f"{stem}.png"
    # bbox_inches="tight": the image grows to hold whatever is drawn outside the figure (a legend of long
    # variant names below the axes is wider than the axes), instead of cutting it off
    fig.savefig(png, format="png", metadata={"Software": None}, bbox_inches="tight")
    fig.savefig(out_dir / f"{stem}.svg", format="svg", metadata={"Date": None},  # reproducible files
                bbox_inches="tight")
    return png


def _colors(variants: List[str]) -> Dict[str, str]:
    colors = palette(len(variants))
    return {v: colors[i % len(colors)] for i, v in enumerate(variants)}


def _legend(ax, n: int) -> None:
    """The legend below the axes, never over the data (variant names are long), the figure taller by
    its rows so the axes keep their height, and wider when the legend is wider than the figure."""
    if n:
        ncol = 1 if n <= 8 else 2
        legend = ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=ncol)
        fig = ax.figure
        width, height = fig.get_size_inches()
        legend_width = legend.get_window_extent(fig.canvas.get_renderer()).width / fig.dpi
        fig.set_size_inches(max(width, legend_width + 0.3), height + 0.4 + 0.2 * math.ceil(n / ncol))


def curves(runs: pd.DataFrame, metric: str) -> Dict[str, pd.DataFrame]:
    """variant → steps x (mean, std, n) of ``metric`` over that variant's runs that logged it."""
    out = {}
    for variant, group in runs.groupby("variant", sort=False):
        frames = [read_curves(d, metric).set_index("step")["value"].rename(i) for i, d in enumerate(group["run_dir"])]
        frames = [f for f in frames if len(f)]
        if not frames:
            continue
        wide = pd.concat(frames, axis=1).sort_index()
        wide = wide.where(np.isfinite(wide))  # a diverged run's inf/nan must not poison the mean
        out[str(variant)] = pd.DataFrame({"mean": wide.mean(axis=1), "std": wide.std(axis=1, ddof=1).fillna(0.0),
                                          "n": wide.notna().sum(axis=1)}).dropna(subset=["mean"])
    return out


def curve_plot(runs: pd.DataFrame, metric: str, out_dir: Path, stem: str, colors: Dict[str, tuple]) -> Optional[Path]:
    data = curves(runs, metric)
    if not data:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    for variant, c in data.items():
        steps = c.index.to_numpy(dtype=float)
        ax.plot(steps, c["mean"], label=_text(variant), color=colors.get(variant), marker="." if len(c) < 20 else None)
        ax.fill_between(steps, c["mean"] - c["std"], c["mean"] + c["std"], color=colors.get(variant), alpha=0.2,
                        linewidth=0)
    ax.set_xlabel("step")
    ax.set_ylabel(_text(f"{metric} (mean ± std over seeds)"))
    ax.grid(alpha=0.3)
    _legend(ax, len(data))
    return _save(fig, out_dir, stem)


def bar_plot(table: pd.DataFrame, metric: str, out_dir: Path, colors: Dict[str, tuple]) -> Optional[Path]:
    key = f"{metric} mean"
    if key not in table.columns or not table[key].notna().any():
        return None
    rows = table[table[key].notna()]
    fig = _figure(max(4.0, 0.6 * len(rows) + 2), 4.0)
    ax = fig.add_subplot()
    x = np.arange(len(rows))
    bars = ax.bar(x, rows[key], yerr=rows[f"{metric} std"].fillna(0.0), capsize=4,
                  color=[colors.get(str(v)) for v in rows["variant"]])
    labels = [_text(v) for v in rows["variant"]]
    tilt = len(rows) > 3 or sum(map(len, labels)) > 45
    ax.set_xticks(x, labels, rotation=30 if tilt else 0, ha="right" if tilt else "center", fontsize="small")
    if _ticks_crowd(ax):
        # names too long to stand under their bars: a tilted name runs off the figure's side and bottom,
        # leaving constrained layout no room for the axes ("constrained_layout not applied"); a legend
        # below, as the other plots have, is sized with the figure
        ax.set_xticks(x, [str(i + 1) for i in x])
        for i, (patch, label) in enumerate(zip(bars.patches, labels)):
            patch.set_label(f"{i + 1}: {label}")
    ax.set_ylabel(_text(f"final {metric} (mean ± std)"))
    low = (rows[key] - rows[f"{metric} std"].fillna(0)).min()
    high = (rows[key] + rows[f"{metric} std"].fillna(0)).max()
    if np.isfinite(low) and np.isfinite(high) and high > low:  # differences matter, not the distance to 0
        pad = 0.15 * (high - low)
        ax.set_ylim(max(0.0, low - pad) if low >= 0 else low - pad, high + pad)
    ax.grid(axis="y", alpha=0.3)
    if any(not p.get_label().startswith("_") for p in bars.patches):
        _legend(ax, len(rows))
    return _save(fig, out_dir, f"final_{_slug(metric)}")


def _ticks_crowd(ax) -> bool:
    """Whether the x tick labels reach past the figure's width or take half its height."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
    if not boxes:
        return False
    width = max(b.x1 for b in boxes) - min(b.x0 for b in boxes)
    height = max(b.height for b in boxes)
    return width > fig.bbox.width or height > fig.bbox.height / 2


def state_plot(table: pd.DataFrame, metric: str, out_dir: Path, colors: Dict[str, tuple]) -> Optional[Path]:
    """The ranked metric against decoding-state bytes per token, one point per variant with its 95%
    interval over seeds: the trade MHA, GQA, MLA and recurrent mixers make. None unless the variants
    with a value differ in state bytes."""
    key, state = f"{metric} mean", "state_bytes_per_token"
    if key not in table.columns or state not in table.columns:
        return None
    rows = table[table[key].notna() & table[state].gt(0)]
    if rows[state].nunique() < 2:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    for _, r in rows.iterrows():
        low, high = r.get(f"{metric} ci_low"), r.get(f"{metric} ci_high")
        err = None if pd.isna(low) or pd.isna(high) else [[r[key] - low], [high - r[key]]]
        ax.errorbar([r[state]], [r[key]], yerr=err, fmt="o", capsize=4, label=_text(r["variant"]),
                    color=colors.get(str(r["variant"])))
    ax.set_xscale("log", base=2)  # KV heads, latent ranks and windows move the state by factors
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: si(v)))
    ax.set_xlabel("decoding-state bytes per token (float32, at max_seq_len)")
    ax.set_ylabel(_text(f"final {metric} (mean, bar: 95% CI over seeds)"))
    ax.grid(alpha=0.3)
    _legend(ax, len(rows))
    return _save(fig, out_dir, f"{_slug(metric)}_vs_state_bytes")


def frontier_plot(table: pd.DataFrame, metric: str, out_dir: Path, exclude: Sequence[str] = ()) -> Optional[Path]:
    """Zoology's figure: the ranked metric against decoding-state bytes per token (log x), a marker and a
    colour per family (frontier.py: a mixer, its points the widths), the 95% interval over seeds as a
    bar, and the frontier (the best value at or below each state) as a step line through its ringed
    points. None unless the variants differ in state bytes and some family holds several of them (else
    ``state_plot`` shows the same points, and the report's frontier section names the ones on it)."""
    frame = frontier_frame(table, metric, exclude=exclude)
    if frame is None or frame["family"].nunique() == len(frame):
        return None
    cost, axis = frame.attrs["cost"], frame.attrs.get("axis")
    fig = _figure(7.2, 4.4)
    ax = fig.add_subplot()
    families = list(dict.fromkeys(frame["family"]))
    colors = palette(len(families))
    for i, family in enumerate(families):
        f = frame[frame["family"] == family]
        f = f.sort_values(axis) if axis else f
        err = np.vstack([f["mean"] - f["ci_low"], f["ci_high"] - f["mean"]]).clip(min=0)
        ax.errorbar(f[cost].to_numpy(), f["mean"].to_numpy(), yerr=np.nan_to_num(err), fmt=MARKERS[i % len(MARKERS)],
                    linestyle="-" if axis else "none", linewidth=0.8, markersize=6, capsize=3, alpha=0.9,
                    color=colors[i % len(colors)], label=_text(family))
    on = frame[frame["on_frontier"]].sort_values(cost)
    xs = [*on[cost], frame[cost].max()]  # the step runs on to the largest state: nothing above it does better
    ax.step(xs, [*on["mean"], on["mean"].iloc[-1]], where="post", color="black", linewidth=1.2, alpha=0.6,
            label="frontier: best at or below the state")
    ax.scatter(on[cost], on["mean"], s=140, facecolors="none", edgecolors="black", linewidths=1.2, zorder=3)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: si(v)))
    ax.set_xlabel("decoding-state bytes per token (float32, at max_seq_len)")
    ax.set_ylabel(_text(f"final {metric} (mean, bar: 95% CI over seeds)"))
    ax.grid(alpha=0.3)
    _legend(ax, len(families) + 1)
    return _save(fig, out_dir, f"frontier_{_slug(metric)}")


def axis_series(table: pd.DataFrame, metric: str, exclude: Sequence[str] = ()) -> Optional[Tuple[str, Dict[str, pd.DataFrame]]]:
    """(axis, {series label: frame of mean, ci_low, ci_high indexed by the axis value}) for the sweep's
    one numeric setting with 3 or more values, a series per combination of the other settings
    (Zoology's accuracy against width, one line per mixer). ``exclude``: settings that are no axis
    (a tuned key: each variant's own choice). None unless exactly one such setting exists."""
    key = f"{metric} mean"
    found = numeric_axis(table, exclude)
    if key not in table.columns or found is None:
        return None
    axis, others = found
    rows = table[table[key].notna()]
    groups = rows.groupby(others, sort=False, dropna=False) if others else [((), rows)]
    series = {}
    for values, g in groups:
        values = values if isinstance(values, tuple) else (values,)
        label = settings_label(dict(zip(others, values))) or metric
        cols = {key: "mean", f"{metric} ci_low": "ci_low", f"{metric} ci_high": "ci_high"}
        frame = g.set_index(g[axis].astype(float)).sort_index()
        series[label] = frame.reindex(columns=list(cols)).rename(columns=cols).rename_axis(axis)
    return axis, series


def axis_plot(table: pd.DataFrame, metric: str, out_dir: Path, exclude: Sequence[str] = ()) -> Optional[Path]:
    """The final metric against the sweep's numeric axis (``axis_series``), mean and 95% interval over seeds."""
    found = axis_series(table, metric, exclude)
    if found is None:
        return None
    axis, series = found
    fig = _figure()
    ax = fig.add_subplot()
    values = sorted({v for s in series.values() for v in s.index})
    log = values[0] > 0 and values[-1] / values[0] >= 4  # widths and lengths grow by factors
    for i, ((label, s), color) in enumerate(zip(series.items(), palette(len(series)))):
        shift = 0.03 * (i - (len(series) - 1) / 2)  # side by side, so that equal means keep their bars apart
        x = s.index.to_numpy(float) * 2 ** shift if log else s.index.to_numpy(float) + shift * (values[-1] - values[0])
        err = np.vstack([s["mean"] - s["ci_low"], s["ci_high"] - s["mean"]]).clip(min=0)
        ax.errorbar(x, s["mean"].to_numpy(), yerr=np.nan_to_num(err), fmt="-o", capsize=4, markersize=4, label=_text(label),
                    color=color)
    if log:
        ax.set_xscale("log", base=2)
    ax.set_xticks(values, [f"{v:g}" for v in values])
    ax.set_xlabel(axis)
    ax.set_ylabel(_text(f"final {metric} (mean, bar: 95% CI over seeds)"))
    ax.grid(alpha=0.3)
    _legend(ax, len(series))
    return _save(fig, out_dir, f"{_slug(metric)}_vs_setting_{_slug(axis)}")


def length_plot(runs: pd.DataFrame, table: pd.DataFrame, out_dir: Path, colors: Dict[str, tuple],
                train_len: Optional[int]) -> Optional[Path]:
    lengths = sorted((int(LENGTH.match(m).group(1)), m) for m in table.attrs.get("metrics", []) if LENGTH.match(m))
    if not lengths:
        return None
    if train_len and "val/loss" in table.attrs.get("metrics", []):
        lengths = sorted(lengths + [(train_len, "val/loss")])
    fig = _figure()
    ax = fig.add_subplot()
    for _, r in table.iterrows():
        pts = [(L, r.get(f"{m} mean"), r.get(f"{m} std")) for L, m in lengths]
        pts = [(L, y, 0.0 if s is None or math.isnan(s) else s) for L, y, s in pts if y is not None and not math.isnan(y)]
        if pts:
            _band(ax, *map(np.array, zip(*pts)), label=r["variant"], color=colors.get(str(r["variant"])))
    if train_len:
        ax.axvline(train_len, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evaluation length (tokens)" + (f"; trained at {train_len}" if train_len else ""))
    ax.set_ylabel("validation loss (mean, band: ± std over seeds)")
    ax.grid(alpha=0.3)
    _legend(ax, len(table))
    return _save(fig, out_dir, "loss_vs_length")


def _band(ax, x, mean, std, label, color) -> None:
    """A mean line with markers and a ± std band (over seeds)."""
    ax.plot(x, mean, label=_text(label), color=color, marker="o", markersize=4)
    ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)


def gradnorm_plots(frame: pd.DataFrame, last: pd.DataFrame, out_dir: Path) -> List[Path]:
    """From ``arch-zoo gradnorms``: the last layer's FFN gradient norm against depth, and every
    layer's FFN gradient norm in the deepest models; mean line, band ± std over seeds."""
    written = []
    colors = _colors(list(dict.fromkeys(map(str, frame["variant"]))))
    fig = _figure()
    ax = fig.add_subplot()
    for variant, g in last.groupby("variant", sort=False):
        _band(ax, g["depth"].to_numpy(float), g["mean"].to_numpy(), g["std"].fillna(0).to_numpy(), variant,
              colors[str(variant)])
    ax.set_xlabel("number of layers")
    ax.set_ylabel("grad norm of the last layer's FFN weights at init")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    _legend(ax, last["variant"].nunique())
    written.append(_save(fig, out_dir, "gradnorm_last_layer_vs_depth"))
    deepest = frame[(frame["depth"] == frame["depth"].max()) & (frame["sublayer"] == "ffn")]
    deepest = deepest[deepest["stack"] == deepest["stack"].iloc[-1]]
    fig = _figure()
    ax = fig.add_subplot()
    for variant, g in deepest.groupby("variant", sort=False):
        stats = g.groupby("layer")["grad_norm"].agg(["mean", "std"])
        _band(ax, stats.index.to_numpy(float), stats["mean"].to_numpy(), stats["std"].fillna(0).to_numpy(), variant,
              colors[str(variant)])
    ax.set_xlabel(f"layer (of {int(frame['depth'].max())})")
    ax.set_ylabel("grad norm of the layer's FFN weights at init")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    _legend(ax, deepest["variant"].nunique())
    written.append(_save(fig, out_dir, "gradnorm_by_layer"))
    return written


def _slug(metric: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", metric).strip("_")


def _train_len(runs: pd.DataFrame) -> Optional[int]:
    for d in runs["run_dir"]:
        cfg = read_yaml(Path(d) / CONFIG) or {}
        seq = (cfg.get("task") or {}).get("seq_len")
        if isinstance(seq, int):
            return seq
    return None


def write_plots(runs: pd.DataFrame, table: pd.DataFrame, out_dir: Path) -> List[Path]:
    """Every plot the runs have data for; returns the PNG paths (an SVG lies beside each)."""
    for stale in [*out_dir.glob("curves_*.*"), *out_dir.glob("final_*.*"), *out_dir.glob("loss_vs_length.*"),
                  *out_dir.glob("*_vs_state_bytes.*"), *out_dir.glob("*_vs_setting_*.*"),
                  *out_dir.glob("frontier_*.*")]:
        if stale.suffix in (".png", ".svg"):  # a previous report's plots that this one may not redraw
            stale.unlink()
    metric = table.attrs.get("metric", "val/loss")
    colors = variant_colors(runs)
    logged = set(table.attrs.get("metrics", [])) | set(runs.attrs.get("metrics", []))
    wanted = [metric] if metric.startswith("val") else []
    wanted.append("val/loss")
    if "val/exact_match" in logged:  # seq2seq tasks: accuracy over training
        wanted += list(ACCURACY)
    written = [curve_plot(runs, m, out_dir, f"curves_{_slug(m)}", colors) for m in dict.fromkeys(wanted)
               if m in logged]
    written.append(bar_plot(table, metric, out_dir, colors))
    tuned = [k for k in [(runs.attrs.get("tuning") or {}).get("key")] if k]
    written.append(state_plot(table, metric, out_dir, colors))
    written.append(frontier_plot(table, metric, out_dir, exclude=tuned))
    written.append(axis_plot(table, metric, out_dir, exclude=tuned))
    written.append(length_plot(runs, table, out_dir, colors, _train_len(runs)))
    return [p for p in written if p is not None]
