"""``arch-zoo export RUN --to hf --out DIR``: a run as a directory ``from_pretrained`` loads.

DIR holds config.json, model.safetensors (sharded with model.safetensors.index.json past
``max_shard_size``), generation_config.json, the tokenizer (tokenizer.json, tokenizer_config.json,
special_tokens_map.json) and a model card (README.md). A model a Hugging Face family expresses is
written as that family's class; any other as arch_zoo remote code (``hf_remote``). Everything is
checked before anything is written, and DIR appears whole or not at all. Choosing and restoring the
run's checkpoint reads run directories, above interop: ``training.export.export_run``."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from .. import rundir
from ..errors import ConfigError
from .atomic_dir import atomic_dir, check_out

AUTO_CLASSES = {"decoder": "AutoModelForCausalLM", "encoder": "AutoModelForMaskedLM",
                "encoder_decoder": "AutoModelForSeq2SeqLM"}
DEFAULT_SHARD = "5GB"
REMOTE_FORM = "written as arch_zoo remote code"


def check_auto_class(kind: str, auto_class: Optional[str], where: str) -> str:
    """The transformers Auto class the directory is for; a class the run's kind cannot be is refused."""
    natural = AUTO_CLASSES[kind]
    if auto_class is None or auto_class == natural:
        return natural
    if auto_class not in AUTO_CLASSES.values():
        raise ConfigError("--auto-class", f"unknown class '{auto_class}'; choose from "
                          f"{', '.join(AUTO_CLASSES.values())}")
    raise ConfigError("--auto-class", f"{where} is a model of kind '{kind}', which cannot be loaded as {auto_class}; "
                      f"it exports as {natural}")


def model_card(run_dir: Optional[Path], cfg, form: str, auto_class: str, checkpoint: Optional[str] = None) -> str:
    """README.md: what the directory is, how to load it, and where it came from (the resolved config,
    the metrics, the sweep and seed, the arch_zoo version)."""
    import arch_zoo
    from ..config.loading import to_yaml

    # AutoTokenizer reads config.json's model type first: a remote-code one asks for trust (an interactive
    # [y/N]) before the tokenizer, plain as it is, loads
    trust = ", trust_remote_code=True" if form.startswith(REMOTE_FORM) else ""
    lines = ["---", "library_name: transformers", "tags:", "- arch_zoo", "---", "",
             f"# {cfg.name}", "", f"An arch_zoo run exported for Hugging Face transformers, {form}.", "",
             "```python", f"from transformers import {auto_class}, AutoTokenizer",
             f"model = {auto_class}.from_pretrained(DIR{trust})",
             f"tokenizer = AutoTokenizer.from_pretrained(DIR{trust})", "```", ""]
    summary = rundir.read_json(run_dir / rundir.SUMMARY) if run_dir else None
    sweep = run_dir.parent.parent if run_dir and run_dir.parent.name == "runs" else None
    lines += ["## Provenance", "", f"- arch_zoo {arch_zoo.__version__}",
              f"- run: `{run_dir.name if run_dir else cfg.name}`, seed {cfg.seed}"]
    if sweep is not None:
        lines.append(f"- sweep: `{sweep.name}`")
    if checkpoint:
        lines.append(f"- weights: checkpoint {checkpoint}")
    if summary:
        metrics = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if metrics:
            lines += ["", "## Metrics", "", "The run's final values (its summary.json), whichever checkpoint was exported.",
                      "", "| metric | value |", "| --- | --- |"]
            lines += [f"| {k} | {v:.6g} |" for k, v in sorted(metrics.items())]
    lines += ["", "## Resolved config", "", "```yaml", to_yaml(cfg).rstrip(), "```", ""]
    return "\n".join(lines)


def save_hf(model, tokenizer, out, cfg=None, run_dir: Optional[Path] = None, force: bool = False,
            max_shard_size: str = DEFAULT_SHARD, auto_class: Optional[str] = None,
            checkpoint: Optional[str] = None) -> str:
    """Write ``model`` (+ ``tokenizer``) as Hugging Face directory ``out``; returns the form written."""
    from ..config import ExperimentConfig
    from .export_hf import build_hf, native_form
    from .hf_remote import write_remote
    from .hf_tokenizer import hf_tokenizer_object, write_hf_tokenizer

    cfg = cfg or ExperimentConfig(name=Path(out).name, model=model.config)
    auto_class = check_auto_class(model.config.kind, auto_class, str(run_dir or "the model"))
    check_out(out, force)
    if tokenizer is not None:
        hf_tokenizer_object(tokenizer)  # a tokenizer with no Hugging Face form fails before anything is written
    native, mapping = native_form(model)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one line of output, not transformers' shard bars
    with atomic_dir(out, force) as tmp:
        if mapping.hf_config is not None:
            hf = build_hf(native, mapping.hf_config, tokenizer)
            hf.save_pretrained(tmp, max_shard_size=max_shard_size)
            form = mapping.reason
        else:
            write_remote(model, tokenizer, cfg, tmp, auto_class, max_shard_size, run_dir)
            form = f"{REMOTE_FORM}: {mapping.reason}"
        if tokenizer is not None:
            write_hf_tokenizer(tokenizer, tmp, model.config.max_seq_len)
        (tmp / "README.md").write_text(model_card(run_dir, cfg, form, auto_class, checkpoint))
    return form
