"""Presets: each one describes, has the size of its reference, and the config fields they brought
(token types, embedding norm, the MLM head, the scaled LM head) validate and behave."""
from pathlib import Path

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.config.loading import model_config, preset_names
from arch_zoo.experiment import load
from arch_zoo.errors import ConfigError
from arch_zoo.models import build_model
from tests.conftest import tiny

ROOT = Path(__file__).resolve().parents[1]

REFERENCE_PRESETS = ["vaswani", "bert", "gpt2", "llama", "t5", "t5-v1_1", "pythia", "bloom"]
REFERENCE_PRESETS += ["qwen3", "mistral", "mixtral", "gemma2", "lfm2"]


def test_every_reference_preset_comes_with_a_tiny_size():
    names = preset_names()
    for name in REFERENCE_PRESETS:
        assert name in names and f"{name}-tiny" in names
        big, small = load(f"preset:{name}").model, load(f"preset:{name}-tiny").model
        assert small.d_model < big.d_model
        same = lambda m: (m.kind, m.position.name, m.norm, m.norm_placement, m.ffn, m.head, m.bias)  # noqa: E731
        assert same(small) == same(big)


@pytest.mark.parametrize("name", preset_names())
def test_describe_every_preset(name, capsys):
    """Each shipped model config, described from its file (configs/models links to the presets)."""
    assert main(["describe", str(ROOT / "configs" / "models" / f"{name}.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{name}: ") and "parameters" in out and "forward FLOPs" in out and "position" in out


# Published parameter counts of the reference models at their own vocabulary sizes.
REFERENCE_SIZES = [
    ("gpt2", 50257, 124_439_808, "gelu_tanh"),
    ("bert", 30522, 109_514_298, "plus 2 token types; normalized by layernorm(eps=1e-12"),  # BertForMaskedLM
    ("llama", 32000, 6_738_415_616, "kv heads 32"),  # Llama 2 7B, described without allocating it
    ("t5", 32128, 222_903_552, "lm(bias=False, scale_input=True)"),  # t5-base
    ("qwen3", 151936, 8_190_735_360, "qk-norm rmsnorm(eps=1e-06)"),  # Qwen3 8B
    ("mistral", 32000, 7_241_732_096, "sliding_window(window=4096)"),  # Mistral 7B v0.1
    ("mixtral", 32000, 46_702_792_704, "12,879,925,248 active per token"),  # Mixtral 8x7B v0.1
    ("t5-v1_1", 32128, 247_577_856, "geglu_tanh"),  # google/t5-v1_1-base
    ("pythia", 50304, 162_322_944, "fraction=0.25"),  # EleutherAI/pythia-160m
    ("bloom", 250880, 559_214_592, "alibi"),  # bigscience/bloom-560m
    ("gemma2", 256000, 2_614_341_888, "22, 24: attention=sliding_window(window=4096)"),  # google/gemma-2-2b
    ("lfm2", 65536, 1_170_340_608, "mixer=short_conv(conv_size=3, bias=False)"),  # LiquidAI/LFM2-1.2B
]


@pytest.mark.parametrize("name,vocab,total,feature", REFERENCE_SIZES)
def test_full_presets_have_the_reference_size(name, vocab, total, feature, capsys):
    assert main(["describe", f"preset:{name}", "--vocab-size", str(vocab)]) == 0
    out = capsys.readouterr().out
    assert f"parameters  {total:,} total" in out
    assert feature in out


def test_a_preset_is_a_base_for_one_override():
    cfg = load("preset:llama", ["model.norm_placement=post"]).model
    assert cfg.norm_placement.name == "post" and cfg.ffn.name == "swiglu" and cfg.position.name == "rope"


@pytest.mark.parametrize("changes,key,message", [
    ({"type_vocab_size": 2}, "model.type_vocab_size", "kind 'encoder' only"),
    ({"kind": "encoder", "type_vocab_size": -1}, "model.type_vocab_size", ">= 0"),
    ({"embedding_norm": "yes"}, "model.embedding_norm", "expected true or false"),
    ({"head": "mlm"}, "model.head", "does not fit kind 'decoder'"),
    ({"kind": "encoder", "head": {"name": "mlm", "norm_eps": 0}}, "model.head", "norm_eps must be positive"),
    ({"kind": "encoder", "head": {"name": "mlm", "activation": "tanh"}}, "model.head.activation", "gelu_tanh"),
    ({"head": {"name": "lm", "scale_input": 2}}, "model.head.scale_input", "expected true or false"),
])
def test_new_fields_validate(changes, key, message):
    with pytest.raises(ConfigError, match=message) as info:
        model_config(tiny(**changes))
    assert info.value.key == key


def test_token_types_add_a_learned_vector_per_type():
    torch.manual_seed(0)
    model = build_model(tiny(kind="encoder", type_vocab_size=3), 11).eval()
    ids = torch.randint(1, 11, (2, 5))
    zeros, ones = torch.zeros_like(ids), torch.ones_like(ids)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, model(ids, token_type_ids=zeros).logits)  # default: type 0
        assert not torch.allclose(model(ids, token_type_ids=ones).logits, model(ids).logits)
        model.token_type.weight[1] = model.token_type.weight[0]
        assert torch.equal(model(ids, token_type_ids=ones).logits, model(ids).logits)
    plain = build_model(tiny(kind="encoder"), 11)
    assert plain.token_type is None
    with pytest.raises(ValueError, match="type_vocab_size is 0"):
        plain(ids, token_type_ids=zeros)


def test_embedding_norm_normalizes_what_the_first_layer_sees():
    torch.manual_seed(0)
    model = build_model(tiny(kind="encoder", embedding_norm=True, norm={"name": "layernorm", "eps": 1e-12}),
                        11).eval()
    seen = []
    model.encoder.layers[0].register_forward_pre_hook(lambda layer, args: seen.append(args[0]))
    model(torch.randint(1, 11, (2, 5)))
    hidden = seen[0]
    torch.testing.assert_close(hidden.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(hidden.std(-1, unbiased=False), torch.ones(2, 5), atol=1e-4, rtol=0)
    assert sum(p.numel() for p in model.encoder.embedding_norm.parameters()) == 2 * 16


def test_lm_head_scale_input_divides_by_sqrt_d_model():
    torch.manual_seed(0)
    plain = build_model(tiny(), 11).eval()
    scaled = build_model(tiny(head={"name": "lm", "scale_input": True}), 11).eval()
    scaled.load_state_dict(plain.state_dict())
    ids = torch.randint(1, 11, (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(scaled(ids).logits, plain(ids).logits / 4.0)  # d_model 16


def test_mlm_head_transforms_then_projects_with_a_bias():
    torch.manual_seed(0)
    model = build_model(tiny(kind="encoder", head="mlm"), 11).eval()
    head = model.head
    assert head.proj.weight is model.embed.weight and head.proj.bias is not None
    h = torch.randn(2, 3, 16)
    expected = torch.nn.functional.layer_norm(torch.nn.functional.gelu(head.transform(h)), (16,), head.norm.weight,
                                              head.norm.bias, 1e-12) @ model.embed.weight.T + head.proj.bias
    torch.testing.assert_close(head(h), expected)
