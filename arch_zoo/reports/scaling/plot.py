"""The scaling figure: each variant's rung means (bars: ± std over seeds) against training compute on
log-log axes, its fitted curve and the bootstrap's 95% band; past the largest rung (only with
``--extrapolate-to``) the curve is dashed and labelled an extrapolation."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from ..plots import _colors, _figure, _legend, _save, _text  # the report's figure conventions
from .analysis import Scaling, series

def scaling_plot(s: Scaling, out_dir: Path, colors: Dict[str, tuple]) -> Optional[Path]:
    data = series(s)
    if not data:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    for variant, d in data.items():
        color = colors.get(variant)
        ax.errorbar(d["x"], d["y"], yerr=d["err"], fmt="o", color=color, markersize=4, capsize=3,
                    label=_text(variant + ("" if d["status"] == "ok" else f" (no fit: {d['status']})")))
        if "fit" in d:
            ax.plot(d["fit_x"], d["fit"], color=color, linewidth=1.5)
            ax.fill_between(d["fit_x"], d["low"], d["high"], color=color, alpha=0.2, linewidth=0)
        if "held_fit" in d:  # the fit without the held-out rung, carried past it, and what that rung measured
            ax.plot(d["held_fit_x"], d["held_fit"], color=color, linewidth=1.0, linestyle=":")
            ax.fill_between(d["held_fit_x"], d["held_low"], d["held_high"], color=color, alpha=0.08, linewidth=0)
            ax.plot(d["held_x"], d["held_y"], marker="*", markersize=11, markerfacecolor="none", color=color,
                    linestyle="none")
        if "far" in d:
            ax.plot(d["far_x"], d["far"], color=color, linewidth=1.2, linestyle="--")
            ax.fill_between(d["far_x"], d["far_low"], d["far_high"], color=color, alpha=0.1, linewidth=0)
    if s.extrapolate_to is not None:
        ax.axvline(s.extrapolate_to, color="grey", linestyle=":", linewidth=1)
        ax.annotate("extrapolated", (s.extrapolate_to, ax.get_ylim()[1]), fontsize="small", ha="right", va="top",
                    color="grey")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel(_text(f"final {s.metric} (rung mean ± std; fit with 95% band)"))
    if any("held_fit" in d for d in data.values()):
        ax.set_title(_text("dotted: fit without the largest rung, extrapolated; star: what that rung measured"),
                     fontsize="small")
    ax.grid(alpha=0.3)
    _legend(ax, len(data))
    return _save(fig, out_dir, "scaling_loss_vs_compute")


def decision_plot(s: Scaling, out_dir: Path) -> Optional[Path]:
    """Decision accuracy against the rung it reads the order at, from the rung means and from the fits."""
    if not len(s.decisions):
        return None
    fig = _figure()
    ax = fig.add_subplot()
    for (by, group), marker in zip(s.decisions.dropna(subset=["accuracy"]).groupby(
            s.decisions["by"].str.startswith("fit"), sort=True), ("o", "s")):
        err = [group["accuracy"] - group["ci_low"], group["ci_high"] - group["accuracy"]]
        ax.errorbar(group["rung"], group["accuracy"], yerr=err, fmt=marker + "-", capsize=3,
                    label="fit of the rungs up to it" if by else "rung means")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("rung the order is read at")
    ax.set_ylabel("share of variant pairs ordered as at the largest rung (95% CI)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, out_dir, "scaling_decision_accuracy")


def scaling_figure(s: Scaling, out_dir: Path) -> List[Path]:
    """The report's hook: the figures in the report's colours (by variant), if there is anything to draw."""
    pngs = [scaling_plot(s, out_dir, _colors(list(s.curves))), decision_plot(s, out_dir)]
    return [p for p in pngs if p is not None]
