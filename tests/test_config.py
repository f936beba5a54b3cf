import re

import pytest

from arch_zoo.config import ModelConfig
from arch_zoo.config.loading import model_config, save
from arch_zoo.experiment import load
from arch_zoo.errors import ConfigError
from arch_zoo.models import build_model
from tests.conftest import tiny


def test_bare_names_and_options_parse_to_typed_specs():
    cfg = load({"model": {"position": {"name": "rope", "base": 500}, "norm": "rmsnorm"}})
    assert cfg.model.position.name == "rope"
    assert cfg.model.position.options.base == 500.0  # int in YAML, float in the schema
    assert cfg.model.norm.options.eps == 1e-6


def test_dotlist_overrides_replace_a_component_whose_name_changes():
    base = {"model": {"position": {"name": "alibi", "max_bias": 4}}}
    assert load(base, ["model.position=rope"]).model.position.name == "rope"
    assert load(base, ["model.position.max_bias=2"]).model.position.options.max_bias == 2.0
    assert load(base, ["model.n_heads=8", "model.d_model=64"]).model.n_heads == 8


def test_yaml_file_with_model_base_and_interpolation(tmp_path):
    (tmp_path / "m.yaml").write_text("kind: encoder\nd_model: 64\nn_heads: 4\n")
    (tmp_path / "e.yaml").write_text("name: x\nmodel:\n  base: m.yaml\n  d_ff: ${model.d_model}\n")
    cfg = load(tmp_path / "e.yaml")
    assert (cfg.model.kind, cfg.model.d_model, cfg.model.d_ff) == ("encoder", 64, 64)


def test_saved_config_rebuilds_the_same_model(tmp_path):
    import torch

    cfg = load("preset:decoder-small", ["model.position=alibi", "model.n_kv_heads=2"])
    save(cfg, tmp_path / "config.yaml")
    again = load(tmp_path / "config.yaml")
    assert again == cfg
    torch.manual_seed(0)
    a = build_model(cfg, 50)
    torch.manual_seed(0)
    b = build_model(again, 50)
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb and torch.equal(pa, pb)


def test_model_config_accepts_hand_built_dataclasses():
    cfg = model_config(ModelConfig(kind="encoder"))
    assert cfg.head.options.bias is False  # the default spec got its registered options


ERRORS = [
    ({"model": {"positon": "rope"}}, r"model\.positon: unknown key \(did you mean 'position'\?\)"),
    ({"model": {"position": {"name": "rope", "bsae": 1}}}, r"model\.position\.bsae: unknown option .*did you mean 'base'"),
    ({"modle": {}}, r"modle: unknown key \(did you mean 'model'\?\)"),
    ({"model": {"position": "rop"}}, r"model\.position: unknown position scheme 'rop' \(did you mean 'rope'\?\); choices: alibi, learned"),
    ({"model": {"ffn": "swiglu2"}}, r"model\.ffn: unknown feed-forward 'swiglu2'.*choices: clamped_swiglu, geglu"),
    ({"model": {"kind": "decoderr"}}, r"model\.kind: unknown value 'decoderr' \(did you mean 'decoder'\?\)"),
    ({"model": {"d_model": 30, "n_heads": 4}}, r"model\.n_heads: d_model \(30\) is not divisible by n_heads \(4\)"),
    ({"model": {"n_heads": 4, "n_kv_heads": 3}}, r"model\.n_kv_heads: n_heads \(4\) is not divisible by n_kv_heads \(3\)"),
    ({"model": {"d_model": 24, "n_heads": 2, "position": {"name": "rope", "fraction": 0.25}}},
     r"model\.position: RoPE needs an even.*= 3"),
    ({"model": {"max_seq_len": 64, "position": {"name": "learned", "size": 32}}},
     r"model\.position\.size: learned position table \(32\) is shorter than model\.max_seq_len \(64\)"),
    ({"model": {"d_model": "big"}}, r"model\.d_model: expected an integer, got 'big'"),
    ({"model": {"dropout": 1.5}}, r"model\.dropout: must be in \[0, 1\)"),
    ({"model": {"kind": "decoder", "head": "sequence_classification"}},
     r"model\.head: head 'sequence_classification' does not fit kind 'decoder'"),
    ({"model": {"kind": "encoder_decoder", "position": "learned", "cross_attention_position": True}},
     r"model\.cross_attention_position: position 'learned' only adds to embeddings"),
]


@pytest.mark.parametrize("data,pattern", ERRORS, ids=[p.split(":")[0].replace("\\", "") for _, p in ERRORS])
def test_config_errors_name_the_key_and_the_choices(data, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load(data)


def test_missing_file_and_bad_override():
    with pytest.raises(ConfigError, match="file not found"):
        load("does/not/exist.yaml")
    with pytest.raises(ConfigError, match="key=value"):
        load({}, ["model.position"])
    with pytest.raises(ConfigError, match="unknown preset 'gtp2'"):
        load("preset:gtp2")


# A component and its option set on one command line, for every family a config can name. The
# base names another component (with options of its own) so a name change is really tested.
BASE = {"model": {"kind": "encoder", "position": {"name": "rope", "base": 500}, "norm": "rmsnorm",
                  "attention_kernel": "sdpa", "head": "lm", "init": "xavier", "ffn": "gelu"}}
TASK_BASE = {"model": {"kind": "decoder"}, "task": {"name": "char_lm", "max_chars": 1000, "tokenizer": "char"}}
COMPONENT_OPTIONS = [  # (base, component key, new name, option, value, what the option reads back as)
    (BASE, "model.position", "alibi", "max_bias", "4", 4.0),
    (BASE, "model.norm", "layernorm", "bias", "false", False),
    (BASE, "model.head", "sequence_classification", "n_classes", "3", 3),
    (BASE, "model.init", "normal", "std", "0.05", 0.05),
    (TASK_BASE, "task", "copy", "max_len", "5", 5),
    (TASK_BASE, "task.tokenizer", "bpe", "vocab_size", "300", 300),
]


def _component(cfg, key):
    spec = cfg
    for part in key.split("."):
        spec = getattr(spec, part) if not isinstance(spec, dict) else spec[part]
    if isinstance(spec, (str, dict)):  # a task's tokenizer stays plain data: a name or {name, **options}
        return (spec, {}) if isinstance(spec, str) else (spec["name"], spec)
    return spec.name, vars(spec.options)


@pytest.mark.parametrize("base,key,name,option,value,expected", COMPONENT_OPTIONS,
                         ids=[c[1] for c in COMPONENT_OPTIONS])
def test_a_component_and_its_option_on_one_command_line_combine_in_either_order(base, key, name, option, value,
                                                                                 expected):
    """README (Configs): "options given with it on the same command line apply to the final name,
    in either order" -- `model.position=alibi model.position.max_bias=4` and the reverse."""
    key_for = {"task.tokenizer": "task.options.tokenizer"}.get(key, key)
    for overrides in ([f"{key}={name}", f"{key}.{option}={value}"], [f"{key}.{option}={value}", f"{key}={name}"]):
        got_name, options = _component(load(base, overrides), key_for)
        assert (got_name, options[option]) == (name, expected), overrides


MISFITS = COMPONENT_OPTIONS


@pytest.mark.parametrize("base,key,name,option,value,expected", MISFITS, ids=[c[1] for c in MISFITS])
def test_an_option_that_does_not_fit_the_final_name_is_an_error_naming_the_key(base, key, name, option, value,
                                                                               expected):
    """The final name decides which options apply: the option set for `name` fails once the
    command line switches the component back to the base's name, naming the key and the options."""
    original = _component(load(base), {"task.tokenizer": "task.options.tokenizer"}.get(key, key))[0]
    for overrides in ([f"{key}={name}", f"{key}.{option}={value}", f"{key}={original}"],
                      [f"{key}.{option}={value}", f"{key}={original}"]):
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)}\.{option}: unknown option for .* '{original}'"
                                              rf"(.*)?; options: "):
            load(base, overrides)


def test_an_option_for_a_component_without_options_names_the_key():
    with pytest.raises(ConfigError, match=r"^model\.ffn\.width: unknown option for feed-forward 'swiglu'; "
                                          r"options: none"):
        load(BASE, ["model.ffn.width=4", "model.ffn=swiglu"])


def test_a_name_change_drops_the_file_s_options_but_keeps_the_command_line_s():
    base = {"model": {"position": {"name": "alibi", "max_bias": 4}}}
    assert load(base, ["model.position=rope", "model.position.fraction=0.5"]).model.position.options.fraction == 0.5
    assert load(base, ["model.position=alibi"]).model.position.options.max_bias == 4.0  # same name: kept
    assert load(base, ["model.position=rope", "model.position=alibi"]).model.position.options.max_bias == 8.0


@pytest.mark.parametrize("ffn,gated", [("relu", False), ("gelu", False), ("gelu_tanh", False), ("swiglu", True),
                                       ("geglu", True), ("reglu", True)])
def test_d_ff_defaults_to_4x_d_model_and_8_3_for_gated_ffns(ffn, gated):
    """README (model keys): "`d_ff` defaults to 4 * d_model, and to 8/3 * d_model rounded up to a
    multiple of 8 for gated FFNs (swiglu, geglu, reglu)"; the FFN class declares it is gated."""
    from arch_zoo.components.feedforward import FEEDFORWARD

    assert FEEDFORWARD.get(ffn).factory.gated is gated
    for d_model, gated_width in ((64, 176), (96, 256), (256, 688)):
        cfg = load({"model": {"d_model": d_model, "n_heads": 4, "ffn": ffn}})
        assert cfg.model.d_ff == (gated_width if gated else 4 * d_model)
        assert load({"model": {"d_model": d_model, "n_heads": 4, "ffn": ffn, "d_ff": 100}}).model.d_ff == 100


def test_the_default_d_ff_follows_overrides_and_is_saved_as_a_number(tmp_path):
    cfg = load({"model": {"d_model": 64, "n_heads": 4}}, ["model.d_model=32", "model.ffn=swiglu"])
    assert cfg.model.d_ff == 88  # 8/3 * 32 = 85.3, up to a multiple of 8
    save(cfg, tmp_path / "config.yaml")
    assert "d_ff: 88" in (tmp_path / "config.yaml").read_text()
    assert build_model({"d_model": 32, "n_heads": 4, "ffn": "swiglu"}, 10).state_dict()[
        "decoder.layers.0.ffn.sublayer.gate.weight"].shape == (88, 32)


def test_a_config_that_sets_the_old_attention_scale_option_is_told_where_it_moved():
    """Configs saved before the scale became a model key (T5's `{name: sdpa, scale: 1.0}`, the kernel's
    options) get one line that names the new key, not a bare 'unknown option'."""
    with pytest.raises(ConfigError) as err:
        model_config({**tiny(), "attention_kernel": {"name": "sdpa", "scale": 1.0}})
    assert str(err.value) == ("model.attention_kernel.scale: not an option of the attention kernel any more: "
                              "set model.attention_scale instead")


@pytest.mark.parametrize("kernel", ["sdpa", "explicit"])
def test_a_config_that_names_a_kernel_under_the_old_attention_key_is_told_where_it_moved(kernel):
    """README model keys: `attention` is the pattern, `attention_kernel` the kernel; a config written
    when `attention` named the kernel gets one line naming the new key."""
    with pytest.raises(ConfigError) as err:
        model_config({**tiny(), "attention": kernel})
    assert str(err.value) == (f"model.attention: '{kernel}' is not one of the attention patterns any more: set "
                              f"model.attention_kernel={kernel} (the kernel has its own key; model.attention "
                              f"is the pattern)")
