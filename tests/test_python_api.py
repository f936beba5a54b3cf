"""The Python API takes what the CLI takes (README "In Python")."""
import subprocess
import sys

import pytest
import torch

from arch_zoo.experiment import load
from arch_zoo.errors import ConfigError
from arch_zoo.models import build_model


def _shapes(model):
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def test_build_model_takes_a_preset_a_yaml_path_or_a_mapping_with_base(tmp_path):
    """README: "`build_model` takes what the CLI takes as a model: a mapping, `preset:NAME`, a path
    to a model or experiment YAML, or `{base: ..., **changes}`"."""
    with torch.device("meta"):
        reference = _shapes(build_model(load("preset:llama-tiny").model, 100))
        assert _shapes(build_model("preset:llama-tiny", vocab_size=100)) == reference
        assert _shapes(build_model("configs/models/llama-tiny.yaml", 100)) == reference
        (tmp_path / "exp.yaml").write_text("name: x\nmodel:\n  base: preset:llama-tiny\n  n_layers: 1\n"
                                           "  d_ff: ${model.n_kv_heads}\n")  # interpolations resolve, as in the CLI
        assert build_model(tmp_path / "exp.yaml", 100).decoder.layers[0].ffn.sublayer.up.out_features == 2
        one_layer = build_model({"base": "preset:llama-tiny", "n_layers": 1, "d_ff": 2}, 100)
        assert _shapes(build_model(tmp_path / "exp.yaml", 100)) == _shapes(one_layer)
        assert set(_shapes(one_layer)) == {k for k in reference if not any(f".layers.{i}." in k for i in range(1, 64))}
    with pytest.raises(ConfigError, match=r"^vocab_size: is unknown"):
        build_model("preset:llama-tiny")
    with pytest.raises(ConfigError, match=r"unknown preset 'lama-tiny' \(did you mean 'llama-tiny'\?\)"):
        build_model("preset:lama-tiny", 100)


def test_summarize_takes_the_baseline_as_a_string_a_list_or_a_mapping(tmp_path):
    """README (Reports): "`baseline=` takes what `--baseline` takes, as a string
    (`"model.position=rope"`, several separated by spaces), a list of `KEY=VALUE` strings or a mapping"."""
    from arch_zoo.reports import load_runs, summarize
    from tests.reports.sweeps import write_sweep

    runs = load_runs(write_sweep(tmp_path / "pos"))
    tables = [summarize(runs, baseline=b).set_index("variant") for b in
              ("model.position=rope", "position=rope", ["model.position=rope"], {"model.position": "rope"})]
    for table in tables:
        assert bool(table.loc["position=rope", "baseline"]) and not table.loc["position=alibi", "baseline"]
        assert table["val/loss delta"].equals(tables[0]["val/loss delta"])
    with pytest.raises(ConfigError, match=r"baseline: 'm' is not KEY=VALUE"):
        summarize(runs, baseline=["m"])


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    from arch_zoo.training import run_one

    cfg = load("configs/experiments/copy.yaml", [
        "task.max_len=4", "task.n_train=64", "task.n_val=16", "task.n_test=16", "train.max_steps=4",
        "train.batch_size=8", "train.val_every=4", "train.progress_bar=false", "train.exact_match_samples=4"])
    out = tmp_path_factory.mktemp("restore") / "copy"
    assert run_one(cfg, out, quiet=True).status == "completed"
    return out


def test_restore_gives_the_config_the_trained_weights_and_the_tokenizer(trained_run):
    """README: "`from arch_zoo import restore`; `config, model, tokenizer = restore("runs/copy")`"."""
    from arch_zoo import restore
    from arch_zoo.generation import generate

    for path in (trained_run, trained_run / "checkpoints" / "last.ckpt"):
        run = restore(path)
        config, model, tokenizer = run  # a named tuple: run.config, run.model, run.tokenizer
        assert config == load(trained_run / "config.yaml") and run.model is model and not model.training
        state = torch.load(trained_run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        assert all(torch.equal(v, state[f"model.{k}"]) for k, v in model.state_dict().items())
        ids = tokenizer.encode("abc")
        out = generate(model, [ids], max_new_tokens=3, eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id,
                       decoder_start_token_id=tokenizer.bos_id)
        assert 1 <= len(out.to_lists()[0][0]) <= 3
    with pytest.raises(ConfigError, match="is not a run directory"):
        restore(trained_run / "missing")


def test_summary_records_how_exact_match_decoded(trained_run):
    """summary.json says which path exact match decoded through (auto: eager for 4 samples) and its cost."""
    import json

    record = json.loads((trained_run / "summary.json").read_text())["exact_match_decoding"]
    assert record["asked"] == "auto" and record["used"] == "eager" and record["why"].startswith("auto: ~")
    assert record["decode_s"] > 0 and record["compile_s"] is None and record["compiled_shapes"] == []


def test_restore_needs_no_lightning(trained_run):
    """README: restoring a run "needs torch and OmegaConf, not Lightning"."""
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {{'pytorch_lightning', 'lightning', 'lightning_fabric', 'wandb', 'pandas'}}:
            raise ImportError('blocked ' + name)
sys.meta_path.insert(0, Block())
from arch_zoo import restore
config, model, tokenizer = restore({str(trained_run)!r})
print(config.model.kind, type(model).__name__, 'pytorch_lightning' in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["encoder_decoder", "EncoderDecoderModel", "False"]
