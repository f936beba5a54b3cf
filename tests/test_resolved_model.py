"""Issue 57 §3 and §5: the resolved model config is a value (the validated config and each stack's
layer configs, made once by validation), which ``build_model`` builds; the functions that make and
describe it read as their steps."""
import ast
import dataclasses
from pathlib import Path

import pytest
import yaml

import arch_zoo
from arch_zoo.config.loading import resolved_model, to_yaml
from arch_zoo.experiment import load
from arch_zoo.config.schema import ResolvedModel
from arch_zoo.errors import ConfigError
from arch_zoo.models.build import build_model
from tests.conftest import tiny

LAYERS = [{"range": "0:1", "ffn": "swiglu", "d_ff": 24}]


def test_load_resolves_the_model_once_into_a_value_that_build_model_builds(monkeypatch):
    import arch_zoo.config.validation as validation

    cfg = load({"model": tiny(kind="encoder_decoder", n_layers=2, layers=LAYERS)})
    resolved = cfg.resolved_model
    assert isinstance(resolved, ResolvedModel) and resolved.config is cfg.model
    assert [c.ffn.name for c in resolved.layers("encoder")] == ["swiglu", "gelu"]
    assert [c.d_ff for c in resolved.layers("decoder")] == [24, 32]
    assert resolved_model(cfg) is resolved and resolved_model(resolved) is resolved
    monkeypatch.setattr(validation, "_validated", lambda *a: pytest.fail("validated again"))
    model = build_model(resolved, 11)
    assert [hasattr(layer.ffn.sublayer, "gate") for layer in model.decoder.layers] == [True, False]
    assert model.config is cfg.model  # the model keeps the plain config (saved with checkpoints)


def test_the_resolution_holds_for_its_own_model_only_and_is_no_key_of_the_config():
    cfg = load({"model": tiny(n_layers=2, layers=LAYERS)})
    assert cfg.resolved() is cfg.resolved_model
    assert dataclasses.replace(cfg, seed=3).resolved() is cfg.resolved_model  # the same model: still its own
    changed = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, d_model=32))
    assert changed.resolved() is None and resolved_model(changed).config.d_model == 32
    assert changed == dataclasses.replace(changed, resolved_model=None)  # not compared
    assert "resolved_model" not in yaml.safe_load(to_yaml(cfg))
    with pytest.raises(ConfigError) as err:
        load({"model": tiny(), "resolved_model": {}})
    assert err.value.key == "resolved_model"


def test_build_model_is_in_its_own_module_and_keeps_its_import_path():
    from arch_zoo.models import build_model as public
    from arch_zoo.models.transformer import build_model as old_path

    assert public is old_path is build_model


@pytest.mark.parametrize("path, name", [("config/validation.py", "validate_model"),
                                        ("config/validation.py", "_validated"),
                                        ("describe.py", "describe_text")])
def test_the_long_functions_read_as_their_steps(path, name):
    tree = ast.parse((Path(arch_zoo.__file__).parent / path).read_text())
    (fn,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert fn.end_lineno - fn.lineno + 1 < 60
