"""Headless Chromium on a local page: its DOM after rendering, and a screenshot, as a reader's browser
shows them (Debian's `chromium`, `apt-get install -y chromium`). Each call starts a fresh browser
with no background networking (the machines have no network to reach), on an empty profile, or on
``profile`` (a folder) where given: what one page stored (its localStorage) the next page of the same
profile reads, as a reader's browser goes from page to page.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
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
    """A local file's file:// URI; an http(s) URL as it is."""
    if isinstance(page, str) and page.startswith(("http://", "https://")):
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

