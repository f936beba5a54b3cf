"""How a sweep writes values: as YAML for overrides and run.json, as readable names and run ids."""
from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Dict, Iterable, List, Mapping

import numpy as np


def yaml_value(v: Any) -> str:
    """A value as YAML flow text that reads back as the same value (through an OmegaConf dotlist too)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return ".nan"
        if math.isinf(v):
            return ".inf" if v > 0 else "-.inf"
        text = repr(v)
        mantissa, e, exponent = text.partition("e")
        if e and "." not in mantissa:  # YAML 1.1 reads 1e-05 as a string; 1.0e-05 is a float
            text = f"{mantissa}.0e{exponent}"
        return text
    if isinstance(v, str):
        return json.dumps(v)  # double-quoted: "=" "," ":" and "yes" stay strings
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(yaml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {yaml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(str(v))


def recorded(v: Any) -> Any:
    """A setting as run.json records it: scalars as they are, a component mapping or a list as its
    display text, so a setting read back from a run compares equal to the one a spec expands to."""
    return v if isinstance(v, (str, int, float, bool, type(None))) else plain(v)


def plain(v: Any) -> str:
    """Short display text: rope, 0.001, true, {name: swiglu}."""
    if isinstance(v, str):
        return v
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k}: {plain(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(plain(x) for x in v) + "]"
    return yaml_value(v)


def all_numbers(values: Iterable[Any]) -> bool:
    """True when every value of a setting is a finite int or float (numpy's too), none a bool: an axis
    to sort and plot along, not a list of names."""
    return all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
               and math.isfinite(v) for v in values)


def settings_label(settings: Dict[str, Any]) -> str:
    """A variant's name from its settings: the keys' last parts (whole keys where two would clash)."""
    short = {k: k.rsplit(".", 1)[-1] for k in settings}
    clash = len(set(short.values())) < len(short)
    return ",".join(f"{k if clash else short[k]}={plain(v)}" for k, v in settings.items())


def label(v: Any) -> str:
    """A value as ``describe`` writes a component: sliding_window(window=4), {name: rope} as rope;
    anything else as ``plain``."""
    if not isinstance(v, Mapping):
        return plain(v)
    options = ", ".join(f"{k}={label(x)}" for k, x in v.items() if k != "name")
    if "name" not in v:
        return options
    return f"{v['name']}({options})" if options else str(v["name"])


def short_names(keys: Iterable[str]) -> Dict[str, str]:
    """model.position -> position, unless two keys end alike; then the shortest unambiguous suffix."""
    keys = list(keys)
    out = {}
    for k in keys:
        parts = k.split(".")
        for n in range(1, len(parts) + 1):
            name = ".".join(parts[-n:])
            if sum(1 for o in keys if o == name or o.endswith("." + name)) == 1:
                out[k] = name
                break
        else:
            out[k] = k
    return out


def variant_name(settings: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """position=rope,norm=rmsnorm; 'base' when nothing varies."""
    return ",".join(f"{names[k]}={plain(v)}" for k, v in settings.items()) or "base"


BUDGET_KEY = "wsds.budget"  # the setting that tells a WSD-S run's budgets apart: a fraction of its max_steps


def budget_variant(variant: Any, fraction: float) -> str:
    """A WSD-S budget's variant (one run's decay branch, or the run itself at 1): the run's variant at
    that fraction of its steps, named as a sweep over it would name it. A fraction, not a step count,
    so a ladder's sizes (each with its own max_steps) share their budgets' variants."""
    shown = f"budget={plain(fraction)}"
    return shown if variant in (None, "base") else f"{variant},{shown}"


def tags(settings: Mapping[str, Any], names: Mapping[str, str]) -> List[str]:
    return [f"{names[k]}={plain(v)}"[:64] for k, v in settings.items()]  # wandb caps tags at 64 characters


def _clean(text: str, limit: int) -> str:
    return re.sub(r"[^A-Za-z0-9._+]+", "", text).strip("._")[:limit] or "x"


def run_id(settings: Mapping[str, Any], names: Mapping[str, str], seed: int) -> str:
    """<slug>-s<seed>-<hash6>: readable, a portable directory name, stable across reruns. The slug
    is axis-value pairs joined by "__": norm-rmsnorm__norm_placement-post-s0-3b9ec6; a component
    with options reads as its label, attention-sliding_window.window4-s0-1f2e3d.

    The slug may shorten values (long floats, option mappings), so the hash, over the full
    settings and seed, keeps ids distinct. Everything a sweep shares between its runs is left
    out of the hash on purpose: if the spec changes it, the same run id meets a different config
    and the store reports a conflict instead of quietly starting over."""
    slug = "__".join(f"{_clean(names[k], 24)}-{_slug_value(v)}" for k, v in settings.items()) or "base"
    return f"{slug[:80]}{id_suffix(settings, seed)}"


def _slug_value(v: Any) -> str:
    """A component mapping as its ``label`` in a directory name's characters: sliding_window.window4."""
    if isinstance(v, Mapping):
        return _clean(re.sub(r"[(,]\s*", ".", label(v)).replace("=", ""), 32)
    return _clean(plain(v), 20)


def id_suffix(settings: Mapping[str, Any], seed: int) -> str:
    """-s<seed>-<hash6>: the part of a run id that identifies the run, whatever its slug looks like
    (an earlier version wrote other slugs; a sweep store finds its runs by this part)."""
    digest = hashlib.sha1(json.dumps({"settings": {k: settings[k] for k in sorted(settings)}, "seed": seed},
                                     sort_keys=True, default=str).encode()).hexdigest()[:6]
    return f"-s{seed}-{digest}"
