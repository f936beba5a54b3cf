"""The one-screen summary printed at the end of ``arch-zoo train``."""
from __future__ import annotations

from ..formatting import number as _num
from .run import RunResult


def summary_text(result: RunResult) -> str:
    s = result.summary
    lines = [f"run {result.run_dir}  status: {result.status}" + (f" ({result.reason})" if result.reason else "")
             + ("  [already finished; not trained again]" if result.skipped else "")]
    if not s:
        return lines[0] + "\n"
    lines.append(f"  steps {s.get('step')}, parameters {s.get('parameters', 0):,}, "
                 f"{s.get('train_tokens_per_s', 0):,.0f} train tokens/s, peak memory "
                 f"{s.get('peak_memory_mb', 0):,.0f} MiB ({s.get('peak_memory_kind', '')}), "
                 f"wall {s.get('wall_time_s', 0):.1f} s")
    if s.get("init_from"):
        source = s["init_from"]
        lines.append(f"  started from the weights of {source['path']} (its step {source.get('step')}; train.init_from)")
    final, best = s.get("final", {}), s.get("best", {})
    if final:
        width = max(len(k) for k in final)
        lines.append(f"  {'metric':<{width}}  {'final':>10}  {'best (step)':>18}")
        for k in sorted(final):
            b = best.get(k)
            best_text = f"{_num(b['value'])} ({b['step']})" if b else ""
            lines.append(f"  {k:<{width}}  {_num(final[k]):>10}  {best_text:>18}")
    if s.get("wandb_sync"):
        lines.append(f"  wandb ran offline; upload with: {s['wandb_sync']}")
    return "\n".join(lines) + "\n"
