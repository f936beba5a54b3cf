"""Headless Chromium driven over the DevTools protocol (``--remote-debugging-pipe``: JSON messages
on fds 3 and 4, no port, no extra library), for pages that are apps: it waits for a condition in
the page, and tells console *errors* (console.error, uncaught exceptions, failed loads, CSP
violations) from the warnings third-party UIs print. Chromium's ``--enable-logging`` log, which
tests/reports/test_browser.py reads, logs every console level alike."""
from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Dict, Optional

from tests.reports.test_browser import _browser

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--hide-scrollbars", "--remote-debugging-pipe"]


class Page:
    """One Chromium and one tab; ``errors`` collects what the page reports as an error."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 1800):
        commands_r, self._commands = os.pipe()
        self._replies, replies_w = os.pipe()

        def wire():  # the child's fd 3 reads our commands, its fd 4 carries its replies
            os.dup2(commands_r, 100)  # via fds out of the way: either pipe end may itself be 3 or 4
            os.dup2(replies_w, 101)
            os.dup2(100, 3)
            os.dup2(101, 4)

        self.proc = subprocess.Popen([_browser(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     preexec_fn=wire, close_fds=False, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(commands_r)
        os.close(replies_w)
        self._id, self._buffer, self.errors = 0, b"", []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.send(f"{domain}.enable", session=True)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                          "mobile": False}, session=True)

    def _read(self, timeout: float) -> Optional[Dict]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._replies], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        data = json.loads(message)
        self._note(data)
        return data

    def _note(self, data: Dict) -> None:
        method, params = data.get("method"), data.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console.error: " + " ".join(str(a.get("value", a.get("description", "")))
                                                             for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append("uncaught: " + str(details.get("exception", {}).get("description") or details.get("text")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())

    def send(self, method: str, params: Optional[Dict] = None, session: bool = False, timeout: float = 60) -> Dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            data = self._read(max(0.0, deadline - time.time()))
            if data is not None and data.get("id") == self._id:
                if "error" in data:
                    raise RuntimeError(f"{method}: {data['error']}")
                return data.get("result", {})
        raise TimeoutError(f"{method}: no reply in {timeout} s")

    def evaluate(self, expression: str):
        reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        return reply.get("result", {}).get("value")

    def open(self, url: str, ready: str = "true", timeout: float = 90, settle: float = 1.0) -> None:
        """Navigate, then wait until the JavaScript ``ready`` is true (and ``settle`` s more, for
        late requests and their errors)."""
        self.evaluate("window.__previous_page = true")  # gone once the new document has replaced it
        self.send("Page.navigate", {"url": url}, session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.evaluate(f"!window.__previous_page && document.readyState === 'complete' && !!({ready})"):
                break
            self._read(0.3)
        else:
            raise TimeoutError(f"{url}: not ready ({ready}) after {timeout} s; errors: {self.errors}")
        end = time.time() + settle
        while time.time() < end:
            self._read(max(0.0, end - time.time()))

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._commands, self._replies):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "Page":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def deep_text() -> str:
    """JavaScript: the page's text including open shadow roots (TensorBoard is built of web components)."""
    return ("(function walk(n){var t='';if(n.shadowRoot){t+=walk(n.shadowRoot);}"
            "for(var c=n.firstChild;c;c=c.nextSibling){t+=c.nodeType===3?c.textContent:walk(c);}return t;})"
            "(document.body||document)")
