"""An experiment config that builds on another (``base:``): merged by the command line's rules, paths
resolved from the file that names them, cycles and missing files refused in one line."""
import pytest
import yaml

from arch_zoo.cli import main
from arch_zoo.coerce import to_dict
from arch_zoo.experiment import load
from arch_zoo.errors import ConfigError
from tests.conftest import tiny
from tests.test_plugins import isolated_registries  # noqa: F401  (autouse: the plugin norm is removed after)

BASE = {"name": "base", "seed": 3,
        "model": tiny(position={"name": "alibi", "max_bias": 4}, norm={"name": "rmsnorm", "eps": 1e-5}),
        "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32, "tokenizer": "char"},
        "train": {"max_steps": 7, "batch_size": 4, "lr": 3e-3, "schedule": "cosine", "warmup_steps": 2}}

# (a child's own keys, the same change as key=value overrides on the command line)
CHILDREN = [
    ({"name": "mine", "train": {"max_steps": 9}}, ["name=mine", "train.max_steps=9"]),
    ({"model": {"position": "rope"}}, ["model.position=rope"]),  # a new name drops alibi's max_bias
    ({"model": {"position": {"max_bias": 2}}}, ["model.position.max_bias=2"]),  # same name: options merge
    ({"model": {"position": {"name": "rope", "fraction": 0.5}, "d_model": 32}},
     ["model.position=rope", "model.position.fraction=0.5", "model.d_model=32"]),
    ({"task": {"name": "copy", "n_train": 16, "n_val": 4, "n_test": 4}},
     ["task=copy", "task.n_train=16", "task.n_val=4", "task.n_test=4"]),
    ({"train": {"optimizer": {"name": "muon", "adamw_lr": 1e-3}, "schedule": {"name": "wsd", "decay_fraction": 0.5}}},
     ["train.optimizer=muon", "train.optimizer.adamw_lr=1e-3", "train.schedule=wsd",
      "train.schedule.decay_fraction=0.5"]),
]


@pytest.mark.parametrize("child, overrides", CHILDREN, ids=[" ".join(o) for _, o in CHILDREN])
def test_a_child_config_equals_its_base_with_the_same_keys_on_the_command_line(child, overrides, tmp_path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "child.yaml").write_text(yaml.safe_dump({"base": "base.yaml", **child}))
    got, expected = load(tmp_path / "child.yaml"), load(tmp_path / "base.yaml", overrides)
    assert to_dict(got) == to_dict(expected)
    assert to_dict(got) != to_dict(load(tmp_path / "base.yaml"))  # the child changed something


def test_paths_resolve_from_the_file_that_names_them_through_a_chain_of_three(tmp_path, monkeypatch):
    """shared/exp.yaml names its model base and plugin relative to shared/; lab/mid.yaml names
    ../shared/exp.yaml; lab/deep/top.yaml names ../mid.yaml; loaded from an unrelated directory.
    The command line still goes last, and interpolations see the merged config."""
    shared, deep = tmp_path / "shared", tmp_path / "lab" / "deep"
    shared.mkdir()
    deep.mkdir(parents=True)
    (shared / "m.yaml").write_text(yaml.safe_dump(tiny(d_model=32)))
    (shared / "norm_plugin.py").write_text(
        "from dataclasses import dataclass\nimport torch\nfrom arch_zoo.components.norms import NORMS\n"
        "@dataclass(frozen=True)\nclass O:\n    eps: float = 1e-6\n"
        "@NORMS.register('base_test_norm', O)\nclass N(torch.nn.LayerNorm):\n"
        "    def __init__(self, options, dim):\n        super().__init__(dim, eps=options.eps)\n")
    (shared / "exp.yaml").write_text(yaml.safe_dump({**BASE, "model": {"base": "m.yaml", "norm": "base_test_norm"},
                                                     "plugins": ["norm_plugin.py"]}))
    (tmp_path / "lab" / "mid.yaml").write_text(yaml.safe_dump({"base": "../shared/exp.yaml", "name": "mid",
                                                              "train": {"max_steps": 11}}))
    (deep / "top.yaml").write_text("base: ../mid.yaml\nmodel:\n  d_ff: ${model.d_model}\ntrain:\n  lr: 0.01\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load(deep / "top.yaml", ["train.batch_size=2"])
    assert (cfg.name, cfg.seed, cfg.model.d_model, cfg.model.d_ff, cfg.model.norm.name) == \
        ("mid", 3, 32, 32, "base_test_norm")
    assert (cfg.train.max_steps, cfg.train.lr, cfg.train.batch_size, cfg.train.warmup_steps) == (11, 0.01, 2, 2)
    assert [p["path"] if isinstance(p, dict) else p for p in to_dict(cfg)["plugins"]] == \
        [str(shared / "norm_plugin.py")]


def test_a_file_holding_only_a_base_is_that_experiment_and_a_model_files_base_is_still_a_model(tmp_path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "alias.yaml").write_text("base: base.yaml\n")
    assert to_dict(load(tmp_path / "alias.yaml")) == to_dict(load(tmp_path / "base.yaml"))
    (tmp_path / "m.yaml").write_text("base: preset:gpt2\nd_model: 64\nn_layers: 2\nn_heads: 4\n")
    cfg = load(tmp_path / "m.yaml")
    assert (cfg.name, cfg.model.d_model) == ("m", 64) and cfg.model == load("preset:gpt2",
                                                                          ["model.d_model=64", "model.n_layers=2",
                                                                           "model.n_heads=4"]).model


def test_a_sweep_varies_a_config_that_builds_on_another(tmp_path):
    from arch_zoo.sweeps.plan import make_plan
    from arch_zoo.sweeps.spec import load_spec

    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "child.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "train": {"max_steps": 5}}))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"name": "s", "base": "child.yaml", "seeds": [0],
                                                        "grid": {"model.position": ["rope", "alibi"]}}))
    runs = make_plan(load_spec(tmp_path / "spec.yaml")).runs
    assert {(r.config.model.position.name, r.config.train.max_steps, r.config.model.norm.name) for r in runs} == \
        {("rope", 5, "rmsnorm"), ("alibi", 5, "rmsnorm")}


@pytest.mark.parametrize("files, start, expected", [
    ({"a.yaml": "base: a.yaml\nname: a\n"}, "a.yaml", "base: the bases form a cycle: {d}/a.yaml -> {d}/a.yaml"),
    ({"a.yaml": "base: sub/b.yaml\nname: a\n", "sub/b.yaml": "base: ../a.yaml\nseed: 1\n"}, "a.yaml",
     "base: the bases form a cycle: {d}/a.yaml -> {d}/sub/b.yaml -> {d}/a.yaml"),
    ({"a.yaml": "base: b.yaml\nname: a\n", "b.yaml": "base: c.yaml\nname: b\n", "c.yaml": "base: b.yaml\nseed: 2\n"},
     "a.yaml", "base: the bases form a cycle: {d}/b.yaml -> {d}/c.yaml -> {d}/b.yaml"),
    ({"a.yaml": "base: b.yaml\nname: a\n", "b.yaml": "base: gone.yaml\nname: b\n"}, "a.yaml",
     "base: file not found: {d}/gone.yaml (the base of {d}/b.yaml)"),
    ({"a.yaml": "base: b.yaml\nname: a\n", "b.yaml": "name: [1, 2\n"}, "a.yaml", "base: cannot parse {d}/b.yaml"),
])
def test_a_cycle_or_a_missing_base_is_one_line_exit_2_naming_the_files(files, start, expected, tmp_path, capsys):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    d = tmp_path.resolve()
    with pytest.raises(ConfigError) as info:
        load(tmp_path / start)
    assert str(info.value).startswith(expected.format(d=d))
    capsys.readouterr()
    assert main(["describe", str(tmp_path / start)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"arch-zoo: error: {expected.format(d=d)}") and "Traceback" not in err
