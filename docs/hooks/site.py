"""The MkDocs hook (mkdocs.yml: ``hooks:``): adds the generated reference pages, and the committed
study reports (HTML and plots, from ``reports/``) that the Studies pages link to and show."""
from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (str(HERE), str(ROOT)):  # this folder's modules, then this checkout's arch_zoo
    if path not in sys.path:
        sys.path.insert(0, path)

import reference  # noqa: E402

REPORT_ASSETS = ("report.html", "plots/*.png", "gradnorms/*.png")


def report_assets():
    """(site path, file) for every committed report file the site serves."""
    for pattern in REPORT_ASSETS:
        for path in sorted((ROOT / "reports").glob(f"*/{pattern}")):
            yield path.relative_to(ROOT).as_posix(), path


def on_files(files, config):
    for uri, text in reference.pages().items():
        files.append(File.generated(config, uri, content=text))
    for uri, path in report_assets():
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
