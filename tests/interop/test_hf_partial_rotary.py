"""transformers' Llama-style classes (Llama, Mistral, Qwen3, Mixtral, Gemma 2) rotate whole heads
whatever ``partial_rotary_factor`` their config carries (their rotary embedding never reads it), so an
import must too: it once took the factor as a rope fraction and gave other logits. A model that does
rotate a fraction of each head has no such class and exports as remote code."""
import pytest
import torch

from arch_zoo.interop import from_hf
from tests.interop.references import VOCAB, assert_same_logits, randomize

tf = pytest.importorskip("transformers")

SIZES = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, max_position_embeddings=64)
FAMILIES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "mistral": ("MistralConfig", "MistralForCausalLM"),
            "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"), "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
            "gemma2": ("Gemma2Config", "Gemma2ForCausalLM")}


def reference(family: str, factor: float):
    config, cls = (getattr(tf, name) for name in FAMILIES[family])
    extra = {"num_local_experts": 4, "num_experts_per_tok": 2} if family == "mixtral" else {}
    cfg = config(vocab_size=VOCAB, partial_rotary_factor=factor, **SIZES, **extra)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return randomize(cls(cfg)).eval()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_partial_rotary_factor_the_family_ignores_is_ignored_on_import(family):
    ref = reference(family, 0.5)
    with torch.no_grad():  # the reference itself: the factor changes nothing
        ids = torch.arange(1, 11)[None]
        torch.testing.assert_close(ref(ids).logits, reference(family, 1.0)(ids).logits, rtol=0, atol=0)
    model = from_hf(ref).eval()
    assert model.config.position.options.fraction == 1.0
    assert_same_logits(ref, model, "right")


def test_a_model_rotating_half_of_each_head_is_not_written_as_llama():
    from arch_zoo.coerce import to_dict
    from arch_zoo.config.loading import model_config
    from arch_zoo.interop.export_hf import native_config

    llama = from_hf(reference("llama", 1.0)).config
    assert native_config(llama).hf_config["model_type"] == "llama"
    choice = native_config(model_config({**to_dict(llama), "position": {"name": "rope", "fraction": 0.5}}))
    assert choice.hf_config is None and "fraction" in choice.reason, choice.reason
