"""Invariants across the registry grid, checked by ``arch_zoo.testing`` (the helper plugins use):
a newly registered component, a plugin's included, is covered without editing this file.

The grid is read from the schema and the registries: every model key that chooses a registered
component (position, norm, ffn, attention, init, ...) and every other architecture choice the
schema spells as a fixed set (norm_placement, until it is a registry). Two layers keep its cost
bounded as families grow: each choice alone, other keys at their defaults, under every model kind
and every invariant; and training over a pairwise grid, where every two choices of any two keys
(model kind included) train together in at least one model. A component that needs options to
be built, or to act in the grid's short sequences (a window shorter than them), declares them as
``example_options`` on its class; a key that only refines another (``qk_norm_scope``) names it in
its schema metadata (``acts_with``) and is tried with that key set. Each grid asserts that every
choice yields at least one case, so a choice that stops building cannot drop out silently.
"""
import dataclasses
import itertools
import typing

import pytest
import torch

from arch_zoo import testing
from arch_zoo.config import ModelConfig
from arch_zoo.experiment import all_registries
from arch_zoo.coerce import field_family
from arch_zoo.config.loading import model_config
from arch_zoo.models import build_model
from tests.conftest import tiny
from tests.interop.references import randomize

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
ACTS_WITH = {f.name: f.metadata["acts_with"] for f in dataclasses.fields(ModelConfig) if "acts_with" in f.metadata}


def with_what_it_refines(key, value, axes=AXES):
    """``{key: value}``, plus the key it refines set to its first choice that is not off."""
    other = ACTS_WITH.get(key)
    return {key: value} if other is None else {other: next(v for v in axes[other] if v is not None), key: value}


def _label(value):
    return value["name"] if isinstance(value, dict) else str(value)


def uncovered_choices(axes, covered):
    """'key=choice' for each choice of ``axes`` whose (key, index) is not in ``covered``."""
    return [f"{k}={_label(v)}" for k, values in axes.items() for i, v in enumerate(values) if (k, i) not in covered]


def one_at_a_time(axes):
    """(check, config, id) for each choice alone (other keys at their defaults) under every invariant
    and kind it builds for; a config met before (a key's default is the base model) runs once."""
    cases, seen, covered = [], set(), set()
    for key, values in axes.items():
        for i, value in enumerate(values):
            for check, fn, cfg in testing.cases({**testing.BASE, **with_what_it_refines(key, value, axes)}):
                if check == "trains" or not testing.builds(cfg):  # trains: the pairwise grid does that
                    continue
                covered.add((key, i))
                identity = (check, repr(model_config(cfg)))
                if identity not in seen:
                    seen.add(identity)
                    cases.append((fn, cfg, f"{cfg['kind']}-{key}={_label(value)}-{check}"))
    missing = uncovered_choices(axes, covered)
    assert not missing, f"no invariant case builds for {', '.join(missing)}"
    return cases


def pairwise(axes):
    """Rows covering every pair of values of any two axes at least once (greedy; deterministic);
    every value of every axis in at least one row."""
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
        rows.append(row)
    missing = uncovered_choices(axes, {(k, v) for row in rows for k, v in row.items()})
    assert not missing, f"no pairwise row builds with {', '.join(missing)}"
    return [{k: axes[k][v] for k, v in row.items()} for row in rows]


def valid(settings):
    """Whether ``settings`` build; a key that refines one they leave unset is judged with it set (a
    row sets it later) or, at its default, without it; and settings without a kind build under some kind (a recurrent mixer with
    qk_norm builds only where cross-attention reads it: a row picks that kind)."""
    refined = {}
    for key, value in settings.items():
        if ACTS_WITH.get(key) is not None and ACTS_WITH[key] not in settings:
            refined.update(with_what_it_refines(key, value))
    kinds = [{}] if "kind" in settings else [{"kind": k} for k in KINDS]
    bases = [refined, {}] if refined else [{}]  # a refining key at its default builds without what it refines
    return any(testing.builds({**base, **kind, **settings}) for base in bases for kind in kinds)


TRAIN_GRID = pairwise({"kind": KINDS, **AXES})


@pytest.mark.parametrize("check,cfg", [pytest.param(fn, cfg, id=i) for fn, cfg, i in one_at_a_time(AXES)])
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
    slowest rows (sandwich placement in an encoder) cut it by 29%, the median by about 85%."""
    testing.trains({**testing.BASE, **row, **testing.TRAIN_SIZES})


def test_the_training_grid_covers_every_pair():
    """The pairwise grid is what it says (and smaller than the cross product it stands for)."""
    axes = {"kind": KINDS, **AXES}
    for a, b in itertools.combinations(axes, 2):
        seen = {(_label(r[a]), _label(r[b])) for r in TRAIN_GRID}
        assert seen == {(_label(x), _label(y)) for x in axes[a] for y in axes[b] if valid({a: x, b: y})}, (a, b)
    assert len(TRAIN_GRID) < 0.5 * len(list(itertools.product(*axes.values())))


def test_the_grid_has_an_axis_for_every_model_key_that_names_a_component():
    """The axes are read from the schema, so a change in how it marks component fields must not empty
    the grid unseen (it once ran no case at all): every family testing.model_families() finds, by its
    key, and the built-in keys at least."""
    keys = {testing.model_key(family) for family in testing.model_families()}
    assert keys <= set(AXES)
    assert {"position", "norm", "norm_placement", "ffn", "attention", "attention_kernel", "qk_norm", "init"} <= set(AXES)


def test_a_choice_that_never_builds_fails_each_grid():
    """A registered choice that no model config accepts would drop out of the grids unseen; each
    grid refuses to be built without it instead."""
    axes = {"kind": KINDS, "position": AXES["position"], "n_heads": [2, 3]}  # d_model 16: 3 heads never divide it
    with pytest.raises(AssertionError, match="no pairwise row builds with n_heads=3"):
        pairwise(axes)
    with pytest.raises(AssertionError, match="no invariant case builds for n_heads=3"):
        one_at_a_time({"n_heads": [2, 3]})


SHORTEST = 5  # tokens: the training grid's sequences, the shortest any grid check feeds


def _outputs(cfg, ids):
    """Logits as built (init choices differ only there), with random weights (the same for the same
    parameter shapes: whatever else differs), and the parameter shapes."""
    model = testing._build(cfg).eval()
    with torch.no_grad():
        built = model(ids).logits
        randomize(model)
        return built, model(ids).logits, {k: t.shape for k, t in model.state_dict().items()}


def test_no_choice_computes_what_another_choice_of_its_key_does():
    """A choice whose options make it another in the grid's sequences is not tested at all (a 4096-key
    window over 5 to 13 tokens is global attention): every two choices of a key give different
    logits on SHORTEST tokens, as built or on the same random weights. The kernels are meant to agree."""
    ids = torch.randint(1, VOCAB, (2, SHORTEST), generator=torch.Generator().manual_seed(0))
    same = []
    for key, values in AXES.items():
        if key == testing.model_key(testing.kernel_family()):
            continue
        outs = [_outputs({**testing.BASE, **with_what_it_refines(key, v)}, ids) for v in values]
        for (a, x), (b, y) in itertools.combinations(zip(values, outs), 2):
            if x[2] != y[2]:  # other parameters: another model
                continue
            if max((x[0] - y[0]).abs().max(), (x[1] - y[1]).abs().max()) < 1e-5:
                same.append(f"{key}: {_label(a)} = {_label(b)}")
    assert not same, same


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
