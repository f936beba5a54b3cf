"""Invariants across the registry grid, checked by ``arch_zoo.testing`` (the helper plugins use):
a newly registered component, a plugin's included, is covered without editing this file.

The grid is read from the schema and the registries: every model key that chooses a registered
component (position, norm, ffn, attention, init, ...) and every other architecture choice the
schema spells as a fixed set (norm_placement, until it is a registry). Two layers keep its cost
bounded as families grow: each choice alone, other keys at their defaults, under every model kind
and every invariant; and training over a pairwise grid, where every two choices of any two keys
(model kind included) train together in at least one model. A component that needs options to
be built declares them as ``example_options`` on its class.
"""
import dataclasses
import itertools
import typing

import pytest
import torch

from arch_zoo import testing
from arch_zoo.config import ModelConfig
from arch_zoo.config.catalog import all_registries
from arch_zoo.config.coerce import field_family
from arch_zoo.models import build_model
from tests.conftest import tiny

REG = all_registries()
POSITIONS = REG["positions"].choices()
KINDS = list(testing.KINDS)
VOCAB = testing.VOCAB


def _axes():
    """{model key: [values]}: registry families by their entries (with example options), the other
    fixed-choice architecture keys by their Literal values."""
    axes = {}
    hints = typing.get_type_hints(ModelConfig)
    for f in dataclasses.fields(ModelConfig):
        family = field_family(f)
        if family is not None and f.name != "head":
            axes[f.name] = [{"name": n, **testing.example_options(family, n)} for n in REG[family].choices()]
            if f.default is None:  # an optional component (e.g. a norm over q and k): off is a choice too
                axes[f.name].insert(0, None)
        elif typing.get_origin(hints[f.name]) is typing.Literal and f.name != "kind":
            axes[f.name] = list(typing.get_args(hints[f.name]))
    return axes


AXES = _axes()


def _label(value):
    return value["name"] if isinstance(value, dict) else str(value)


def _one_at_a_time():
    cases = []
    for key, values in AXES.items():
        for value in values:
            for check, fn, cfg in testing.cases({**testing.BASE, key: value}):
                if check == "trains" or not testing.builds(cfg):  # trains: the pairwise grid does that
                    continue
                cases.append(pytest.param(fn, cfg, id=f"{cfg['kind']}-{key}={_label(value)}-{check}"))
    return cases


def pairwise(axes):
    """Rows covering every pair of values of any two axes at least once (greedy; deterministic)."""
    keys = list(axes)
    uncovered = {((a, i), (b, j)) for a, b in itertools.combinations(keys, 2)
                 for i in range(len(axes[a])) for j in range(len(axes[b])) if valid({a: axes[a][i], b: axes[b][j]})}
    rows = []
    while uncovered:
        (a, i), (b, j) = min(uncovered)
        row = {a: i, b: j}
        for k in keys:  # each other axis: the valid value that covers the most pairs still open
            if k not in row:
                ranked = sorted(range(len(axes[k])), key=lambda v: (-sum(
                    ((k, v), (o, row[o])) in uncovered or ((o, row[o]), (k, v)) in uncovered for o in row), v))
                row[k] = next(v for v in ranked if valid({o: axes[o][x] for o, x in {**row, k: v}.items()}))
        uncovered -= {((a, row[a]), (b, row[b])) for a, b in itertools.combinations(keys, 2)}
        rows.append({k: axes[k][v] for k, v in row.items()})
    return rows


def valid(settings):
    return testing.builds(settings)


TRAIN_GRID = pairwise({"kind": KINDS, **AXES})


@pytest.mark.parametrize("check,cfg", _one_at_a_time())
def test_every_choice_keeps_every_invariant(check, cfg):
    """README, Tests: "causal masks never leak the future; padding never changes real tokens; `sdpa`
    and `explicit` agree to 1e-5; cached decoding equals the full forward", for every registered
    choice of every model key, under every model kind (arch_zoo.testing, as plugins run it)."""
    check(cfg)


@pytest.mark.outcome
@pytest.mark.parametrize("row", TRAIN_GRID, ids=["-".join(_label(v) for v in r.values()) for r in TRAIN_GRID])
def test_every_pair_of_choices_trains(row):
    """README, Tests: "every two choices of any two model keys (kind included) train together".

    Every parameter gets a finite, non-zero gradient, and eight Adam steps on a tiny learnable task
    (each position predicts its own token, padding ignored) cut the loss by more than 25%: a wiring
    bug that blocks learning (a detached branch, a norm that zeroes its input) fails here. The
    slowest rows (sandwich placement) cut it by 37%, the median by about 80%."""
    testing.trains({**testing.BASE, **row, **testing.TRAIN_SIZES})


def test_the_training_grid_covers_every_pair():
    """The pairwise grid is what it says (and smaller than the cross product it stands for)."""
    axes = {"kind": KINDS, **AXES}
    for a, b in itertools.combinations(axes, 2):
        seen = {(_label(r[a]), _label(r[b])) for r in TRAIN_GRID}
        assert seen == {(_label(x), _label(y)) for x in axes[a] for y in axes[b] if valid({a: x, b: y})}, (a, b)
    assert len(TRAIN_GRID) < 0.5 * len(list(itertools.product(*axes.values())))


def test_a_whole_padded_row_is_finite():
    model = build_model(tiny(kind="encoder"), VOCAB).eval()
    out = model(torch.randint(1, VOCAB, (2, 4)), torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])).logits
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("position", POSITIONS)
def test_encoder_is_permutation_equivariant_only_without_positions(position):
    torch.manual_seed(0)
    model = build_model(tiny(kind="encoder", position=position, n_layers=2), VOCAB).eval()
    if position == "t5_bias":  # std-0.02 initial biases barely move outputs; make them count
        torch.nn.init.normal_(model.encoder.position.bias.weight, std=1.0)
    ids = torch.randint(1, VOCAB, (1, 6))
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    with torch.no_grad():
        a = model(ids).logits[:, perm]
        b = model(ids[:, perm]).logits
    if position == "none":
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    else:
        assert not torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("kind", ["decoder", "encoder_decoder"])
def test_logits_to_keep_projects_only_the_last_positions(kind):
    torch.manual_seed(0)
    model = build_model(tiny(kind=kind, dropout=0.0), VOCAB).eval()
    ids = torch.randint(1, VOCAB, (2, 6))
    if kind == "decoder":
        full, last = model(ids).logits, model(ids, logits_to_keep=2).logits
    else:
        memory = model.encode(ids)
        full, last = model.decode(ids, memory).logits, model.decode(ids, memory, logits_to_keep=2).logits
    assert last.shape == (2, 2, VOCAB)
    torch.testing.assert_close(last, full[:, -2:])


@pytest.mark.parametrize("position", POSITIONS)
def test_models_move_between_dtypes_and_still_run(position):
    model = build_model(tiny(kind="decoder", position=position), VOCAB).to(torch.float64)
    ids = torch.randint(1, VOCAB, (2, 5))
    assert model(ids).logits.dtype == torch.float64
