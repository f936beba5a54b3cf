"""Each family's plugin interface (``arch_zoo.testing.interface``): every built-in component fits
its family's, and ``check_interface`` refuses a component that does not."""
import pytest
from torch import nn

from arch_zoo.components.feedforward import FEEDFORWARD
from arch_zoo.components.norms import NORMS
from arch_zoo.components.positions import POSITIONS
from arch_zoo.experiment import all_registries
from arch_zoo.models import build_model
from arch_zoo.testing import INTERFACES, check_component, check_interface, interface
from tests.test_plugins import isolated_registries  # noqa: F401  (autouse: registries restored)


@pytest.mark.parametrize("family", sorted(INTERFACES))
def test_every_built_in_component_fits_its_familys_interface(family):
    for name in all_registries()[family].choices():
        check_interface(family, name)


def test_a_norm_is_built_with_its_options_and_the_width_it_normalises():
    """What the interface says is what the package does: a norm registered here sees (options, dim)
    with dim = d_model at every place a model builds one."""
    seen = []

    @NORMS.register("recording_norm")
    class Recording(nn.LayerNorm):
        def __init__(self, options, dim):
            seen.append(dim)
            super().__init__(dim)

    build_model({"kind": "decoder", "d_model": 24, "n_layers": 2, "n_heads": 2, "norm": "recording_norm"}, 11)
    assert seen and set(seen) == {24}
    assert interface("norms").signature == "(options, dim: int)"


@pytest.mark.parametrize("family, make, expected", [
    ("norms", lambda: type("NoDim", (nn.Module,), {"__init__": lambda self, options: nn.Module.__init__(self)}),
     r"norms 'broken': the package builds it as \(options, dim: int\)"),
    ("feedforward", lambda: type("Ungated", (nn.Module,), {"__init__": lambda self, options, ctx: None}),
     r"feedforward 'broken': .* must set gated or gated_for"),
    ("positions", lambda: type("NotAScheme", (nn.Module,), {"__init__": lambda self, options, ctx: None}),
     r"positions 'broken': .* must subclass arch_zoo.components.positions.PositionScheme"),
])
def test_check_interface_refuses_a_component_that_does_not_fit(family, make, expected):
    registry = {"norms": NORMS, "feedforward": FEEDFORWARD, "positions": POSITIONS}[family]
    registry.register("broken")(make())
    with pytest.raises(AssertionError, match=expected):
        check_interface(family, "broken")
    with pytest.raises(AssertionError, match=expected):
        check_component(family, "broken")  # checked before any model is built


def test_an_unknown_family_names_the_families():
    with pytest.raises(KeyError, match="families: attention, attention_kernel"):
        interface("norm")
