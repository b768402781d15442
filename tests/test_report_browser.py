"""The claims report as a reader's browser shows it: headless Chromium loads the page built from the
real ledger, the committed references and a run here, and its DOM holds every claim id with both
verdicts and every figure's links; the screenshot is kept as results/tests/report.png."""

from pathlib import Path

import pytest

from repro.report import browser, claims, pages as report

from conftest import REPO
from report_fixture import Elements, write_record

pytestmark = pytest.mark.skipif(browser.chromium() is None, reason="chromium is not installed (apt-get install -y "
                                "chromium): the claims report's browser test needs it")
SCREENSHOT = REPO / "results" / "tests" / "report.png"


def test_chromium_shows_every_claim_both_verdicts_and_every_figure_link(tmp_path):
    ref = REPO / "results" / "reference"
    if not (ref / "nvidia-h200").is_dir():
        pytest.skip("no committed reference runs")
    results = tmp_path / "results"
    write_record(results, "comet/comet_bench", {"compress_gbps": 0.04, "decompress_gbps": 0.06, "max_err_over_eb": 0.99},
                 scale="smoke", gpu=None)
    df = claims.build(REPO / "config" / "claims", results, ref)
    figures = report.default_figures(results, ref)
    page = report.write(df, tmp_path / "out", figures, results=results, reference_root=ref)
    dom = Elements(browser.dump_dom(page))

    rows = dom.find("tr", class_="claim")
    assert [a["data-claim"] for _, a, _ in rows] == [c["id"] for c in claims.load_ledger(REPO / "config" / "claims")]
    for side, verdicts in (("reference", claims.REFERENCE_VERDICTS), ("here", claims.HERE_VERDICTS)):
        shown = [a["data-verdict"] for _, a, _ in dom.find("span", data_side=side) if "data-verdict" in a]
        assert len(shown) == len(rows) and set(shown) <= set(verdicts), side
        assert [a[f"data-{side}"] for _, a, _ in rows] == shown
        card = dom.find("div", id=f"verdicts-{side}")
        assert card and any("claims hold" in t for _, _, t in dom.elements[dom.elements.index(card[0]):][:4])
    assert dom.find("tr", data_claim="comet.compressor")[0][1]["data-here"] == "smoke"

    hrefs = {a["href"] for _, a, _ in dom.find("a") if "href" in a}
    assert figures
    for fig in figures:
        links = {h for h in hrefs if Path(h).name in (fig.name, fig.with_suffix(".pdf").name)
                 and Path(h).parent.name == fig.parent.name}
        expected = {fig.name} | ({fig.with_suffix(".pdf").name} if fig.with_suffix(".pdf").is_file() else set())
        assert {Path(h).name for h in links} == expected, fig
        assert all((page.parent / h).resolve().is_file() for h in links)
    assert dom.find("img", id="chart")

    shot = browser.screenshot(page, SCREENSHOT)
    from PIL import Image

    image = Image.open(shot)
    assert image.size == (1400, 1800)
    assert len(image.convert("L").getcolors(1 << 16) or []) > 50  # drawn, not a blank page
