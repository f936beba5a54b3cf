"""The docs cannot lie: the site builds with ``mkdocs build --strict`` (no broken link, anchor or
API reference), the reference pages hold every key, component and option of the code, and every
command and code block of Getting started, the concepts and the how-to guides runs, at tiny
settings, in one scratch directory. A block marked ``<!-- not-run: why -->`` is not run, but its
commands must still parse. ``how-to/own-component.md``'s worked example is run by
tests/test_plugins.py, block for block."""
import contextlib
import dataclasses
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUN_ELSEWHERE = {"how-to/own-component.md": "tests/test_plugins.py",
                 "how-to/own-mixer.md": "tests/components/test_own_mixer_doc.py"}
# Appended to every `train` and `sweep` a page runs (not to a --dry-run): a few steps, tiny evaluations.
TINY = ["train.max_steps=4", "train.val_every=2", "train.val_batches=1", "train.batch_size=4",
        "train.exact_match_samples=2", "train.progress_bar=false"]
FENCE = re.compile(r"(?:<!--\s*not-run:(?P<why>.*?)-->\s*\n)?^```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)^```\s*$",
                   re.S | re.M)
FILE_HEADER = re.compile(r"^# ([\w.-]+\.(?:py|ya?ml))(?:\s+\((?!abridged).*\))?\s*$")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


sys.path.insert(0, str(DOCS / "hooks"))
schema_doc = _load("schema_doc")
reference = _load("reference")


@dataclasses.dataclass
class Block:
    page: str
    lang: str
    body: str
    why: str  # "" when the block runs

    @property
    def file_name(self):
        m = FILE_HEADER.match(self.body.splitlines()[0]) if self.body.strip() else None
        return m.group(1) if m else None


def blocks(page: str):
    text = (DOCS / page).read_text()
    return [Block(page, m["lang"], m["body"], (m["why"] or "").strip()) for m in FENCE.finditer(text)]


def nav_pages():
    """Every page of the nav, in its order (the generated reference pages included)."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    out = []

    def walk(items):
        for item in items:
            for value in item.values():
                walk(value) if isinstance(value, list) else out.append(value)

    walk(nav)
    return out


RUN_PAGES = [p for p in nav_pages() if p.split("/")[0] in ("getting-started.md", "concepts", "how-to")
             and p not in RUN_ELSEWHERE]


def commands(body: str):
    """Each shell command of a bash block, as argv lists (`\\` continuations joined, `&&` split)."""
    for line in body.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            yield words[:cut]
            words = words[cut + 1:]


def make_targets():
    text = (ROOT / "Makefile").read_text()
    names = set(re.findall(r"^([\w.-]+)\s*:(?!=)", text, re.M))
    studies = re.search(r"^STUDIES := (.*)$", text, re.M).group(1).split()
    return names | {f"study-{s}" for s in studies}


def check_parses(argv, where: str):
    """A command the docs show but the test does not run: the parser (or the Makefile) accepts it."""
    from arch_zoo.cli import build_parser

    if argv[0] == "arch-zoo":
        args, extra = build_parser().parse_known_args(argv[1:])  # one-line errors raise ConfigError
        stray = [x for x in extra if x.startswith("-") or "=" not in x or not hasattr(args, "overrides")]
        assert not stray, f"{where}: {' '.join(argv)}: unrecognized {stray}"
    elif argv[0] == "make":
        missing = [t for t in argv[1:] if "=" not in t and t not in make_targets()]
        assert not missing, f"{where}: no Makefile target {missing}"
    else:
        assert argv[0] in ("source", "pytest"), f"{where}: a command the test cannot check: {argv}"


class Workspace:
    """One scratch directory where the pages run, in nav order, with the repository's configs and
    specs beside them (read-only, through symlinks), as a reader's checkout has them."""

    def __init__(self, path: Path):
        self.path = path
        for name in ("configs", "sweeps"):
            (path / name).symlink_to(ROOT / name)

    @contextlib.contextmanager
    def inside(self):
        cwd, env = os.getcwd(), dict(os.environ)
        os.chdir(self.path)
        try:
            yield
        finally:
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)  # --cache-dir sets $ARCH_ZOO_CACHE for the process

    def arch_zoo(self, argv, where: str):
        from arch_zoo.cli import main

        args = argv[1:]
        if args[:1] in (["train"], ["sweep"]) and "--dry-run" not in args:
            args = args + TINY
        out, err = io.StringIO(), io.StringIO()
        with self.inside(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
        return code, out.getvalue() + err.getvalue()

    def write(self, block: Block):
        target = (self.path / block.file_name).resolve()
        assert target.parent == self.path.resolve(), f"{block.page}: {block.file_name} outside the workspace"
        target.write_text(block.body + "\n")

    def run(self, block: Block):
        where = f"{block.page} ({block.lang} block: {block.body.splitlines()[0][:60]!r})"
        if block.file_name:
            return self.write(block)
        if block.lang == "bash":
            for argv in commands(block.body):
                assert argv[0] == "arch-zoo", f"{where}: cannot run {argv[0]!r} here; mark the block not-run"
                code, output = self.arch_zoo(argv, where)
                assert code == 0, f"{where}: {' '.join(argv)} exited {code}:\n{output[-3000:]}"
        elif block.lang == "console":  # `$ command` lines, each followed by exactly what it prints
            for chunk in re.split(r"^\$ ", block.body, flags=re.M)[1:]:
                line, _, expected = chunk.partition("\n")
                (argv,) = list(commands(line))
                _, output = self.arch_zoo(argv, where)
                assert output.strip() == expected.strip(), f"{where}: {line} printed:\n{output}"
        elif block.lang == "python":
            with self.inside(), contextlib.redirect_stdout(io.StringIO()):
                exec(compile(block.body, where, "exec"), {"__name__": "__docs__"})  # noqa: S102
        elif block.lang == "yaml":
            assert yaml.safe_load(block.body) is not None, where
        elif block.lang == "toml" and sys.version_info >= (3, 11):
            import tomllib

            tomllib.loads(block.body)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return Workspace(tmp_path_factory.mktemp("docs_workspace"))


@pytest.mark.parametrize("page", RUN_PAGES)
def test_every_block_of_the_page_runs(page, workspace):
    """In nav order, in one directory, as a reader working through the site: a later page may use
    the runs of an earlier one (the reports and dashboards pages read Getting started's sweep)."""
    runnable = [b for b in blocks(page) if not b.why]
    assert blocks(page) or page.startswith("concepts/"), f"{page} shows no command or code"
    for block in runnable:
        workspace.run(block)


def test_every_not_run_block_parses_and_says_why():
    pages = [p for p in nav_pages() if (DOCS / p).exists()]
    not_run = [b for p in pages for b in blocks(p) if b.why or p not in RUN_PAGES]
    shown = [b for b in not_run if b.lang == "bash"]
    assert len([b for b in shown if b.why]) >= 8  # the cluster, servers, studies, install, ... blocks
    for block in shown:
        for argv in commands(block.body):
            check_parses(argv, block.page)
    with pytest.raises(AssertionError, match="no Makefile target"):  # the check can fail
        check_parses(["make", "dmeo"], "here")


def test_own_component_example_is_what_test_plugins_runs(tmp_path):
    from tests.test_plugins import readme_files

    page = {b.file_name or "commands": b.body.strip() for b in blocks("how-to/own-component.md")
            if b.file_name or b.lang == "bash"}
    files = readme_files(tmp_path)
    assert set(page) == set(files) == {"my_positions.py", "test_my_positions.py", "experiment.yaml", "sweep.yaml",
                                       "commands"}
    assert all(page[k] == (files[k] if k == "commands" else files[k].read_text().strip()) for k in page)


def test_site_builds_strict(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = (site / "reference" / "config" / "index.html").read_text()
    assert "model.d_model" in config and "train.max_steps" in config
    assert "build_model" in (site / "reference" / "python" / "index.html").read_text()
    assert (site / "reports" / "positions" / "plots" / "loss_vs_length.png").is_file()


# ------------------------------------------------------------------------ the generated reference

def test_config_reference_has_every_key_with_type_default_and_meaning():
    page = reference.config_page()
    for prefix, cls in reference.config_sections():
        for row in reference.config_rows(prefix, cls):
            assert row["meaning"], f"{row['key']} has no meaning: add a comment on its line in the schema"
            assert f"| `{row['key']}` | " in page
    defaults = {r["key"]: r["default"] for p, c in reference.config_sections() for r in reference.config_rows(p, c)}
    from arch_zoo.config import ModelConfig, TrainConfig

    assert defaults["train.max_steps"] == str(TrainConfig().max_steps)
    assert defaults["model.position"] == ModelConfig().position.name
    assert defaults["train.betas"] == "[0.9, 0.98]" and defaults["task"] == "null"
    assert "per layer" in next(r["meaning"] for r in reference.config_rows("model.", ModelConfig) if r["key"] == "model.ffn")


def test_field_meanings_come_from_the_code():
    @dataclasses.dataclass
    class Base:
        a: int = 1  # the a
        # the b, said above it
        b: str = "x"
        c: float = dataclasses.field(default=0.5, metadata={"help": "the c"})

    @dataclasses.dataclass
    class Child(Base):
        d: bool = False

    assert [schema_doc.field_help(Child, n) for n in "abcd"] == ["the a", "the b, said above it", "the c", ""]
    assert schema_doc.type_text(schema_doc.resolved_hints(Base)["b"]) == "str"


def test_components_reference_has_every_component_and_option():
    page = reference.components_page()
    for family, reg in reference.registries().items():
        family_section = page.split(f"\n## {family}\n", 1)[1].split("\n## ", 1)[0]
        for entry in reg.entries():
            section = family_section.split(f"### `{entry.name}`", 1)[1].split("\n### ", 1)[0]
            for f in dataclasses.fields(entry.options):
                assert f"| `{f.name}` | " in section, (family, entry.name, f.name)
    assert "`model.norm`, `model.qk_norm`" in page and "Set by: `task.tokenizer`" in page


def test_cli_reference_has_every_command_and_option():
    page = reference.cli_page()
    for name, parser in reference.commands().items():
        section = page.split(f"## `{name}`", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in section or f", {option}" in section, (name, option)
    assert "143" in page.split("## Exit codes", 1)[1].split("\n## ", 1)[0]


def test_sweep_reference_matches_the_parser_keys():
    keys = {prefix + k for prefix, ks in reference.sweep_keys().items() for k in ks}
    assert keys == set(reference.SWEEP_MEANINGS), "docs/hooks/reference.py SWEEP_MEANINGS is out of step"
    assert all(f"| `{k}` |" in reference.sweep_page() for k in keys)


def test_presets_reference_has_every_preset():
    from arch_zoo.config.loading import preset_names

    page = reference.presets_page()
    assert all(f"## `{name}`" in page for name in preset_names())


def test_make_says_how_long_a_fresh_install_takes_before_it_starts(tmp_path):
    """On a machine without the virtual environment, `make demo` says first that the install takes
    about 7 minutes, as README and Getting started do, then installs, then runs the quickstart."""
    # as a user's shell runs it: under `make test` the variables of the outer make would make this a
    # sub-make, which prints "Entering directory" first
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    plan = subprocess.run(["make", "--no-print-directory", "-n", "demo", f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=env)
    lines = plan.stdout.splitlines()
    assert plan.returncode == 0 and "about 7 minutes on a fresh machine" in lines[0], plan.stdout
    assert "-m venv" in lines[1] and "sweeps/quickstart.yaml" in lines[-2]
    for page in (ROOT / "README.md", DOCS / "getting-started.md"):
        assert "about 7 minutes" in page.read_text(), page


def test_the_plugin_page_gives_every_familys_interface_as_arch_zoo_testing_does():
    from arch_zoo.experiment import all_registries
    from arch_zoo.testing import INTERFACES

    assert set(INTERFACES) == set(all_registries())  # a new family needs its interface
    text = (DOCS / "how-to" / "plugin-interfaces.md").read_text()
    rows = {m[0]: m[1:] for m in re.findall(r"^\| `(\w+)` \| (.+?) \| `(\(.*?\))` \| (.+) \|$", text, re.M)}
    assert set(rows) == set(INTERFACES)
    for family, face in INTERFACES.items():
        assert rows[family] == (f"`{face.base}`" if face.base else "any class", face.signature, face.builds), family


def _links(page: Path) -> set:
    """The pages ``page`` links to, resolved (anchors dropped, other sites left out)."""
    text = page.read_text()
    return {(page.parent / t).resolve() for t in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
            if not re.match(r"\w+://", t)}


@pytest.mark.parametrize("page", ["README.md", "docs/index.md", "docs/how-to/own-component.md"])
def test_the_mixer_page_is_linked_from_the_readme_the_index_and_the_component_page(page):
    """Not only from the site's nav: a reader of the README, the docs' front page or the plugin how-to finds it."""
    assert DOCS / "how-to" / "own-mixer.md" in _links(ROOT / page)


# ---------------------------------------------------------------------------------------- README

def test_readme_is_one_screen_or_three_and_its_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 250
    assert "make demo" in text and "make test" in text
    for target in _links(ROOT / "README.md"):
        assert target.exists(), f"README links to {target}, which does not exist"
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        for argv in commands(block):
            check_parses(argv, "README.md")
    (code,) = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102
