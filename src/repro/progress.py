"""Progress for long steps: a live bar on a terminal, a log line every few percent otherwise
(so Snakemake logs and CI output stay readable)."""

from __future__ import annotations

import logging
import sys
import time


def progress(iterable, total: int | None = None, desc: str = "", log: logging.Logger | None = None):
    log = log or logging.getLogger("repro")
    if total is None:
        try:
            total = len(iterable)
        except TypeError:
            total = None
    interactive = sys.stderr.isatty()
    start = time.monotonic()
    last_logged = -1
    for i, item in enumerate(iterable, 1):
        yield item
        elapsed = time.monotonic() - start
        if total:
            frac = i / total
            eta = elapsed / frac - elapsed
            if interactive:
                bar = "#" * int(30 * frac)
                sys.stderr.write(f"\r{desc} [{bar:<30}] {i}/{total} {elapsed:6.1f}s eta {eta:6.1f}s")
                sys.stderr.flush()
            elif int(frac * 10) > last_logged:
                last_logged = int(frac * 10)
                log.info("%s %d/%d (%.0f%%) %.1fs elapsed, eta %.1fs", desc, i, total, 100 * frac, elapsed, eta)
        elif not interactive and i % 100 == 0:
            log.info("%s %d done, %.1fs elapsed", desc, i, elapsed)
    if interactive and total:
        sys.stderr.write("\n")
