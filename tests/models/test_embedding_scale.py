"""Issue 26 §2: an additive position signal that dwarfs the token embeddings is declared, shown by
`describe` and warned about before training. Each declared scale is checked against a real CPU build:
the RMS of the built model's token embeddings (as the first layer sees them) and of what its position
scheme's ``embed`` adds."""
import math
from dataclasses import dataclass

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.components.positions import POSITIONS, PositionScheme
from arch_zoo.experiment import load
from arch_zoo.models import build_model
from arch_zoo.models.embedding_scale import WARN_RATIO, embedding_scale

VOCAB = 512
MODEL = {"kind": "decoder", "d_model": 64, "n_layers": 1, "n_heads": 4, "d_ff": 64, "max_seq_len": 128}


def _model(**changes):
    return load({"name": "scale", "model": {**MODEL, **changes}}).model


def _measured(m):
    torch.manual_seed(0)
    model = build_model(m, VOCAB)
    with torch.no_grad():
        tokens = model.embed(torch.arange(VOCAB).unsqueeze(0))
        n = m.max_seq_len
        stack = model.decoder if hasattr(model, "decoder") else model.encoder
        signal = stack.position.embed(torch.zeros(1, n, m.d_model), torch.arange(n).unsqueeze(0))
    return float(signal.pow(2).mean().sqrt()), float(tokens.pow(2).mean().sqrt())


@pytest.mark.parametrize("position", ["sinusoidal", "learned", "rope", "alibi", "none"])
@pytest.mark.parametrize("init,scaled", [("normal", False), ("xavier", True), ("xavier", False),
                                         ({"name": "normal", "std": 0.5}, False)])
def test_declared_scales_match_a_built_model(position, init, scaled):
    m = _model(position=position, init=init, scale_embeddings=scaled)
    declared = embedding_scale(m, VOCAB)
    signal, tokens = _measured(m)
    assert declared.position_rms == pytest.approx(signal, rel=0.03, abs=1e-12)
    if signal == 0:
        assert declared.ratio is None and declared.warning() is None
        assert "adds nothing to the token embeddings" in declared.describe()
    else:
        assert declared.token_rms == pytest.approx(tokens, rel=0.03)
        assert declared.ratio == pytest.approx(signal / tokens, rel=0.05)


def test_the_trap_warns_and_the_2017_recipe_does_not():
    trap = embedding_scale(_model(position="sinusoidal"), VOCAB)  # N(0, 0.02) tokens + unit sin/cos
    assert trap.ratio == pytest.approx(math.sqrt(0.5) / 0.02) and trap.ratio > WARN_RATIO
    assert "sinusoidal adds a signal 35x the token embeddings'" in trap.warning()
    assert "35.4x; over 10x" in trap.describe()
    assert embedding_scale(_model(position="sinusoidal", init="xavier", scale_embeddings=True), VOCAB).warning() is None
    assert embedding_scale(_model(position="learned"), VOCAB).warning() is None  # the same init as the tokens


@dataclass(frozen=True)
class _NoOptions:
    pass


class _Ramp(PositionScheme):
    """A plugin that declares nothing: a fixed ramp added to the embeddings (measured instead)."""

    def __init__(self, options, ctx):
        super().__init__()
        self.register_buffer("ramp", torch.linspace(-1.0, 1.0, ctx.d_model), persistent=False)

    def embed(self, x, pos):
        return x + self.ramp


@pytest.fixture
def ramp():
    POSITIONS.register("test_ramp", _NoOptions, "a ramp, for tests")(_Ramp)
    yield "test_ramp"
    POSITIONS._entries.pop("test_ramp")  # later tests in this process see the built-ins only


def test_an_undeclared_plugin_scheme_is_measured(ramp):
    m = _model(position=ramp)
    signal, tokens = _measured(m)
    declared = embedding_scale(m, VOCAB)
    assert declared.position_rms == pytest.approx(signal, rel=1e-6) and declared.ratio > WARN_RATIO
    assert declared.token_rms == pytest.approx(tokens, rel=0.03)


def test_describe_shows_the_ratio(capsys):
    assert main(["describe", "configs/experiments/char_lm.yaml", "model.position=sinusoidal", "--vocab-size",
                 str(VOCAB)]) == 0
    out = capsys.readouterr().out
    assert "  signal        sinusoidal adds RMS 0.707 to token embeddings of RMS 0.02: 35.4x; over 10x" in out
    assert main(["describe", "configs/experiments/char_lm.yaml", "--vocab-size", str(VOCAB)]) == 0
    assert "  signal        rope adds nothing to the token embeddings" in capsys.readouterr().out
