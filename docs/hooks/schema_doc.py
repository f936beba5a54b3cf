"""What the reference pages say about a dataclass field: its type, its default and its meaning,
all read from the code. A field's meaning is its ``metadata["help"]`` when it has one, else the
comment on its line (or the comment lines just above it) in the class's source, for the class and
every dataclass it inherits from."""
from __future__ import annotations

import dataclasses
import inspect
import io
import re
import tokenize
import typing
from typing import Any, Dict, Literal, Union

_FIELD = re.compile(r"^\s*([A-Za-z_]\w*)\s*:")


def _comments(cls: type) -> Dict[str, str]:
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    found: Dict[str, str] = {}
    above: list = []  # own-line comments waiting for the field they precede
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            before = lines[tok.start[0] - 1][:tok.start[1]]
            m = _FIELD.match(before)
            if m and m.group(1) not in found:
                found[m.group(1)] = tok.string.lstrip("#").strip()
            elif not before.strip():
                above.append(tok.string.lstrip("#").strip())
        elif tok.type == tokenize.NAME and tok.start[1] > 0 and above:
            m = _FIELD.match(lines[tok.start[0] - 1])
            if m and m.group(1) == tok.string and tok.string not in found:
                found[tok.string] = " ".join(above)
            above = []
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT):
            above = []
    return found


def field_help(cls: type, name: str) -> str:
    """The meaning of field ``name`` of dataclass ``cls``; "" when the code gives none."""
    for f in dataclasses.fields(cls):
        if f.name == name and f.metadata.get("help"):
            return str(f.metadata["help"])
    for klass in cls.__mro__:
        if dataclasses.is_dataclass(klass) and name in klass.__dict__.get("__annotations__", {}):
            text = _comments(klass).get(name)
            if text:
                return text
    return ""


def resolved_hints(cls: type) -> Dict[str, Any]:
    return typing.get_type_hints(cls)


def type_text(tp: Any) -> str:
    """An annotation as a reader says it: ``int or null``, ``one of a, b``, ``list of str``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return "any"
    if origin is Union:
        parts = [type_text(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (list, tuple):
        return f"list of {type_text(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def default_value(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def yaml_text(value: Any) -> str:
    """A default as it would be written in YAML (a component: its name)."""
    if value is dataclasses.MISSING:
        return "required"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "name") and hasattr(value, "options"):  # a ComponentSpec
        return str(value.name)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_text(v) for v in value) + "]"
    if isinstance(value, str):
        return value if value else '""'
    return repr(value)


def cell(text: str) -> str:
    """Text fit for a Markdown table cell, inside backticks."""
    return text.replace("|", "\\|").replace("\n", " ")


def prose(text: str) -> str:
    """Text fit for a Markdown table cell: ``<name>`` outside backticks stays text, not a tag."""
    parts = cell(text).split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))
