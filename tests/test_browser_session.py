"""browser.Browser, the one headless Chromium that a test drives from page to page (the MLflow UI's
browser test): a page is read after its load event, and after the settle time of virtual time where
asked (its timers run, in much less real time); a link within the open page (after ``#``) is followed
in the loaded page, not loaded again; what a page stores is there for the next; a screenshot is the
viewport's PNG; a page that cannot load is an error that names it."""

import struct
import time

import pytest

from repro.report import browser

pytestmark = pytest.mark.skipif(browser.chromium() is None,
                                reason="chromium is not installed (apt-get install -y chromium)")

PAGE = """<!doctype html><html><body><p id="boot"></p><p id="route"></p><p id="late"></p><script>
document.getElementById("boot").textContent = "boot " + Math.random();
const route = () => { document.getElementById("route").textContent = "route " + (location.hash || "none"); };
window.addEventListener("hashchange", route); route();
setTimeout(() => { document.getElementById("late").textContent = "after 10 s"; }, 10000);
localStorage.setItem("visits", String(Number(localStorage.getItem("visits") || 0) + 1));
document.body.dataset.visits = localStorage.getItem("visits");
</script></body></html>"""


def _text(dom: str, ident: str) -> str:
    return dom.split(f'id="{ident}">', 1)[1].split("<", 1)[0]


def test_settle_time_links_within_the_page_storage_and_screenshots(tmp_path):
    page = tmp_path / "page.html"
    page.write_text(PAGE)
    with browser.Browser(profile=tmp_path / "profile", width=640, height=480) as b:
        b.open(page)
        first = b.dom()
        assert _text(first, "route") == "route none" and _text(first, "late") == ""  # its load, not its timer
        started = time.monotonic()
        b.open(page.as_uri() + "#/runs", settle_ms=20000)
        within = b.dom()
        assert time.monotonic() - started < 10  # 20 s of the page's time, in far less of ours
        assert _text(within, "route") == "route #/runs" and _text(within, "late") == "after 10 s"
        assert _text(within, "boot") == _text(first, "boot")  # the same document: followed, not reloaded
        b.open(page)  # another document (no `#`): loaded again, with what the last one stored
        again = b.dom()
        assert _text(again, "boot") != _text(first, "boot") and 'data-visits="2"' in again
        png = b.screenshot(tmp_path / "shot.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (640, 480)
        with pytest.raises(browser.BrowserError, match="ERR_"):
            b.open("http://127.0.0.1:9/")  # nothing listens there


def test_a_closed_browser_is_gone(tmp_path):
    b = browser.Browser()
    pid = b.pid
    b.close()
    import os

    with pytest.raises(ChildProcessError):
        os.waitpid(pid, 0)  # reaped: no process left behind
    b.close()  # twice is harmless
