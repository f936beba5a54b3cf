"""The HTML report's interactive scaling plot: the static figure's points, fits and bands in Plotly
(already inlined by the report's curves section), log-log, with hover values. The data travel in a
JSON block and the script is allowed by its hash, as ``reports/interactive.py`` does for the curves."""
from __future__ import annotations

from typing import Callable, List, Tuple

from ..colors import palette
from ..interactive import _json_block, script_hash
from .analysis import Scaling, series

SCALING_JS = r"""
(function () {
  "use strict";
  var block = document.getElementById("az-scaling-data"), plot = document.getElementById("az-scaling");
  if (!block || !plot || !window.Plotly) { return; }
  var data = JSON.parse(block.textContent), traces = [];
  function esc(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }
  Object.keys(data.series).forEach(function (name, i) {
    var s = data.series[name], color = data.colors[i % data.colors.length];
    traces.push({x: s.x, y: s.y, error_y: {type: "data", array: s.err, visible: true}, mode: "markers",
                 type: "scatter", name: esc(name), legendgroup: esc(name), marker: {color: color},
                 hovertemplate: esc(name) + "<br>%{x:.3e} FLOPs<br>loss %{y:.5g}<extra></extra>"});
    [["fit_x", "fit", "low", "high", "solid"], ["far_x", "far", "far_low", "far_high", "dash"]].forEach(function (k) {
      if (!s[k[0]]) { return; }
      traces.push({x: s[k[0]], y: s[k[2]], mode: "lines", line: {width: 0}, showlegend: false,
                   legendgroup: esc(name), hoverinfo: "skip", type: "scatter"});
      traces.push({x: s[k[0]], y: s[k[3]], mode: "lines", line: {width: 0}, fill: "tonexty", showlegend: false,
                   fillcolor: color.replace("rgb", "rgba").replace(")", ",0.15)"), legendgroup: esc(name),
                   hoverinfo: "skip", type: "scatter"});
      traces.push({x: s[k[0]], y: s[k[1]], mode: "lines", line: {color: color, dash: k[4]}, showlegend: false,
                   legendgroup: esc(name), type: "scatter",
                   name: esc(name) + (k[4] === "dash" ? " (extrapolated)" : " (fit)"),
                   hovertemplate: esc(name) + (k[4] === "dash" ? " extrapolated" : " fit") +
                                  "<br>%{x:.3e} FLOPs<br>loss %{y:.5g}<extra></extra>"});
    });
  });
  Plotly.newPlot(plot, traces, {margin: {t: 20, r: 10}, height: 460, hovermode: "closest",
    xaxis: {type: "log", title: {text: "training FLOPs"}}, yaxis: {type: "log", title: {text: esc(data.metric)}},
    legend: {groupclick: "togglegroup"}}, {displaylogo: false, responsive: true});
})();
"""


def _rgb(hex_color: str) -> str:
    return "rgb(" + ",".join(str(int(hex_color[i:i + 2], 16)) for i in (1, 3, 5)) + ")"


def section(s: Scaling, esc: Callable[[str], str]) -> Tuple[List[str], List[str]]:
    """(HTML parts, their script's CSP hash); the page includes Plotly before these parts."""
    drawn = series(s)
    data = {"series": drawn, "metric": s.metric, "colors": [_rgb(c) for c in palette(len(drawn))]}
    parts = ['<div id="az-scaling"></div>',
             f'<script type="application/json" id="az-scaling-data">{_json_block(data)}</script>',
             f"<script>{SCALING_JS}</script>"]
    return parts, [script_hash(SCALING_JS)]
