"""Local Hugging Face checkpoint directories, and every way a checkpoint can fail to fit."""
import json
import subprocess
import sys

import pytest
import torch

from arch_zoo.interop import CheckpointError, CheckpointMismatchError, from_hf, load_hf_checkpoint
from tests.interop.references import hf_reference, padded_batch

pytest.importorskip("transformers")


def logits(model, ids, mask):
    with torch.no_grad():
        if model.config.kind == "encoder_decoder":
            return model(ids, ids[:, :4], mask, mask[:, :4]).logits
        return model(ids, mask).logits


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "t5"])
def test_checkpoint_directory_round_trip(name, tmp_path):
    ref = hf_reference(name)
    ref.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    loaded = load_hf_checkpoint(tmp_path)
    direct = from_hf(ref)
    assert loaded.config == direct.config
    ids, mask = padded_batch([6, 3], 6, "right")
    assert torch.equal(logits(loaded, ids, mask), logits(direct, ids, mask))
    into_preset = load_hf_checkpoint(tmp_path, config=f"preset:{name}-tiny")
    torch.testing.assert_close(logits(into_preset, ids, mask), logits(direct, ids, mask), atol=1e-5, rtol=0)


def test_sharded_checkpoint_directory(tmp_path):
    ref = hf_reference("llama")
    ref.save_pretrained(tmp_path, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").is_file() and len(list(tmp_path.glob("*.safetensors"))) > 1
    ids, mask = padded_batch([6, 3], 6, "left")
    assert torch.equal(logits(load_hf_checkpoint(tmp_path), ids, mask), logits(from_hf(ref), ids, mask))


def test_checkpoint_loads_without_transformers(tmp_path):
    """Reading a checkpoint directory needs torch and safetensors only (and never the network)."""
    hf_reference("gpt2").save_pretrained(tmp_path)
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {{'transformers', 'huggingface_hub', 'requests', 'urllib3', 'omegaconf',
                                   'pytorch_lightning', 'lightning', 'wandb', 'pandas'}}:
            raise ImportError('blocked ' + name)
sys.meta_path.insert(0, Block())
from arch_zoo.interop import load_hf_checkpoint
print(load_hf_checkpoint({str(tmp_path)!r}).config.kind)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "decoder"


def test_wrong_width_names_the_first_tensor_and_both_shapes():
    narrow = hf_reference("gpt2", n_embd=32)
    with pytest.raises(CheckpointMismatchError) as info:
        from_hf(narrow, config="preset:gpt2-tiny")
    err = info.value
    assert (err.tensor, err.checkpoint_shape, err.model_shape) == ("embed.weight", (97, 32), (97, 64))
    assert "wte.weight" in str(err) and "(97, 32)" in str(err) and "(97, 64)" in str(err)


def test_fused_tensor_mismatch_names_its_sources():
    mqa = hf_reference("llama", num_key_value_heads=1)  # q/k/v are fused into one qkv projection
    with pytest.raises(CheckpointMismatchError, match=r"decoder\.layers\.0\.mixer\.sublayer\.qkv\.weight: "
                                                      r"shape \(96, 64\) .*k_proj.* \(128, 64\)"):
        from_hf(mqa, config="preset:llama-tiny")


def test_extra_and_missing_layers_are_named():
    with pytest.raises(CheckpointError, match=r"^h\.2\.ln_1\.weight: the model has no place"):
        from_hf(hf_reference("gpt2", n_layer=3), config="preset:gpt2-tiny")
    missing = r"^decoder\.layers\.1\.mixer\.sublayer\.qkv\.weight: missing.*\(192, 64\)"
    with pytest.raises(CheckpointError, match=missing):
        from_hf(hf_reference("gpt2", n_layer=1), config="preset:gpt2-tiny")


def test_untied_output_into_a_tied_config_is_refused():
    untied = hf_reference("llama")  # Llama's lm_head is its own matrix; the gpt2-style tie cannot hold it
    with pytest.raises(CheckpointError, match="tied to .embed.weight.*tie_embeddings: false"):
        from_hf(untied, changes={"tie_embeddings": True})


def write(path, config=None, weights=b""):
    path.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if weights:
        (path / "model.safetensors").write_bytes(weights)
    return path


@pytest.mark.parametrize("case,match", [
    ("missing", "not a directory"),
    ("file", "not a directory"),
    ("empty", "no config.json"),
    ("no_weights", "no model.safetensors"),
    ("bad_json", "not valid JSON"),
    ("unknown_type", "model_type 'mamba' is not supported; supported: bamba, bert, "),  # then every registered one
    ("corrupt", "cannot read safetensors file"),
])
def test_not_a_checkpoint_is_one_line(tmp_path, case, match):
    path = {
        "missing": lambda: tmp_path / "nowhere",
        "file": lambda: write(tmp_path / "d", {}) / "config.json",
        "empty": lambda: write(tmp_path / "d"),
        "no_weights": lambda: write(tmp_path / "d", {"model_type": "gpt2"}),
        "bad_json": lambda: write(tmp_path / "d", "{not json", b"x"),
        "unknown_type": lambda: write(tmp_path / "d", {"model_type": "mamba"}, b"x" * 16),
        "corrupt": lambda: write(tmp_path / "d", {"model_type": "gpt2"}, b"\x08" + b"\x00" * 7 + b"{}"),
    }[case]()
    with pytest.raises(CheckpointError, match=match) as info:
        load_hf_checkpoint(path)
    assert "\n" not in str(info.value)


def test_unsupported_reference_features_are_refused():
    with pytest.raises(CheckpointError, match="rope_type 'linear'"):
        from_hf(hf_reference("llama", rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}))
    with pytest.raises(CheckpointError, match="activation 'tanh'"):  # no gated tanh feed-forward in arch_zoo
        from_hf(hf_reference("t5", feed_forward_proj="gated-tanh"))
