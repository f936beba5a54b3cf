"""Issue 57: a function reads as its steps. None in the package runs past MAX_LINES (decorators aside,
docstring included)."""
import ast
from pathlib import Path
from typing import List

import arch_zoo

PACKAGE = Path(arch_zoo.__file__).parent
MAX_LINES = 60
# Folders of the package held to MAX_LINES; (".",) is the whole package.
CHECKED = (".",)


def long_functions(source: str, where: str = "<source>") -> List[str]:
    """'where:line name (n lines)' for each function or method of ``source`` longer than MAX_LINES."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES:
                out.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_the_count_runs_from_def_to_the_last_line():
    def source(body_lines: int) -> str:
        return "@decorator\ndef f(x):\n" + "    x += 1\n" * (body_lines - 1) + "    return x\n"

    assert long_functions(source(MAX_LINES - 1)) == []  # def line + MAX_LINES - 1 body lines: exactly MAX_LINES
    assert long_functions(source(MAX_LINES)) == [f"<source>:2 f ({MAX_LINES + 1} lines)"]
    nested = "class A:\n    def m(self):\n" + "        pass\n" * MAX_LINES
    assert long_functions(nested) == [f"<source>:2 m ({MAX_LINES + 1} lines)"]


def test_no_function_over_60_lines():
    files = sorted({p for folder in CHECKED for p in (PACKAGE / folder).rglob("*.py")})
    assert len(files) > 100  # the package is there and holds its modules
    found = [f for p in files for f in long_functions(p.read_text(), str(p.relative_to(PACKAGE)))]
    assert found == [], "split these into steps named for what they do:\n" + "\n".join(found)
