"""What ``arch-zoo sweep`` prints at the end, and where ``--export-wandb`` writes."""
from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import List, Optional

from ..errors import ConfigError
from ..sweeps.runner import DEFAULT_OUT, SweepOutcome
from ..sweeps.spec import SweepSpec
from ..sweeps.tables import results_table


def export_path(spec: SweepSpec, out) -> Path:
    return Path(out or DEFAULT_OUT) / spec.name / "wandb_sweep.yaml"


def preload_reports() -> None:
    """Import the reports package (pandas, scipy: seconds) on a background thread while the workers
    train, so the final table does not add that wait to the sweep's end. Any failure is left for
    ``final_table`` to meet and explain."""

    def load() -> None:
        try:
            importlib.import_module("arch_zoo.reports")
        except Exception:  # noqa: BLE001 - final_table imports it again and falls back to a plain table
            pass

    threading.Thread(target=load, name="arch-zoo-preload-reports", daemon=True).start()


def final_table(outcome: SweepOutcome) -> str:
    """The reports package's comparison table (per variant: mean ± CI over seeds, Δ vs baseline)
    when it is there and can read the store; else a plain table of runs."""
    try:
        from ..reports import terminal_table  # pandas & co.: preload_reports has imported them by now
    except ImportError:
        return results_table(outcome)
    try:
        if outcome.plan.spec.suite is not None:  # one group per entry: the suite's table says it in one
            from ..reports.suite_render import suite_table

            return suite_table(outcome.store.root)
        return terminal_table(outcome.store.root)
    except Exception as exc:  # noqa: BLE001 - a report problem must not hide the sweep's own results
        return results_table(outcome) + f"(comparison table unavailable: {type(exc).__name__}: {exc})\n"


def failure_line(outcome: SweepOutcome) -> str:
    """'' when every run completed, else one line naming the first failed, diverged or unfinished runs."""
    problems = outcome.problems()
    if not problems:
        return ""
    shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
    return (f"{len(problems)} of {len(outcome.plan.runs)} runs did not complete: {shown} "
            f"(see {outcome.store.root / 'index.csv'})")


def pilot_store(spec: SweepSpec, args) -> Optional[Path]:
    """The pilot ``--power`` plans from: ``--pilot``, else the spec's own store when it has completed runs;
    None without ``--power``. One line naming the option when there is none."""
    if not args.power:
        for flag, given in (("--pilot", args.pilot is not None), ("--min-effect", args.min_effect is not None)):
            if given:
                raise ConfigError(flag, "is for --dry-run --power (plan seeds from a pilot)")
        return None
    if not args.dry_run:
        raise ConfigError("--power", "is for --dry-run: it plans seeds and trains nothing")
    if args.min_effect is not None and not (0 < args.min_effect < float("inf")):
        raise ConfigError("--min-effect", f"{args.min_effect} is not a positive difference in the metric's units")
    from ..reports.power import pilot_runs

    root = Path(args.pilot) if args.pilot is not None else Path(args.out or DEFAULT_OUT) / spec.name
    pilot_runs(root, "--pilot")  # the check only; power_plan loads it again after the dry-run table
    return root


def power_plan(plan, pilot: Path, args) -> List[str]:
    """The lines ``--dry-run --power`` prints: seeds and wall time per pair, from the pilot's runs."""
    from ..reports.power import pilot_runs, plan_seeds, power_lines

    spec = plan.spec
    metric = (spec.metric or {}).get("name")
    effect = args.min_effect if args.min_effect is not None else (spec.metric or {}).get("min_effect")
    rows = plan_seeds(pilot_runs(pilot), metric=metric, min_effect=effect)
    variants = len({r.variant for r in plan.runs}) or len(rows) + 1
    return power_lines(rows, pilot, variants, args.workers, effect)
