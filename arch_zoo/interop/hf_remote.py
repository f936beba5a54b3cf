"""An arch_zoo model no Hugging Face family expresses, as a remote-code directory: config.json
names ``modeling_arch_zoo.py`` (``hf_remote_code``, copied as it is) in its ``auto_map``, and that
file builds the arch_zoo model from the saved config. A plugin the run used is copied beside it
with its sha256, which the modelling file checks before importing it."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Optional

from .. import rundir
from ..coerce import to_dict
from ..errors import ConfigError
from ..generation.prompts import decoder_start_id
from ..config.kinds import kind_of

CLASSES = {"AutoModelForCausalLM": "ArchZooForCausalLM", "AutoModelForMaskedLM": "ArchZooForMaskedLM",
           "AutoModelForSeq2SeqLM": "ArchZooForSeq2SeqLM"}
MODELING = "modeling_arch_zoo.py"


def _plugins(run_dir: Optional[Path], out: Path):
    records = (rundir.read_json(run_dir / rundir.STATUS) or {}).get("plugins") or [] if run_dir else []
    kept = []
    for record in records:
        path = rundir.plugin_copy(run_dir, record) or (Path(record["path"]) if record.get("path") else None)
        if path is None or not path.is_file():
            raise ConfigError("plugins", f"the run used plugin '{record.get('plugin')}', whose file is not found "
                              "to copy into the export")
        target = Path("plugins") / f"{record['module'].replace('.', '_')}.py"
        (out / "plugins").mkdir(exist_ok=True)
        shutil.copyfile(path, out / target)
        kept.append({"module": record["module"], "file": str(target), "sha256": record["sha256"]})
    return kept


def _as_named(hf) -> dict:
    import inspect

    return {"save_original_format": False} if "save_original_format" in inspect.signature(
        hf.save_pretrained).parameters else {}


def write_remote(model, tokenizer, cfg, out: Path, auto_class: str, max_shard_size: str,
                 run_dir: Optional[Path] = None) -> None:
    from .export_hf import generation_config, special_ids

    shutil.copyfile(Path(__file__).with_name("hf_remote_code.py"), out / MODELING)
    import importlib.util

    spec = importlib.util.spec_from_file_location("arch_zoo_hf_remote_code", out / MODELING)
    code = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(code)
    name = CLASSES[auto_class]
    plugins = _plugins(run_dir, out)
    kind = kind_of(model.config)
    config = code.ArchZooConfig(
        arch_zoo_model=to_dict(dataclasses.replace(model.config, vocab_size=model.vocab_size)),
        arch_zoo_plugins=plugins, vocab_size=model.vocab_size, use_cache=False,
        num_hidden_layers=model.config.decoder_layers if kind.has("decoder") else model.config.encoder_layers,
        is_encoder_decoder=kind.cross_attention, architectures=[name],
        auto_map={"AutoConfig": f"{MODELING[:-3]}.ArchZooConfig", auto_class: f"{MODELING[:-3]}.{name}"},
        **special_ids(tokenizer),
        # the decoder starts where arch_zoo starts it (generation.prompts.decoder_start_id), else with pad (as T5)
        **({"decoder_start_token_id": decoder_start_id(tokenizer) if tokenizer is not None
            else model.config.pad_token_id}
           if kind.cross_attention else {}))
    hf = getattr(code, name)(config)
    hf.model.load_state_dict(model.state_dict())
    generation_config(hf, {**special_ids(tokenizer), "decoder_start_token_id": getattr(config, "decoder_start_token_id",
                                                                                        None)})
    # today's key names as they are: transformers would write back the names the conversion renames from
    # (models/renamed_keys.py), which only a transformers with conversions can read
    hf.save_pretrained(out, max_shard_size=max_shard_size, **_as_named(hf))
    # save_pretrained may rewrite the modelling file's name into config.json; keep what from_pretrained needs
    data = json.loads((out / "config.json").read_text())
    data["auto_map"] = config.auto_map
    (out / "config.json").write_text(json.dumps(data, indent=2) + "\n")
