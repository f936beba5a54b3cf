"""The HTML report's interactive part: curves with hover values, a metric selector, variant
toggles, sortable tables, and per-variant progress while a sweep runs.

Plotly.js (a well-kept library that needs no server) is inlined, so the page stays one file that
works offline. The page's Content-Security-Policy still forbids every external resource and every
script but these two inline ones, each allowed by its SHA-256 hash. Data travel as a JSON block
(``type="application/json"`` is never executed), with '<' escaped so no value can end the block.
"""
from __future__ import annotations

import base64
import hashlib
import json
import math
from functools import lru_cache
from typing import Any, Dict, List, Tuple

import pandas as pd

from ..rundir import is_lr_column
from .colors import variant_colors
from .curves import read_metrics

WAITING, RUNNING = ("pending", "interrupted"), ("running",)

APP_JS = r"""
(function () {
  "use strict";
  var block = document.getElementById("az-data");
  var data = block ? JSON.parse(block.textContent) : {variants: [], curves: {}, colors: {}};
  var select = document.getElementById("az-metric"), plot = document.getElementById("az-plot");
  var shown = {};
  data.variants.forEach(function (v) { shown[v.name] = true; });
  function esc(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }
  function traces(metric) {
    return (data.curves[metric] || []).filter(function (c) { return shown[c.variant]; }).map(function (c) {
      return {x: c.steps, y: c.values, type: "scatter", mode: c.steps.length < 30 ? "lines+markers" : "lines",
              name: esc(c.variant) + " · seed " + c.seed, legendgroup: esc(c.variant),
              line: {color: data.colors[c.variant], width: 1.5},
              hovertemplate: esc(c.variant) + " · seed " + c.seed + "<br>step %{x}<br>" + esc(metric) +
                             " %{y:.5g}<extra></extra>"};
    });
  }
  function draw() {
    var metric = select.value;
    Plotly.react(plot, traces(metric), {
      margin: {t: 20, r: 10}, hovermode: "closest", height: 460,
      xaxis: {title: {text: "step"}}, yaxis: {title: {text: esc(metric)}},
      legend: {groupclick: "togglegroup"}
    }, {displaylogo: false, responsive: true});
  }
  if (select && window.Plotly) {
    select.addEventListener("change", draw);
    document.querySelectorAll("#az-variants input").forEach(function (box) {
      box.addEventListener("change", function () { shown[box.value] = box.checked; draw(); });
    });
    draw();
  }

  var SI = {k: 1e3, M: 1e6, G: 1e9, T: 1e12};
  function key(text) {
    var m = text.replace("\u2212", "-").match(/^\s*([-+]?\d*\.?\d+(?:e[-+]?\d+)?)\s*([kMGT]?)/);
    return m ? parseFloat(m[1]) * (SI[m[2]] || 1) : null;
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th, col) {
      th.title = "sort";
      th.addEventListener("click", function () {
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var up = th.getAttribute("aria-sort") !== "ascending";
        table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", up ? "ascending" : "descending");
        rows.sort(function (a, b) {
          var x = a.cells[col].textContent, y = b.cells[col].textContent, kx = key(x), ky = key(y);
          if (kx === null && ky === null) { return up ? x.localeCompare(y) : y.localeCompare(x); }
          if (kx === null) { return 1; }
          if (ky === null) { return -1; }
          return up ? kx - ky : ky - kx;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"""


@lru_cache(maxsize=1)
def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def script_hash(code: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode("ascii") + "'"


def _json_block(data: Any) -> str:
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def payload(runs: pd.DataFrame, metric: str, order: List[str] = ()) -> Dict[str, Any]:
    """Every run's curves per metric (its metrics.csv), the variants in the table's order (``order``)
    and their colours: those the static plots give them (``colors.variant_colors``)."""
    variants = list(dict.fromkeys([*map(str, order), *(str(v) for v in runs["variant"])])) if len(runs) else []
    colors = variant_colors(runs)
    curves: Dict[str, List[Dict[str, Any]]] = {}
    for row in runs.itertuples(index=False):
        for name, rows in read_metrics(row.run_dir).groupby("metric", sort=False):
            finite = [(int(s), float(v)) for s, v in zip(rows["step"], rows["value"]) if math.isfinite(v)]
            if not finite or name == "epoch" or is_lr_column(name):
                continue
            seed = None if pd.isna(row.seed) else int(row.seed)
            curves.setdefault(name, []).append({"variant": str(row.variant), "seed": seed, "run_id": str(row.run_id),
                                                "steps": [s for s, _ in finite], "values": [v for _, v in finite]})
    names = sorted(curves, key=lambda m: (m != metric, m.startswith("train/"), m))
    return {"metrics": names, "variants": [{"name": v} for v in variants], "curves": curves,
            "colors": {v: colors[v] for v in variants}}


def progress(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs per variant: done (completed, diverged or failed), running, waiting (planned or to resume)."""
    status = runs["status"].astype(str)
    frame = pd.DataFrame({"variant": runs["variant"].astype(str),
                          "done": status.isin(["completed", "diverged", "failed"]),
                          "failed": status.isin(["diverged", "failed"]), "running": status.isin(RUNNING),
                          "waiting": status.isin(WAITING)})
    out = frame.groupby("variant", sort=False).sum().reset_index()
    return out[["variant", "done", "running", "waiting", "failed"]]


def unfinished(runs: pd.DataFrame) -> bool:
    return bool(runs["status"].astype(str).isin(RUNNING + WAITING).any()) if len(runs) else False


def section(runs: pd.DataFrame, metric: str, esc, order: List[str] = ()) -> Tuple[List[str], List[str]]:
    """(HTML parts, their scripts' CSP hashes): the curves when any run has logged one, and the
    script that sorts the tables (always). ``esc`` is the page's escaper; ``order``: the variants as
    the ranked table lists them."""
    data = payload(runs, metric, order)
    if not data["metrics"]:
        return [f"<script>{APP_JS}</script>"], [script_hash(APP_JS)]
    options = "".join(f'<option value="{esc(m)}"{" selected" if m == metric else ""}>{esc(m)}</option>'
                      for m in data["metrics"])
    boxes = "".join(f'<label style="color:{data["colors"][v["name"]]}"><input type="checkbox" checked '
                    f'value="{esc(v["name"])}"> {esc(v["name"])}</label> ' for v in data["variants"])
    parts = ["<h2>Curves</h2>", f'<p><label>metric <select id="az-metric">{options}</select></label> '
             "(hover a curve for its values; click a legend entry or a box to hide a variant)</p>",
             f'<p id="az-variants">{boxes}</p>', '<div id="az-plot"></div>',
             f'<script type="application/json" id="az-data">{_json_block(data)}</script>',
             f"<script>{plotly_js()}</script>", f"<script>{APP_JS}</script>"]
    return parts, [script_hash(plotly_js()), script_hash(APP_JS)]
