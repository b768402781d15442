"""The claims report's files, from the claims table (repro.report.claims.build): claims.csv, claims_chart.png,
report.md (terminals and pull requests) and report.html (the front page: self-contained for its text,
picture and thumbnails).

Both reports carry the same sections: the two verdicts' counts (the reference machine's and this
machine's), a summary per paper and the picture of every claim (repro.report.chart), the claims
with both verdicts, the values linked to their records and a short note (the rest behind a
disclosure), the figures (thumbnails linking to the full PNG and PDF), and what an artifact
committee checks (repro.report.artifact): the badges' evidence, the commands, the tests, and each
experiment's time, disk and provenance.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd

from repro import layout
from repro.report import artifact, browser, chart as claims_chart, html_page as report_html, markdown_page as report_markdown
from repro.atomic import atomic_write
from repro.report.claims import CSV_COLUMNS, load_mlflow_runs
from repro.faults import kill_point
from repro.records import atomic_write_text
from repro.report.content import Context


def default_figures(results: Path, reference_root: Path) -> list[Path]:
    """The figures drawn here (results/figures/<paper>/*.png), and the reference machines' for the
    experiments that have none here."""
    here = sorted(Path(results).glob("figures/*/*.png"))
    seen = {(p.parent.name, p.stem) for p in here}
    refs = []
    for p in sorted(Path(reference_root).glob("*/figures/*/*.png")):
        if (p.parent.name, p.stem) not in seen:
            seen.add((p.parent.name, p.stem))
            refs.append(p)
    return here + refs


def write(df: pd.DataFrame, out: Path, figures: list[Path], results: Path, reference_root: Path,
          junit: Path | None = None, config_root: Path | None = None, screenshot: Path | None = None) -> Path:
    """Write claims.csv, claims_chart.png, report.md and report.html to ``out``; returns the page's path.
    ``config_root`` holds the experiment files (the repository's config by default). ``screenshot``:
    also a PNG of the page as headless Chromium shows it there; both pages say where it is, or why
    there is none (and an earlier one is removed, so that no stale picture stays beside the page)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "claims.csv", df[CSV_COLUMNS].to_csv(index=False))
    kill_point("report.csv_written")
    here_runs = artifact.experiment_runs(results, config_root)
    ref_runs = artifact.reference_runs(reference_root, config_root)
    tests = artifact.junit(junit) if junit else None
    uri, runs = load_mlflow_runs(results)
    ctx = Context(df=df, out=out, figures=[Path(f) for f in figures], here_runs=here_runs, reference_runs=ref_runs,
                  tests=tests, badges=artifact.badges(df, here_runs, ref_runs, tests, reference_root),
                  mlflow_uri=uri, mlflow_runs=runs, results=Path(results),
                  experiments=layout.experiment_names(config_root))
    chart = claims_chart.png(df)
    atomic_write(out / "claims_chart.png", lambda fh: fh.write(chart))
    page = out / "report.html"

    def pages(screenshot_line: str) -> None:
        ctx.screenshot = screenshot_line
        atomic_write_text(out / "report.md", report_markdown.to_markdown(ctx))
        atomic_write_text(page, report_html.to_html(ctx, chart))

    if screenshot is None:
        pages("")
        return page
    shot = Path(screenshot)
    shot.unlink(missing_ok=True)
    name = ctx.rel(shot)
    if browser.chromium() is None:
        pages(f"No screenshot ({name}): chromium is not installed (apt-get install -y chromium).")
        return page
    pages(f"Screenshot: {name}, this page as headless Chromium shows it.")
    try:
        browser.screenshot(page, shot)
    except (browser.BrowserError, subprocess.TimeoutExpired) as exc:
        pages(f"No screenshot ({name}): {exc}".rstrip(".") + ".")
    return page
