"""Issue 57 §2: one module per Hugging Face family under ``arch_zoo/interop/families/``, holding its
config mapping both ways and its weight mapping, declared by one ``HFFamily``; the registry beside it."""
import importlib
from pathlib import Path

import pytest
import torch

from arch_zoo.interop import ARCHITECTURES, convert
from arch_zoo.interop.checkpoint import CheckpointError
from arch_zoo.interop.family import FAMILIES, HFFamily, architecture, exporters, register


def test_each_family_is_one_module_that_maps_its_config_both_ways():
    for model_type, family in ARCHITECTURES.items():
        module = importlib.import_module(f"arch_zoo.interop.families.{model_type}")
        assert module.FAMILY is family, model_type
        assert family.config.__module__ == family.write.__module__ == module.__name__, model_type
        assert callable(family.weights) and family.name, model_type


def test_no_family_module_is_left_beside_the_shared_machinery():
    import arch_zoo.interop as interop

    flat = {p.name for p in Path(interop.__file__).parent.glob("hf*.py")}
    assert flat == {"hf.py", "hf_remote.py", "hf_remote_code.py", "hf_tokenizer.py"}, flat


def test_export_tries_the_families_of_a_kind_in_their_order():
    """The first family whose importer gives the model back is written: Llama before its descendants."""
    assert [f.model_type for f in exporters("decoder")] == [
        "gpt2", "llama", "mistral", "qwen3", "mixtral", "gemma2", "gpt_neox", "bloom",
        "mamba2", "qwen3_next", "lfm2", "bamba", "diffllama", "deepseek_v3", "gpt_oss", "kimi_linear", "minimax",
        "recurrent_gemma", "falcon_h1", "xlstm"]
    assert [f.model_type for f in exporters("encoder")] == ["bert"]
    assert [f.model_type for f in exporters("encoder_decoder")] == ["t5"]


def test_a_family_registered_in_one_place_imports_and_is_tried_by_export():
    def config(c, weights):
        return {"kind": "decoder", "vocab_size": c["vocab_size"], "d_model": 8, "n_heads": 2, "n_layers": 1}

    def weights(w, cfg):
        w.copy("embed.weight", "wte")

    toy = HFFamily("toy_family", "Toy", config, weights, lambda m, d: {}, prefix="model.")
    with pytest.raises(CheckpointError, match="model_type 'toy_family' is not supported"):
        architecture({"model_type": "toy_family"})
    register(toy)
    try:
        assert architecture({"model_type": "toy_family"}) is toy
        assert exporters("decoder")[-1] is toy
        # its config builds the model and its weights fill it (the prefix stripped): the embedding is
        # taken, the first tensor it leaves without a value is named
        with pytest.raises(CheckpointError, match=r"^decoder\.layers\.0\.mixer\.sublayer\.qkv\.weight: missing"):
            convert({"model_type": "toy_family", "vocab_size": 5}, {"model.wte": torch.zeros(5, 8)})
    finally:
        FAMILIES.pop("toy_family")
    assert "toy_family" not in ARCHITECTURES
