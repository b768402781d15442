"""Headless Chromium on a local page: its DOM after rendering, and a screenshot, as a reader's browser
shows them (Debian's `chromium`, `apt-get install -y chromium`). dump_dom and screenshot start a
fresh browser per call, with no background networking (the machines have no network to reach), on an
empty profile, or on ``profile`` (a folder) where given: what one page stored (its localStorage) the
next page of the same profile reads, as a reader's browser goes from page to page. Browser keeps one
browser open across many pages, driven over the DevTools protocol: a reader's browser going from link
to link, in a fraction of the time (a start costs about a second, and a single-page app such as the
MLflow UI boots again at each start; a link within it is then followed in the loaded app).
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")
NAMES = ("chromium", "chromium-browser", "google-chrome")


class BrowserError(RuntimeError):
    pass


def chromium() -> str | None:
    """The Chromium executable on PATH, or None."""
    return next((path for name in NAMES if (path := shutil.which(name))), None)


def _address(page: Path | str) -> str:
    """A local file's file:// URI; a URL (http, https, file, about) as it is."""
    if isinstance(page, str) and page.startswith(("http://", "https://", "file://", "about:")):
        return page
    return Path(page).resolve().as_uri()


def _run(page: Path | str, *args: str, timeout: float, settle_ms: int = 0,
         profile: Path | None = None) -> subprocess.CompletedProcess:
    exe = chromium()
    if exe is None:
        raise BrowserError("chromium is not installed (apt-get install -y chromium)")
    # a page that renders from scripts (the MLflow UI) needs time after `load` before its DOM is
    # read: --virtual-time-budget lets its timers and fetches run that long first
    budget = (f"--virtual-time-budget={settle_ms}",) if settle_ms else ()
    with tempfile.TemporaryDirectory(prefix="repro-chromium-") as empty:
        proc = subprocess.run([exe, *FLAGS, f"--user-data-dir={profile or empty}", *budget, *args, _address(page)],
                              capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise BrowserError(f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def dump_dom(page: Path | str, timeout: float = 120, settle_ms: int = 0, width: int = 1400,
             height: int = 1800, profile: Path | None = None) -> str:
    """The DOM of ``page`` (a file, or an http URL) as Chromium serialises it after loading, and after
    ``settle_ms`` of virtual time for pages that render from scripts."""
    return _run(page, "--dump-dom", f"--window-size={width},{height}", timeout=timeout, settle_ms=settle_ms,
                profile=profile).stdout


def screenshot(page: Path | str, out: Path, width: int = 1400, height: int = 1800, timeout: float = 120,
               settle_ms: int = 0, profile: Path | None = None) -> Path:
    """A PNG of the top ``width`` x ``height`` pixels of the page (see dump_dom for ``settle_ms``)."""
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    _run(page, f"--screenshot={out}", f"--window-size={width},{height}", timeout=timeout, settle_ms=settle_ms,
         profile=profile)
    if not out.is_file():
        raise BrowserError(f"chromium wrote no screenshot to {out}")
    return out



class Browser:
    """One headless Chromium (the flags of dump_dom, on ``profile`` or an empty one) whose page is
    driven over the DevTools protocol through a pipe (``--remote-debugging-pipe``: fds 3 and 4, one
    JSON message per NUL-terminated line), so that many pages cost one browser start::

        with Browser(profile=folder) as b:
            b.open(url, settle_ms=15000)
            html = b.dom()
            b.screenshot(out)

    ``open`` loads a page as dump_dom does: until its ``load`` event, then ``settle_ms`` of virtual
    time for pages that render from scripts (the policy of ``--virtual-time-budget``: time advances
    while no fetch is pending). A link within the page already open (only the part after ``#``
    differs: a single-page app's route) is followed in the loaded page, as a reader's click is,
    not loaded again. Every wait is bounded by ``timeout`` seconds; BrowserError says what failed."""

    def __init__(self, profile: Path | None = None, width: int = 1400, height: int = 1800, timeout: float = 120):
        exe = chromium()
        if exe is None:
            raise BrowserError("chromium is not installed (apt-get install -y chromium)")
        self.timeout = timeout
        self._tmp = None if profile else tempfile.TemporaryDirectory(prefix="repro-chromium-")
        to_browser, self._out = os.pipe()
        self._in, from_browser = os.pipe()
        devnull = os.open(os.devnull, os.O_RDWR)
        actions = [(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1),
                   (os.POSIX_SPAWN_DUP2, devnull, 2), (os.POSIX_SPAWN_DUP2, to_browser, 3),
                   (os.POSIX_SPAWN_DUP2, from_browser, 4)]
        args = [exe, *FLAGS, f"--user-data-dir={profile or self._tmp.name}", "--remote-debugging-pipe",
                f"--window-size={width},{height}", "about:blank"]
        self.pid = None
        try:
            self.pid = os.posix_spawn(exe, args, os.environ, file_actions=actions)
        except OSError as exc:
            os.close(self._out), os.close(self._in)
            if self._tmp is not None:
                self._tmp.cleanup()
            raise BrowserError(f"chromium did not start: {exc}") from exc
        finally:
            for fd in (to_browser, from_browser, devnull):
                os.close(fd)
        self._buf, self._id, self._events = b"", 0, []
        self._size, self._target, self._session = (width, height), None, None
        try:
            self._call("Target.getTargets")  # answers once the browser is up
        except BrowserError:
            self.close()
            raise

    def _new_tab(self) -> None:
        """A fresh tab (the last one closed) of the same browser and profile: its page runs in real
        time until a settle budget pauses it (the page's virtual time cannot be given back to real
        time, and `advance` would run its timers ahead as fast as it can)."""
        if self._target is not None:
            self._call("Target.closeTarget", targetId=self._target)
        self._target = self._call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._call("Target.attachToTarget", targetId=self._target, flatten=True)["sessionId"]
        self._call("Page.enable", page=True)
        self._call("Emulation.setDeviceMetricsOverride", page=True, width=self._size[0], height=self._size[1],
                   deviceScaleFactor=1, mobile=False)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise BrowserError(f"chromium gave no answer within {self.timeout:g} s")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise BrowserError("chromium exited")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\0")
        return json.loads(line)

    def _call(self, method: str, page: bool = False, **params) -> dict:
        """One DevTools command (to the page's session where ``page``), its result; the events that
        arrive meanwhile are kept for _wait."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if page:
            message["sessionId"] = self._session
        try:
            os.write(self._out, json.dumps(message).encode() + b"\0")
        except OSError as exc:
            raise BrowserError(f"chromium exited ({exc})") from exc
        deadline = time.monotonic() + self.timeout
        while (reply := self._message(deadline)).get("id") != self._id:
            self._events.append(reply)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
        return reply.get("result", {})

    def _wait(self, event: str, when=lambda params: True) -> dict:
        """The params of the first ``event`` (for which ``when(params)`` holds) among those kept since
        the last open and those that come, dropping it and those before it."""
        deadline = time.monotonic() + self.timeout
        seen = 0
        while True:
            for i, message in enumerate(self._events[seen:], start=seen):
                if message.get("method") == event and when(params := message.get("params", {})):
                    del self._events[: i + 1]
                    return params
            seen = len(self._events)
            self._events.append(self._message(deadline))

    def open(self, page: Path | str, settle_ms: int = 0) -> None:
        url = _address(page)
        here = ""
        if self._session is not None:  # where the open page is now (its scripts may have moved it)
            reply = self._call("Runtime.evaluate", page=True, expression="location.href", returnByValue=True)
            here = reply.get("result", {}).get("value") or ""
        within = "#" in url and here.split("#")[0] == url.split("#")[0]
        if not within:
            self._new_tab()
        self._events.clear()
        result = self._call("Page.navigate", page=True, url=url)
        if result.get("errorText"):
            raise BrowserError(f"{url}: {result['errorText']}")
        if within:
            self._wait("Page.navigatedWithinDocument")
        else:  # the page's load event (or, where its script moves it on at once, the next page's), not
            # a late one of the new tab's about:blank
            self._wait("Page.frameNavigated", lambda p: "parentId" not in p["frame"] and p["frame"]["url"] != "about:blank")
            self._wait("Page.loadEventFired")
        if settle_ms:
            self._call("Emulation.setVirtualTimePolicy", page=True, policy="pauseIfNetworkFetchesPending",
                       budget=settle_ms)
            self._wait("Emulation.virtualTimeBudgetExpired")

    def dom(self) -> str:
        """The open page's DOM, serialised as dump_dom gives it."""
        if self._session is None:
            raise BrowserError("no page is open")
        reply = self._call("Runtime.evaluate", page=True, returnByValue=True,
                           expression="document.documentElement ? document.documentElement.outerHTML : ''")
        if "exceptionDetails" in reply:
            raise BrowserError(f"the DOM could not be read: {reply['exceptionDetails'].get('text', '')}")
        return reply["result"]["value"]

    def screenshot(self, out: Path) -> Path:
        """A PNG of the open page's viewport (the top width x height pixels, as screenshot gives)."""
        if self._session is None:
            raise BrowserError("no page is open")
        out = Path(out).resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        data = self._call("Page.captureScreenshot", page=True, format="png")["data"]
        out.write_bytes(base64.b64decode(data))
        return out

    def close(self) -> None:
        """Close the browser (asked, then killed after 10 s) and its fresh profile."""
        if self.pid is None:
            return
        try:
            self.timeout = min(self.timeout, 10)
            self._call("Browser.close")
        except BrowserError:
            pass
        for fd in (self._out, self._in):
            os.close(fd)
        deadline = time.monotonic() + 10
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
                break
            time.sleep(0.05)
        self.pid = None
        if self._tmp is not None:
            self._tmp.cleanup()
