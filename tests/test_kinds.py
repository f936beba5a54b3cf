"""Issue 57 §4: a model kind declares what it has (config.kinds) and the code reads the declarations
instead of comparing the kind's name."""
import ast
from pathlib import Path

import pytest

import arch_zoo
from arch_zoo.config.kinds import KINDS
from arch_zoo.models import build_model
from arch_zoo.models.blocks import Stack
from tests.conftest import tiny


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_declares_what_build_model_builds(kind):
    declared = KINDS[kind]
    model = build_model(tiny(kind=kind, n_layers=1, type_vocab_size=2 if declared.token_types else 0), 11)
    built = tuple(name for name in ("encoder", "decoder") if isinstance(getattr(model, name, None), Stack))
    assert built == declared.stacks
    crosses = "decoder" in built and any(layer.cross_attn is not None for layer in model.decoder.layers)
    assert crosses == declared.cross_attention
    assert (model.token_type is not None) == declared.token_types
    assert declared.decodes == ("decoder" in built and model.decoder.causal)


def _name_comparisons(path: Path):
    """Comparisons of something called kind (kind, model_kind, cfg.kind, ...) with a kind's name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = any((isinstance(s, ast.Name) and s.id.endswith("kind")) or
                    (isinstance(s, ast.Attribute) and s.attr.endswith("kind")) for s in sides)
        names = [s for s in sides if isinstance(s, ast.Constant) and s.value in KINDS]
        names += [e for s in sides if isinstance(s, (ast.Tuple, ast.List)) for e in s.elts
                  if isinstance(e, ast.Constant) and e.value in KINDS]
        if named and names:
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_the_config_the_describe_the_flops_the_pair_tasks_and_the_test_grid_read_the_declarations():
    root = Path(arch_zoo.__file__).parent
    # the whole package: only the declarations themselves name the kinds
    files = [p for p in sorted(root.rglob("*.py")) if p != root / "config" / "kinds.py"]
    assert root / "models" / "blocks.py" in files and root / "interop" / "hf_remote.py" in files
    found = [hit for path in files for hit in _name_comparisons(path)]
    assert not found, found
