"""The HTML report opens in headless Chromium with no console errors, and a screenshot is saved.

Console messages are read from Chromium's own log (``--enable-logging=stderr``), where each one is
a line with ``:CONSOLE``. A canary page that does log an error proves the check can see one.
Debian's ``chromium`` package provides the browser. Without it the test is skipped and says so,
except under ``CI=true`` (``.ci/run`` sets it and installs Chromium): this is the only check that the
HTML report renders, so in CI a missing browser is a failure, not a silent skip.
"""
import os
import re
import shutil
import subprocess

import pytest

from arch_zoo.reports import write_report
from tests.reports.sweeps import write_sweep

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0", "--window-size=1400,1800"]
CONSOLE = re.compile(r":CONSOLE[^\]]*\]\s*(.*)|Uncaught.*")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    if in_ci():
        pytest.fail("CI=true but Chromium was not found (Debian: apt-get install chromium): "
                    "the HTML report's browser check cannot run")
    pytest.skip("Chromium not found (Debian: apt-get install chromium); the HTML browser check is skipped")


def open_page(browser, page, shot, profile):
    proc = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    log = proc.stdout + proc.stderr
    return proc.returncode, [m.group(0) for m in CONSOLE.finditer(log)], log


def test_html_report_opens_in_chromium_without_console_errors(tmp_path):
    browser = _browser()
    # hostile names: an unescaped one would run script or fetch, and so log to the console
    root = write_sweep(tmp_path / "pos", labels={"rope": "<script>console.error('xss')</script>",
                                                 "alibi": "<img src=x onerror=console.error('xss')>"},
                       status={("rope", 2): ("failed", "</td></table><script>console.error(1)</script>")})
    page = write_report(root, tmp_path / "report", formats="html")["out_dir"] / "report.html"

    canary = tmp_path / "canary.html"
    canary.write_text("<!DOCTYPE html><html><body><script>console.error('canary'); missing();</script></body></html>")
    rc, messages, log = open_page(browser, canary, tmp_path / "canary.png", tmp_path / "profile-canary")
    assert any("canary" in m for m in messages) and any("Uncaught" in m for m in messages), \
        f"the console check cannot see errors in this Chromium; its log:\n{log[-3000:]}"

    shot = tmp_path / "report.png"
    rc, messages, log = open_page(browser, page, shot, tmp_path / "profile")
    assert rc == 0, log[-3000:]
    assert messages == [], "\n".join(messages)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000  # a rendered page
    print(f"screenshot: {shot}")


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_missing_browser_fails_under_ci_and_skips_elsewhere(ci, outcome, tmp_path, monkeypatch):
    """Under CI=true a missing Chromium is a failure, not a silent skip (issue 13)."""
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no browser on the PATH
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="Chromium"):
        _browser()
