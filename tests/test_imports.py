from pathlib import Path

from tests.conftest import run_with_torch_only


def test_models_import_with_torch_alone():
    """arch_zoo.models must not pull Lightning, wandb, pandas or OmegaConf."""
    proc = run_with_torch_only("""
import torch
from arch_zoo.models import build_model
m = build_model({'kind': 'encoder_decoder', 'd_model': 16, 'n_heads': 2, 'n_layers': 1, 'position': 'rope'}, 11)
print(m(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 2, dtype=torch.long)).logits.shape)
""")
    assert proc.returncode == 0, proc.stderr
    assert "torch.Size([1, 2, 11])" in proc.stdout


def test_the_model_path_needs_the_schema_and_the_model_registries_only():
    """DESIGN: `import arch_zoo.models` (and building a model from a mapping) loads no module of
    data/, recipes/ or sweeps/, nor the catalog of every family."""
    proc = run_with_torch_only("""
import sys
from arch_zoo.models import build_model
build_model({'kind': 'decoder', 'd_model': 16, 'n_heads': 2, 'n_layers': 1, 'position': 'alibi'}, 11)
loaded = sorted(m for m in sys.modules if m.startswith(('arch_zoo.data', 'arch_zoo.recipes', 'arch_zoo.sweeps',
                                                        'arch_zoo.config.catalog')))
print('loaded:', loaded, 'models' in sys.modules['arch_zoo.models'].__name__)
""")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["loaded:", "[]", "True"], proc.stdout


def test_sweeps_preload_the_report_libraries_on_a_background_thread():
    """While workers train, `arch-zoo sweep` imports pandas & co. for its final table off the main thread."""
    import subprocess
    import sys

    code = """
import sys, threading
from arch_zoo.cli.sweep_support import preload_reports
assert "pandas" not in sys.modules
preload_reports()
loaders = [t for t in threading.enumerate() if t.name == "arch-zoo-preload-reports"]
assert len(loaders) == 1 and loaders[0].daemon
loaders[0].join(120)
print("arch_zoo.reports" in sys.modules, "pandas" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"]


# ------------------------------------------------------------------------------ import layering

def _import_graph():
    """Module -> arch_zoo modules it imports anywhere in its source (function-level imports
    included: a cycle held apart by a local import is still a cycle). Importing ``a.b.c`` from
    outside package ``a.b`` also runs ``a/b/__init__.py``, so that counts as an edge too. A string
    that is an arch_zoo module's dotted name counts as an import of it: ``importlib`` takes names as
    data (a table of packages to import, a forkserver's preload list), and an import by name is an
    import all the same."""
    import ast
    from pathlib import Path

    import arch_zoo

    root = Path(arch_zoo.__file__).parent
    modules = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                base = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value \
                    and node.value in modules:
                targets = [node.value]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                for i in range(2, len(parts) + 1):  # the packages on the way, then the module itself
                    name = ".".join(parts[:i])
                    if name in modules and name != mod and not (mod + ".").startswith(name + "."):
                        edges[mod].add(name)
    return edges


def _cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in edges:
        if v not in index:
            visit(v)
    return set(found)


# Cycles still to break up; the test fails when one is added, and also when one of these is gone,
# so the list can only shrink. Empty since issue 14 §5: shared pieces live in leaf modules.
KNOWN_CYCLES: set = set()


def test_the_schema_is_a_leaf_and_validation_sits_above_the_registries():
    """DESIGN "The next shape": schema as a leaf module that imports no registry; validation
    against registries above it; no function-level imports kept only to dodge a cycle."""
    edges = _import_graph()
    leaf = {"arch_zoo.errors", "arch_zoo.coerce", "arch_zoo.config.schema", "arch_zoo.config"}
    for mod in leaf:
        assert edges[mod] <= leaf, f"{mod} imports {sorted(edges[mod] - leaf)}"
    assert edges["arch_zoo.config.schema"] <= {"arch_zoo.coerce"}
    assert edges["arch_zoo.coerce"] <= {"arch_zoo.errors"}
    # the registry coerces options: it sits beside coerce, below the config package it knows nothing of
    assert edges["arch_zoo.registry"] <= {"arch_zoo.errors", "arch_zoo.coerce"}
    assert not [m for m, deps in edges.items() if "arch_zoo.config.coerce" in deps]  # nothing uses the old path
    for mod in ("arch_zoo.config.parse", "arch_zoo.config.plugins"):  # right above the registry
        assert edges[mod] <= leaf | {"arch_zoo.registry", "arch_zoo.config.parse"}, f"{mod} imports {sorted(edges[mod] - leaf)}"
    for mod, deps in edges.items():
        if mod.startswith(("arch_zoo.components.", "arch_zoo.data.")):
            assert not deps & {"arch_zoo.config.validation", "arch_zoo.config.loading", "arch_zoo.models"}, mod
    assert {"arch_zoo.config.model_families", "arch_zoo.components.positions"} <= edges["arch_zoo.config.validation"] | edges["arch_zoo.config.loading"]


# DESIGN's layers, top to bottom; a module may import its own layer and any below it. config,
# rundir, data, tracking and recipes sit beside the stack (below training, above the registry).
LAYERS = ["cli", "dashboards", "reports", "sweeps", "training", "models", "components"]


def _layer(mod: str):
    part = mod.split(".")[1] if mod.count(".") else None
    return LAYERS.index(part) if part in LAYERS else None


def test_no_arrow_climbs_back_up():
    """Issue 27 §1.2: cli -> dashboards -> reports -> sweeps -> training -> models -> components; the
    dashboards' writers (arch_zoo.tracking) sit below training, which uses them live."""
    edges = _import_graph()
    upward = sorted(f"{mod} -> {dep}" for mod, deps in edges.items() for dep in deps
                    if _layer(mod) is not None and _layer(dep) is not None and _layer(dep) < _layer(mod))
    assert not upward, upward
    beside = ("arch_zoo.config", "arch_zoo.rundir", "arch_zoo.data", "arch_zoo.tracking", "arch_zoo.registry",
              "arch_zoo.recipes")
    climbing = sorted(f"{mod} -> {dep}" for mod, deps in edges.items() if mod.startswith(beside)
                      for dep in deps if _layer(dep) is not None and _layer(dep) <= LAYERS.index("training"))
    assert not climbing, climbing
    assert edges["arch_zoo.rundir"] == set(), edges["arch_zoo.rundir"]  # a leaf: the run directory's schema
    # the package's own module (`arch_zoo.restore`, lazily) reaches no further up than training
    assert all(_layer(d) is None or _layer(d) >= LAYERS.index("training") for d in edges["arch_zoo"]), edges["arch_zoo"]


def test_config_is_one_package():
    """Issue 27 §1.1: the config modules live in arch_zoo/config/, none is left at the top."""
    import arch_zoo

    root = Path(arch_zoo.__file__).parent
    gone = [n for n in ("config_types", "loading", "validation", "layer_configs", "catalog", "plugins") if (root / f"{n}.py").exists()]
    assert not gone and not (root / "config.py").exists(), gone
    assert {"schema", "parse", "catalog", "plugins", "validation", "layers", "loading"} <= {p.stem for p in (root / "config").glob("*.py")}


def test_no_import_cycles_among_arch_zoo_modules():
    """Issue 14 §5: no import cycles held apart by function-level imports."""
    cycles = _cycles(_import_graph())
    assert not cycles - KNOWN_CYCLES, f"new import cycles: {[sorted(c) for c in cycles - KNOWN_CYCLES]}"
    assert not KNOWN_CYCLES - cycles, f"gone, drop from KNOWN_CYCLES: {[sorted(c) for c in KNOWN_CYCLES - cycles]}"


def test_the_schema_imports_without_components_models_or_omegaconf():
    proc = run_with_torch_only("""
import sys
import arch_zoo.config
cfg = arch_zoo.config.ExperimentConfig()
bad = [m for m in sys.modules if m.startswith(('arch_zoo.components', 'arch_zoo.models', 'arch_zoo.config.validation',
                                               'arch_zoo.config.loading', 'omegaconf', 'torch'))]
print(cfg.model.norm_placement.name, bad)
""")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["pre", "[]"]


# ------------------------------------------------------------------ what the quick commands import

# Issue 26 §4: `describe`, `components`, `sweep --dry-run` and user mistakes answer without Lightning,
# transformers or torch._dynamo (4-28 s of imports between them), nor the loggers' and reports' libraries.
HEAVY = ("lightning", "pytorch_lightning", "lightning_fabric", "transformers", "torch._dynamo", "torchmetrics",
         "wandb", "mlflow", "ray", "matplotlib", "scipy", "pandas")

# One interpreter runs the commands in turn through the CLI's ``main``; each is charged with the heavy
# modules that were first loaded while it ran (sys.modules only grows, so none escapes).
COMMANDS = """
import json, sys
from arch_zoo.cli import main
seen, out = set(), []
for argv in json.loads(sys.argv[1]):
    code = main(argv)
    new = sorted(m for m in {heavy!r} if m in sys.modules and m not in seen)
    seen.update(new)
    out.append([" ".join(argv), code, new])
print(json.dumps(out))
"""


def _quick_commands(ws):
    """(argv, exit code): the quick commands on shipped configs, and user mistakes of each kind."""
    import yaml

    from arch_zoo.data.tokenizers import CharTokenizer
    from arch_zoo.config.loading import save
    from arch_zoo.experiment import load
    from tests.test_bad_input import EXPERIMENT

    (ws / "exp.yaml").write_text(yaml.safe_dump(EXPERIMENT))
    spec = {"name": "s", "base": "exp.yaml", "grid": {"model.position": ["rope", "alibi"]}, "seeds": [0]}
    (ws / "spec_bad_value.yaml").write_text(yaml.safe_dump({**spec, "grid": {"model.position": ["rope", "rop"]}}))
    (ws / "spec_unknown_key.yaml").write_text(yaml.safe_dump({**spec, "seed": [0]}))
    (ws / "run").mkdir()
    save(load(ws / "exp.yaml"), ws / "run" / "config.yaml")  # a run directory as `train` leaves it, untrained
    CharTokenizer().fit(["a small alphabet"]).save(ws / "run")
    ok = [["describe", "preset:llama-tiny"], ["describe", "preset:vaswani-tiny"], ["describe", "preset:t5-tiny"],
          ["describe", "configs/experiments/char_lm.yaml"], ["describe", f"{ws}/run"], ["components"],
          ["sweep", "sweeps/quickstart.yaml", "--dry-run", "--out", f"{ws}/store"]]
    mistakes = [["describe", f"{ws}/nope.yaml"], ["describe", "preset:gpt3"],
                ["describe", f"{ws}/exp.yaml", "model.positon=rope"],
                ["describe", f"{ws}/exp.yaml", "model.position=rop"],
                ["describe", f"{ws}/exp.yaml", "train.precision=bf17-mixed"],
                ["train", f"{ws}/nope.yaml"], ["train", f"{ws}/exp.yaml", "--out", f"{ws}/r", "train.strategy=dpp"],
                ["train", f"{ws}/exp.yaml", "--out", f"{ws}/r", "train.accelerator=gpu", "train.devices=4096"],
                ["train", f"{ws}/exp.yaml", "--out", f"{ws}/r", "logging.mlflow.enabled=true",
                 "logging.mlflow.tracking_uri=127.0.0.1:5000"],
                ["sweep", f"{ws}/nope.yaml"], ["sweep", f"{ws}/spec_unknown_key.yaml", "--out", f"{ws}/store"],
                ["sweep", f"{ws}/spec_bad_value.yaml", "--dry-run", "--out", f"{ws}/store"], ["fly"]]
    return [(a, 0) for a in ok] + [(a, 2) for a in mistakes]


def test_describe_components_dry_run_and_user_mistakes_import_no_lightning(tmp_path):
    """Issue 26 §4: these answer within ~2 s on 2 cores because they import none of HEAVY; the test
    asserts the imports, not a time. Every command must also have run to its end (its exit code)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    import arch_zoo

    commands = _quick_commands(tmp_path)
    proc = subprocess.run([sys.executable, "-c", COMMANDS.format(heavy=HEAVY), json.dumps([a for a, _ in commands])],
                          capture_output=True, text=True, timeout=300, cwd=Path(arch_zoo.__file__).parent.parent,
                          env={**os.environ, "ARCH_ZOO_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    assert [code for _, code, _ in got] == [code for _, code in commands], got
    assert {line: new for line, _, new in got if new} == {}
    assert not (tmp_path / "store").exists() and not (tmp_path / "r").exists()


def test_the_console_script_describes_a_preset_without_lightning():
    """The same through the installed `arch-zoo` script, every import of the process listed by
    ``PYTHONPROFILEIMPORTTIME`` (``sweep`` leaves by ``os._exit``, past any atexit hook; this needs none)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("arch-zoo")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "arch_zoo"]
    proc = subprocess.run(cmd + ["describe", "preset:llama-tiny"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0 and "parameters  4,188,480 total" in proc.stdout, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert {"torch", "arch_zoo.describe"} <= imported  # the listing is real
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_the_lightning_names_kept_as_data_are_the_installed_lightning_s():
    """train.precision and train.strategy are checked against data, not by importing Lightning to ask
    it; this holds that data to what the installed Lightning accepts."""
    import typing

    from lightning_fabric import connector
    from pytorch_lightning.strategies import StrategyRegistry

    from arch_zoo.training.accel import STRATEGIES
    from arch_zoo.config.validation import PRECISIONS

    assert sorted(PRECISIONS) == sorted({*typing.get_args(connector._PRECISION_INPUT_STR),
                                         *typing.get_args(connector._PRECISION_INPUT_STR_ALIAS)})
    assert sorted(STRATEGIES) == sorted({"auto", *StrategyRegistry.available_strategies()})


def test_interop_depends_on_nothing_above_models_and_data():
    """Issue 57 §2: interop (converters, export writer, families) sits below sweeps and training; what
    reads run directories to export one (``training.export``) sits above it."""
    edges = _import_graph()
    above = ("arch_zoo.sweeps", "arch_zoo.reports", "arch_zoo.dashboards", "arch_zoo.cli", "arch_zoo.training")
    interop = [m for m in edges if m == "arch_zoo.interop" or m.startswith("arch_zoo.interop.")]
    assert "arch_zoo.interop.families.llama" in interop  # the graph sees the family modules too
    climbing = sorted(f"{mod} -> {dep}" for mod in interop for dep in edges[mod]
                      if dep.startswith(tuple(p + "." for p in above)) or dep in above)
    assert not climbing, climbing


def test_config_is_a_foundation_and_the_package_root_reaches_no_part_of_training():
    """Issue 57 §3: config imports nothing from the packages that build on it (data, recipes,
    training, models, the experiment edge), by an import statement or by name: the families an
    experiment adds are imported as code by ``arch_zoo.experiment``, which runs their checks of a
    whole config. ``arch_zoo/__init__`` (every import of the package runs it) imports nothing
    at module level, and its lazy ``restore`` (``arch_zoo.trained``) reaches nothing of training."""
    import ast

    import arch_zoo
    from arch_zoo.experiment import EXPERIMENT_FAMILIES, all_registries

    edges = _import_graph()
    above = ("arch_zoo.recipes", "arch_zoo.data", "arch_zoo.training", "arch_zoo.models", "arch_zoo.experiment")
    climbing = sorted(f"{mod} -> {dep}" for mod, deps in edges.items() if mod.split(".")[:2] == ["arch_zoo", "config"]
                      for dep in deps if dep.startswith(above))
    assert not climbing, climbing
    # the edge imports the packages whose registries it lists, as code
    assert {"arch_zoo.data.tasks", "arch_zoo.recipes", "arch_zoo.config.loading"} <= edges["arch_zoo.experiment"]
    registries = all_registries()
    for family, package in (("tasks", "arch_zoo.data.tasks"), ("tokenizers", "arch_zoo.data"),
                            ("optimizers", "arch_zoo.recipes"), ("schedules", "arch_zoo.recipes")):
        assert registries[family] in EXPERIMENT_FAMILIES and registries[family].entries(), family
        assert all(e.factory.__module__.startswith(package) for e in registries[family].entries()
                   if e.source is None), family
    root = ast.parse((Path(arch_zoo.__file__)).read_text())
    assert not [n for n in root.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    # restoring a run needs config, data and models, not training: the root reaches nothing of training or above
    assert edges["arch_zoo"] and all(_layer(d) is None or _layer(d) > LAYERS.index("training")
                                     for d in edges["arch_zoo"]), edges["arch_zoo"]
    assert not [f"{m} -> {d}" for m in edges if m.startswith("arch_zoo.trained") for d in edges[m]
                if _layer(d) is not None and _layer(d) <= LAYERS.index("training")]


def test_config_loads_no_task_or_recipe_when_it_reads_a_model_or_a_whole_file(tmp_path):
    """Issue 57 §3: importing config's loader and catalog, and reading a model out of an experiment
    file that names a task and a recipe (through a ``base:`` chain whose task section merges), imports
    no module of data, recipes or the experiment edge: config does not fill the registries of the
    layers above it at runtime. The edge then reads the same file whole."""
    import subprocess
    import sys

    import arch_zoo

    repo = Path(arch_zoo.__file__).parent.parent
    (tmp_path / "exp.yaml").write_text(f"base: {repo}/configs/experiments/char_lm.yaml\n"
                                       "task: {seq_len: 64}\ntrain: {optimizer: {name: adamw}}\n")
    code = f"""
import sys
import arch_zoo.config.loading, arch_zoo.config.catalog
from arch_zoo.config.loading import load_dict, model_config
above = ('arch_zoo.data', 'arch_zoo.recipes', 'arch_zoo.experiment', 'arch_zoo.training')
print('imported:', sorted(m for m in sys.modules if m.startswith(above)))
print(model_config({str(tmp_path / "exp.yaml")!r}).d_model, load_dict({str(tmp_path / "exp.yaml")!r})['task']['seq_len'])
print('read:', sorted(m for m in sys.modules if m.startswith(above)))
from arch_zoo.experiment import load
cfg = load({str(tmp_path / "exp.yaml")!r})
print(cfg.task.name, cfg.task.options.seq_len, 'arch_zoo.data.tasks' in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["imported:", "[]", "128", "64", "read:", "[]", "char_lm", "64", "True"], proc.stdout
