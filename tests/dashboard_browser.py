"""Driving the dashboard in a real headless Chromium: the browser found on the machine, a DOM
parser for what it renders, one-shot runs (``--dump-dom``, ``--screenshot``) and a live page
driven over the DevTools protocol (evaluate scripts, watch its requests, take screenshots).

The browser tests need Debian's ``chromium`` (``scripts/test`` installs it). Without it they
are skipped, except in CI (``CI=true``), where a missing browser fails them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import aiohttp
import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
# one-shot runs: virtual time runs the page's timers fast; it stands still while a fetch is in
# flight
ONE_SHOT_FLAGS = ["--virtual-time-budget=5000"]


def find_chromium() -> str:
    """The Chromium binary, or skip (fail in CI) when there is none."""
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None
    )
    if found is None:
        message = "chromium is not installed (scripts/test installs it: apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def run_chromium(chromium: str, tmp_path: Path, url: str, *args: str) -> str:
    """Chromium's stdout after loading ``url`` with ``args``, in a fresh profile."""
    profile = tmp_path / f"chromium-{uuid.uuid4().hex[:8]}"
    command = [chromium, *CHROMIUM_FLAGS, *ONE_SHOT_FLAGS, f"--user-data-dir={profile}", *args]
    done = subprocess.run([*command, url], capture_output=True, timeout=90, check=False)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"chromium exited with {done.returncode}: {stderr[-2000:]}"
    return done.stdout.decode()


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""
    children: list[Element] = field(default_factory=list)

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def walk(self) -> Iterator[Element]:
        yield self
        for child in self.children:
            yield from child.walk()

    def find_all(
        self, tag: str | None = None, cls: str | None = None, **attrs: str
    ) -> list[Element]:
        """Descendants (and self) with ``tag``, class ``cls`` and attributes (``data_x`` names
        ``data-x``)."""
        wanted = {name.replace("_", "-"): value for name, value in attrs.items()}
        return [
            e
            for e in self.walk()
            if (tag is None or e.tag == tag)
            and (cls is None or cls in e.classes())
            and all(e.attrs.get(k) == v for k, v in wanted.items())
        ]

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Element:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag or '*'} class={cls} {attrs}> in the page"
        return found[0]


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class _DomParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        for open_element in self.stack:
            open_element.text += data


def parse_dom(html: str) -> Element:
    parser = _DomParser()
    parser.feed(html)
    parser.close()
    return parser.root


class LivePage:
    """One Chromium tab driven over the DevTools protocol, in real time (no virtual time).

    Every method blocks; the protocol runs on an event loop of the page's own."""

    def __init__(self, chromium: str, profile: Path) -> None:
        self._loop = asyncio.new_event_loop()
        self._process = subprocess.Popen(
            [
                chromium,
                *CHROMIUM_FLAGS,
                "--remote-debugging-port=0",
                "--window-size=1280,900",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._next_id = 0
        self._replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.requests: list[dict[str, Any]] = []
        """Every request the page sent since :meth:`watch_requests` (DevTools' request)."""
        try:
            port = self._debugging_port(profile / "DevToolsActivePort")
            self._loop.run_until_complete(self._connect(port))
        except BaseException:
            self.close()
            raise

    def _debugging_port(self, path: Path) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if path.exists():
                lines = path.read_text().splitlines()
                if lines and lines[0].strip():
                    return int(lines[0])
            assert self._process.poll() is None, "chromium exited"
            time.sleep(0.05)
        raise AssertionError("chromium opened no DevTools port")

    async def _connect(self, port: int) -> None:
        self._session = aiohttp.ClientSession()
        async with self._session.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json()
        page = next(t for t in targets if t["type"] == "page")
        self._ws = await self._session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = asyncio.ensure_future(self._read())
        await self._call("Page.enable")
        await self._call("Runtime.enable")

    async def _read(self) -> None:
        async for message in self._ws:
            data = json.loads(message.data)
            if "id" in data:
                future = self._replies.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
            elif data.get("method") == "Network.requestWillBeSent":
                self.requests.append(data["params"]["request"])

    async def _call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        future = self._loop.create_future()
        self._replies[self._next_id] = future
        request = {"id": self._next_id, "method": method, "params": params}
        await self._ws.send_str(json.dumps(request))
        reply = await asyncio.wait_for(future, 30)
        assert "error" not in reply, f"{method}: {reply['error']}"
        result: dict[str, Any] = reply.get("result", {})
        return result

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result."""
        return self._loop.run_until_complete(self._call(method, **params))

    def goto(self, url: str) -> None:
        """Load ``url`` in the tab afresh (a new document, even if only the fragment differs)."""
        self.call("Page.navigate", url="about:blank")
        self.wait_for("location.href === 'about:blank'", "about:blank")
        self.call("Page.navigate", url=url)
        self.wait_for(
            f"location.href === {json.dumps(url)} && document.readyState === 'complete'",
            f"{url} loaded",
        )

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout: float = 30) -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self._loop.run_until_complete(asyncio.sleep(0.1))

    def refreshes(self) -> int:
        """How many times the page has drawn fresh data."""
        value = self.evaluate("document.getElementById('main')?.dataset.refreshes || '0'")
        return int(value)

    def wait_refreshes(self, count: int, timeout: float = 60) -> None:
        """Wait until the page has drawn fresh data ``count`` times."""
        self.wait_for(
            f"Number(document.getElementById('main')?.dataset.refreshes || 0) >= {count}",
            f"{count} refreshes",
            timeout,
        )

    def watch_requests(self) -> None:
        """Start recording the page's requests in :attr:`requests` (from now on)."""
        self.call("Network.enable")
        self.requests.clear()

    def dom(self) -> Element:
        """The page's DOM as it is now."""
        return parse_dom(self.evaluate("document.documentElement.outerHTML"))

    def screenshot(self, path: Path) -> None:
        """Save a PNG of the viewport."""
        shot = self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        """Close the tab's browser."""
        try:
            if hasattr(self, "_ws"):
                self._loop.run_until_complete(self._ws.close())
                self._reader.cancel()
                self._loop.run_until_complete(asyncio.gather(self._reader, return_exceptions=True))
            if hasattr(self, "_session"):
                self._loop.run_until_complete(self._session.close())
        finally:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._loop.close()
