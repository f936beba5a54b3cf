"""The generated reference pages: config keys from the schema dataclasses, components from the
registries, commands from the argparse parsers, sweep-spec keys from the spec parser's key lists.
Each ``*_page()`` returns Markdown; ``site.py`` (the MkDocs hook) adds them to the build, and
tests/test_docs.py checks them against the code. Every import of the code goes through one of the
small functions at the top, so a module that moves is a one-line change here."""
from __future__ import annotations

import argparse
import dataclasses
from typing import Dict, List, Tuple

from schema_doc import cell, default_value, field_help, prose, resolved_hints, type_text, yaml_text


def schema():
    """The root of the experiment config schema (its component keys need the registries filled)."""
    import arch_zoo.experiment  # noqa: F401
    from arch_zoo.config import ExperimentConfig

    return ExperimentConfig


def registries():
    from arch_zoo.experiment import all_registries

    return all_registries()


def per_layer_keys() -> List[str]:
    from arch_zoo.config.layers import layer_keys

    return layer_keys()


def layer_entry_keys() -> Tuple[str, ...]:
    from arch_zoo.config.layers import ENTRY_KEYS

    return ENTRY_KEYS


def parser() -> argparse.ArgumentParser:
    from arch_zoo.cli import build_parser

    return build_parser()


def traits(entry) -> str:
    from arch_zoo.describe import _traits

    return _traits(entry).strip().strip("()")


def sweep_keys() -> Dict[str, Tuple[str, ...]]:
    """The spec's keys, as the parser checks them: section -> allowed keys."""
    from arch_zoo.sweeps.halving import HALVING_KEYS
    from arch_zoo.sweeps.seed_spec import KEYS as SEED_KEYS
    from arch_zoo.sweeps.spec import NATIVE_KEYS, RANDOM_KEYS
    from arch_zoo.sweeps.suite import SUITE_KEYS, TASK_KEYS
    from arch_zoo.sweeps.tune import RANGE_KEYS, TUNE_KEYS

    return {"": NATIVE_KEYS, "random.": RANDOM_KEYS, "tune.": TUNE_KEYS, "tune.values.": RANGE_KEYS,
            "tune.halving.": HALVING_KEYS, "budget.": ("match", "tolerance"), "seeds.": SEED_KEYS, "suite.": SUITE_KEYS,
            "suite.tasks[].": TASK_KEYS}


# ----------------------------------------------------------------------------- config keys

def _component_family(f: dataclasses.Field):
    """The registry a schema field names components of (None for a plain field)."""
    from arch_zoo.coerce import field_family
    from arch_zoo.registry import family_registry

    family = field_family(f)
    return family_registry(family) if family is not None else None


def _keys(cls: type) -> tuple:
    """The fields of a config section that are keys (a derived field, computed by validation, is not)."""
    from arch_zoo.coerce import schema_fields

    return schema_fields(cls)


def config_sections() -> List[Tuple[str, type]]:
    """(dotted prefix, dataclass) for the root and every nested section, depth first."""
    out: List[Tuple[str, type]] = []

    def walk(prefix: str, cls: type) -> None:
        out.append((prefix, cls))
        hints = resolved_hints(cls)
        for f in _keys(cls):
            if _component_family(f) is None and dataclasses.is_dataclass(hints[f.name]):
                walk(f"{prefix}{f.name}.", hints[f.name])

    walk("", schema())
    return out


def config_rows(prefix: str, cls: type) -> List[Dict[str, str]]:
    hints, layered = resolved_hints(cls), set(per_layer_keys()) if prefix == "model." else set()
    rows = []
    for f in _keys(cls):
        family = _component_family(f)
        if family is not None:
            kind = f"{family.kind} ([choices](components.md#{family.family}))"
            tp = kind + (" or null" if f.default is None else "")
        elif dataclasses.is_dataclass(hints[f.name]):
            tp = f"mapping ([below](#{(prefix + f.name).replace('.', '')}))"
        else:
            tp = type_text(hints[f.name])
        nested = family is None and dataclasses.is_dataclass(hints[f.name])
        default = "see below" if nested else yaml_text(default_value(f))
        meaning = field_help(cls, f.name)
        if f.name in layered:
            meaning += ("; " if meaning else "") + "per layer too ([`model.layers`](#model-layers))"
        rows.append({"key": prefix + f.name, "type": tp, "default": default, "meaning": meaning})
    return rows


def config_page() -> str:
    lines = ["# Config keys", "",
             "Every key of an experiment config, read from the schema (`arch_zoo/config/schema.py`): its type, its "
             "default and what it means. A component key takes a bare name (`position: rope`) or a name with "
             "options (`position: {name: rope, base: 500000}`); the [components](components.md) page lists "
             "each one's options. Unknown keys are errors with a did-you-mean.", ""]
    for prefix, cls in config_sections():
        title = prefix.rstrip(".") or "top level"
        lines += [f"## {title}", "", "| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        for r in config_rows(prefix, cls):
            lines.append(f"| `{r['key']}` | {cell(r['type'])} | `{cell(r['default'])}` | {prose(r['meaning'])} |")
        lines.append("")
        if prefix == "model.":
            lines += layers_section()
    return "\n".join(lines)


def layers_section() -> List[str]:
    entry = ", ".join(f"`{k}`" for k in layer_entry_keys())
    keys = ", ".join(f"`{k}`" for k in per_layer_keys())
    return ["### Per-layer changes: `model.layers` { #model-layers }", "",
            f"A list of entries applied in order, later over earlier. An entry holds {entry} (where it "
            "applies: a Python slice or one index over the stack's layers, a list of changes repeated over "
            "the range, and for `encoder_decoder` models the stack) and any of these model keys, the ones "
            f"that belong to one layer: {keys}. Any other key is an error naming it. "
            "[The registry](../concepts/registry.md#per-layer-changes) shows examples.", ""]


# ------------------------------------------------------------------------------- components

def keys_taking(family: str) -> List[str]:
    """The config keys (and task options) whose value is a component of ``family``."""
    found = []
    for prefix, cls in config_sections():
        for f in _keys(cls):
            fam = _component_family(f)
            if fam is not None and fam.family == family:
                found.append(prefix + f.name)
    for entry in registries()["tasks"].entries():
        for f in dataclasses.fields(entry.options):
            fam = _component_family(f)
            if fam is not None and fam.family == family and f"task.{f.name}" not in found:
                found.append(f"task.{f.name}")
    return found


def components_page() -> str:
    lines = ["# Components", "",
             "Every registered component, family by family, read from the registries (what "
             "`arch-zoo components` prints). A component's options go beside its name: "
             "`{name: rope, base: 500000, fraction: 0.5}`. Your own components register the same way "
             "([plugins](../how-to/own-component.md)).", ""]
    for family, reg in registries().items():
        keys = ", ".join(f"`{k}`" for k in keys_taking(family)) or "—"
        lines += [f"## {family}", "", f"{reg.kind.capitalize()}s. Set by: {keys}.", ""]
        for entry in reg.entries():
            lines += [f"### `{entry.name}`", "", prose(_sentence(entry.description[:1].upper() + entry.description[1:], ""))]
            extra = traits(entry)
            kinds = getattr(entry.factory, "kinds", None)
            if extra:
                lines[-1] += f" *{extra}*."
            if family == "tasks" and kinds:
                lines[-1] += f" Model kinds: {', '.join(kinds)}."
            lines.append("")
            fields = dataclasses.fields(entry.options)
            if fields:
                hints = resolved_hints(entry.options)
                lines += ["| option | type | default | meaning |", "| --- | --- | --- | --- |"]
                for f in fields:
                    fam = _component_family(f)
                    tp = f"{fam.kind} ([choices](#{fam.family}))" if fam is not None else type_text(hints[f.name])
                    lines.append(f"| `{f.name}` | {cell(tp)} | `{cell(yaml_text(default_value(f)))}` "
                                 f"| {prose(field_help(entry.options, f.name))} |")
                lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ commands

def commands() -> Dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _summaries() -> Dict[str, str]:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a.help or "" for a in sub._choices_actions}


def _sentence(text: str, more: str) -> str:
    text = text.strip()
    if text and text[-1] not in ".)!?":
        text += "."
    return f"{text} {more}".strip()


def _argument(action: argparse.Action) -> Dict[str, str]:
    if action.option_strings:
        name = ", ".join(action.option_strings)
        if action.nargs != 0:
            name += " " + (action.metavar or action.dest.upper())
    else:
        name = action.metavar or action.dest
    notes = action.help or ""
    if action.choices is not None and not isinstance(action.choices, dict):
        notes = _sentence(notes, f"Choices: {', '.join(map(str, action.choices))}.")
    default = action.default
    if action.option_strings and action.nargs != 0 and default not in (None, [], argparse.SUPPRESS):
        if "default" not in notes:
            shown = " ".join(map(str, default)) if isinstance(default, list) else default
            notes = _sentence(notes, f"Default: `{shown}`.")
    if isinstance(action, argparse._AppendAction) and "repeatable" not in notes:
        notes = _sentence(notes, "Repeatable.")
    return {"name": name, "notes": notes.strip()}


def cli_page() -> str:
    import arch_zoo.cli as cli

    lines = ["# Commands", "",
             "Every `arch-zoo` command with its arguments, read from the parsers in `arch_zoo/cli/` "
             "(what `arch-zoo COMMAND --help` prints). Commands that take a config also take "
             "`key=value` overrides, before or after the options.", "",
             "## Exit codes", "", cli.__doc__.split("Exit codes:", 1)[1].split("\n\n")[0].strip()
             .replace("\n", " "), ""]
    summaries = _summaries()
    for name, p in commands().items():
        usage = " ".join(p.format_usage().split())
        usage = usage.removeprefix("usage: ")
        lines += [f"## `{name}`", "", summaries.get(name, "").capitalize() + ".", "",
                  "```text", usage, "```", "",
                  "| argument | meaning |", "| --- | --- |"]
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            a = _argument(action)
            lines.append(f"| `{cell(a['name'])}` | {prose(a['notes'])} |")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- sweep spec

# The spec parser keeps its keys in tuples, not a dataclass; their meanings are written here, and
# tests/test_docs.py fails when the parser gains or loses a key this table does not match.
SWEEP_MEANINGS = {
    "name": "the sweep's name: its run store is `OUT/<name>/` (default: the file's name)",
    "description": "free text printed at the top of the sweep's report",
    "base": "the experiment config every run starts from: a path relative to the spec file, or `preset:NAME`",
    "overrides": "`key: value` (or a dotlist) applied to every run, before the axes",
    "grid": "axes crossed with each other: `{key: [values]}`",
    "zip": "axes that vary together (equal lengths): `{key: [values]}`",
    "random": "a random search: `n` distinct samples of `parameters`, drawn with `seed`",
    "seeds": "the seeds every variant runs (default: the base config's `seed`), or adaptive seeds "
             "`{start, max, step, rule, alpha, first}`: more seeds only where a comparison is undecided "
             "([adaptive seeds](../how-to/adaptive-seeds.md))",
    "seeds.start": "seeds every variant runs first (at least 2)",
    "seeds.max": "the most seeds a comparison gets (at least `start`)",
    "seeds.step": "seeds a round adds to each undecided comparison (default 1)",
    "seeds.rule": "the alpha-spending function: `obrien-fleming` (default) or `pocock`",
    "seeds.alpha": "the two-sided error rate over all comparisons (default 0.05; Bonferroni between them)",
    "seeds.first": "the first seed (default 0): the seeds are first, first + 1, ...",
    "baseline": "the variant every other is compared against: `{key: value}`",
    "metric": "the metric that ranks variants: `{name, goal, min_effect, claim}`; goal defaults to the metric's "
              "declared direction; `min_effect`, the smallest difference that counts (below it a Δ is "
              "'equivalent'), defaults per pair to a quarter of the two variants' pooled seed spread; `claim: "
              "{better_by: D, alpha: A}` tests 'each variant beats its baseline by at least D' one-sided "
              "([what the report tests](../concepts/controlled-comparisons.md#what-the-report-tests))",
    "match_params": "`true` or `{tolerance: 0.01}`: the same as `budget: {match: params}`",
    "budget": "what every variant gets the same amount of: `tokens` (default), `params` or `flops`",
    "tune": "per-variant tuning of one key (or a `grid` of several) before the comparison ([a tuned sweep](../how-to/tuned-sweep.md))",
    "scale": "a size ladder: every variant at several sizes (`sizes`, or a `rule` of widths, of depths or of "
             "parameter targets), each with its budget "
             "(`budget: {tokens_per_param: K}` or IsoFLOP `flops`), `lr: tune | transfer`, `warmup_fraction`, "
             "`holdout: largest | none` (default largest from 4 rungs), `fit: false` (per-rung tables only; "
             "otherwise at least 3 rungs) "
             "([size ladders](../how-to/sweeps.md#size-ladders-does-it-hold-at-scale))",
    "suite": "a probe suite: every variant trained on every (task, options) entry, scored per task and on "
             "average; a shipped suite's name (`mad`) or `{name, tasks}` "
             "([probe suites](../how-to/sweeps.md#probe-suites))",
    "suite.name": "the suite's name in the report (default `suite`)",
    "suite.description": "free text about the suite",
    "suite.tasks": "the suite's tasks: a list of `{task, options, vary, label, overrides}`",
    "suite.tasks[].task": "a registered task's name (`arch-zoo components`)",
    "suite.tasks[].options": "the task's options at its baseline level; the task's defaults elsewhere (the base's "
                             "task is replaced whole)",
    "suite.tasks[].vary": "`{option: [values]}`: one more entry per value, each the baseline with that one option "
                          "changed (MAD's difficulty levels)",
    "suite.tasks[].label": "the entry's name in run ids and tables (default: the task's name)",
    "suite.tasks[].overrides": "other config keys for this task's entries, e.g. `{train.max_steps: 2000}`",
    "tune.grid": "instead of `key` and `values`: `{key: [values], key2: [values]}`, every combination tuned "
                 "(e.g. MAD's lr x weight decay)",
    "random.n": "how many distinct samples",
    "random.seed": "fixes the samples (not the runs' seeds)",
    "random.parameters": "`{key: {min, max, scale}}` (scale `linear` or `log`) or `{key: {values: [...]}}`",
    "tune.key": "the config key tuned per variant; not an axis",
    "tune.values": "a list of values, or a range `{min, max, n, log}`",
    "tune.seeds": "the tuning seeds (stage 1); must differ from `seeds`",
    "tune.select": "the validation metric that picks each variant's value: a name or `{name, goal}`",
    "tune.halving": "successive halving of stage 1: `{eta, min_steps}`",
    "tune.values.min": "the range's smallest value",
    "tune.values.max": "the range's largest value",
    "tune.values.n": "how many values, ends included",
    "tune.values.log": "space the values evenly in log scale",
    "tune.halving.eta": "keep the best 1/eta of a variant's values at each rung (an integer >= 2)",
    "tune.halving.min_steps": "the first rung's step; a multiple of `train.val_every` below `train.max_steps`",
    "budget.match": "`tokens`, `params` or `flops`",
    "budget.tolerance": "`params` only: the relative difference in parameters allowed (default 0.01)",
}


def sweep_rows() -> List[Tuple[str, str]]:
    rows = []
    for prefix, keys in sweep_keys().items():
        for k in keys:
            rows.append((prefix + k, SWEEP_MEANINGS.get(prefix + k, "")))
    return rows


def sweep_page() -> str:
    from arch_zoo.sweeps.fields import BUDGETS

    lines = ["# Sweep spec keys", "",
             "Every key a sweep spec may hold, as the spec parser (`arch_zoo/sweeps/`) checks them; any other "
             "key is an error with a did-you-mean. The wandb sweep format (`method: grid|random`, "
             "`parameters:`) is accepted too.", "",
             "| key | meaning |", "| --- | --- |"]
    missing = [k for k, m in sweep_rows() if not m]
    if missing:
        raise ValueError(f"sweep spec keys without a meaning in docs/hooks/reference.py: {', '.join(missing)}")
    lines += [f"| `{k}` | {prose(m)} |" for k, m in sweep_rows()]
    lines += ["", "## Budgets", "", "| `budget.match` | how the plan gets there |", "| --- | --- |"]
    lines += [f"| `{k}` | {prose(v)} |" for k, v in BUDGETS.items()]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- presets

def preset_files():
    from arch_zoo.config.loading import preset_dir, preset_names

    return [(name, preset_dir() / f"{name}.yaml") for name in preset_names()]


def presets_page() -> str:
    lines = ["# Presets", "",
             "Every preset shipped in the package (`configs/models/`, also inside the installed package), "
             "with the comment that opens its file. Use one as `preset:NAME`, alone or as a base: "
             "`model: {base: preset:llama-tiny, n_layers: 2}`. `arch-zoo describe preset:NAME` prints its "
             "layers, parameter counts and FLOPs; a preset of a published model names its vocabulary size, which "
             "`describe` counts with where no task gives one (a run's vocabulary is always its task's tokenizer's).",
             ""]
    for name, path in preset_files():
        head = []
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                break
            head.append(line.lstrip("#").strip())
        lines += [f"## `{name}`", "", prose(" ".join(head)) or "—", ""]
    return "\n".join(lines)


def pages() -> Dict[str, str]:
    """docs-relative path -> Markdown of every generated page."""
    return {"reference/config.md": config_page(), "reference/components.md": components_page(),
            "reference/cli.md": cli_page(), "reference/sweep-spec.md": sweep_page(),
            "reference/presets.md": presets_page()}
