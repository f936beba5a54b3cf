"""Wrote sweeps/studies/documents_corpus.jsonl, the corpus of sweeps/studies/documents.yaml: the Python
standard library's docstrings of 16 to 256 characters, one JSON Lines record each, deduplicated, in a
seeded shuffle.

Short documents (6,227 of them, 567,744 characters; median 66 characters, mean 91, so a 64-token window
holds about 0.7 document starts and about half the documents fit in one) whose neighbours are unrelated
once shuffled: the setting where documents running into each other is at its most visible. The file
is shipped so that every machine trains on the same text (the default corpus is this machine's
standard library, which differs between Python versions); it was written from Python 3.11.7's, and
rerunning this on another version writes another corpus:

    python sweeps/studies/documents_corpus.py sweeps/studies/documents_corpus.jsonl
"""
import ast
import json
import random
import sys
from pathlib import Path

from arch_zoo.data.sources import sorted_py_files, stdlib_root

SHORTEST, LONGEST, SEED = 16, 256, 0
HOLDERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstrings():
    seen = set()
    for path in sorted_py_files(Path(stdlib_root())):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # (a few stdlib files are deliberately broken or in another encoding)
        for node in ast.walk(tree):
            text = ast.get_docstring(node) if isinstance(node, HOLDERS) else None
            if text and SHORTEST <= len(text) <= LONGEST and text not in seen:
                seen.add(text)
                yield text


def main(out: str) -> None:
    docs = list(docstrings())
    random.Random(SEED).shuffle(docs)  # the stdlib's order puts a module's docstrings side by side
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(out + ".tmp")
    tmp.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    tmp.replace(out)  # nothing half-written for the sweep to read
    print(f"{out}: {len(docs):,} documents, {sum(map(len, docs)):,} characters")


if __name__ == "__main__":
    main(sys.argv[1])
