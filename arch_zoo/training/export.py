"""``arch-zoo export RUN --to hf --out DIR`` as a function: a run's checkpoint (its last, or with
``best`` the best of a sweep's) restored and written by ``interop.export_dir.save_hf``. It reads run
directories, so it sits here, above interop (which depends on nothing above models and data)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from .. import rundir
from ..errors import ConfigError
from ..interop.atomic_dir import check_out
from ..interop.export_dir import DEFAULT_SHARD, check_auto_class, save_hf
from .best import best_run
from .restore import restore


@dataclass
class Exported:
    source: Path  # the checkpoint written
    out: Path
    form: str  # "written as LlamaForCausalLM" or "written as arch_zoo remote code: <why>"


def _checkpoint(run, best: bool) -> Tuple[Path, str]:
    """The checkpoint to export and how the model card names it."""
    if best:
        chosen = best_run(run)
        at = f" at step {chosen.step}" if chosen.step is not None else " (its final value; no best checkpoint kept)"
        return chosen.checkpoint, (f"`{chosen.checkpoint.name}`, the best of {chosen.among} completed runs of the sweep "
                                   f"by {chosen.metric} ({chosen.goal}): {chosen.value:.6g}{at}")
    path = Path(run)
    if not path.exists():
        raise ConfigError("run", f"{path} does not exist")
    ckpt = path / rundir.CHECKPOINT if path.is_dir() else path
    if not ckpt.is_file():
        raise ConfigError("run", f"{path} has no checkpoint ({rundir.CHECKPOINT}): nothing to export")
    return ckpt, f"`{ckpt.name}`"


def export_run(run, out, best: bool = False, force: bool = False, max_shard_size: str = DEFAULT_SHARD,
               auto_class: Optional[str] = None) -> Exported:
    """``arch-zoo export RUN --to hf --out DIR`` as a function."""
    ckpt, which = _checkpoint(run, best)
    run_dir = ckpt.parent.parent
    check_out(out, force)
    check_auto_class(_kind(run_dir), auto_class, str(run))
    cfg, model, tokenizer = restore(ckpt)
    form = save_hf(model, tokenizer, out, cfg, run_dir, force, max_shard_size, auto_class, which)
    return Exported(ckpt, Path(out), form)


def _kind(run_dir: Path) -> str:
    """The model kind from config.yaml, before the model is loaded."""
    import yaml

    try:
        model = (yaml.safe_load((run_dir / rundir.CONFIG).read_text()) or {}).get("model") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        return "decoder"  # restore says what is wrong with the file
    return str(model.get("kind", "decoder")) if isinstance(model, dict) else "decoder"
