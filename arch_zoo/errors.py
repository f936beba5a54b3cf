"""Errors a user can cause. The CLI turns these into one line on stderr and exit code 2."""
from __future__ import annotations

import difflib
from typing import Iterable


class ConfigError(ValueError):
    """A configuration value is wrong. ``key`` is the dotted path of the offending key."""

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' when a close match exists, else ''."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def choice_error(key: str, kind: str, value: object, choices: Iterable[str]) -> ConfigError:
    choices = sorted(choices)
    return ConfigError(
        key, f"unknown {kind} '{value}'{did_you_mean(str(value), choices)}; choices: {', '.join(choices)}"
    )


def yaml_error(path: object, exc: BaseException) -> str:
    """'cannot parse PATH (line L, column C): PROBLEM' from a PyYAML error, on one line."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"cannot parse {path}{where}: {problem}"
