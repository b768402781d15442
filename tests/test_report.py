"""The claims report: both verdicts side by side, the per-paper summary and the picture, notes with
their details, thumbnails, links to records and provenance, and the artifact committee's section."""

import math
import re
from pathlib import Path

import pytest

from repro.report import artifact, claims, chart as claims_chart, pages as report, content as report_content

from conftest import REPO
from report_fixture import Elements, make


@pytest.fixture
def built(tmp_path):
    f = make(tmp_path)
    df = claims.build(f["ledger"], f["results"], f["reference"], f["config"])
    return f, df.set_index("claim_id", drop=False)


def test_each_claim_is_judged_on_the_reference_machine_and_here(built):
    f, df = built
    both = df.loc["h.both"]
    assert (both.reference_verdict, both.here_verdict) == ("not-reproduced", "reproduced")
    assert (both.reference_measured, both.here_measured) == ("1.4", "2")
    assert (both.reference_date, both.reference_commit, both.reference_hardware) == ("2026-11-30", "c0ffee1", "NVIDIA H200")
    assert both.verdict == "reproduced" and both.source == "this-run"  # the earlier columns: here at paper scale
    assert both.here_mlflow_run == "abc123"
    assert any("shared their GPU" in d for d in both.reference_details)  # timing claim, 3 neighbours
    assert not any("shared" in d for d in both.here_details)
    assert any(d.startswith("also min = 1.1 (>= 1: holds)") for d in both.reference_details)
    ref = df.loc["h.ref"]
    assert (ref.reference_verdict, ref.here_verdict, ref.verdict) == ("reproduced", "not-run-here", "not-run-here")
    assert "needs 1 CUDA GPU" in ref.here_why and ref.measured == "1.7" and ref.source == "reference"
    smoke = df.loc["h.smoke"]
    assert (smoke.reference_verdict, smoke.here_verdict, smoke.here_measured) == ("no-reference", "smoke", "0.01")
    assert "not judged" in smoke.here_why and smoke.here_scale == "smoke"
    model = df.loc["h.model"]
    assert (model.kind, model.verdict, model.reference_verdict) == ("model", "model", "not-reproduced")
    nan = df.loc["h.nan"]
    assert nan.reference_verdict == "not-reproduced" and nan.reference_measured == ""
    assert any("NaN: no point reaches it" in d for d in nan.reference_details)
    mixed = df.loc["h.mixed"]  # a GPU metric's reference run beside a CPU step run here at paper scale
    assert (mixed.reference_verdict, mixed.here_verdict) == ("reproduced", "not-run-here")
    assert "k/cpu: a CPU step, from this machine's paper-scale run" in mixed.reference_details
    pending = df.loc["h.pending"]
    assert (pending.reference_verdict, pending.here_verdict, pending.verdict) == ("pending",) * 3


def test_the_counts_of_both_sides(built):
    _, df = built
    ref, here = claims.tally(df, "reference"), claims.tally(df, "here")
    assert ref == {"reproduced": 3, "not-reproduced": 2, "inconclusive": 0, "no-reference": 1, "pending": 1,
                   "unavailable": 0, "model reproduced": 0, "model not-reproduced": 1, "model inconclusive": 0, "model no-reference": 0}
    assert (here["reproduced"], here["smoke"], here["not-run-here"], here["pending"]) == (1, 1, 4, 1)
    assert here["model not-run-here"] == 1
    assert report_content.by_reference_machine(df) == [("NVIDIA H200", 3, 6)]  # held of judged, model rows too


def test_each_row_shows_measured_ceiling_and_target_and_the_summary_counts_misses_by_kind(built, tmp_path):
    """The row's three numbers (measured, ceiling, target) on each judged side, the kind of each miss,
    and the summary's count of the reference side's misses by kind, in both pages."""
    f, df = built
    both = df.loc["h.both"]  # reference 1.4 of a 2.0 ceiling against >= 1.5; here 2.0 of 2.5, holds
    assert (both.reference_measured, both.reference_ceiling, both.target) == ("1.4", "2", ">= 1.5")
    assert (both.reference_miss, both.reference_miss_text) == ("implementation", "0.7 of its ceiling")
    assert (both.here_ceiling, both.here_miss) == ("2.5", "")
    assert (df.loc["h.nan", "reference_miss"], df.loc["h.model", "reference_miss"]) == ("no-ceiling", "no-ceiling")
    assert df.loc["h.ref", "reference_miss"] == "" and df.loc["h.smoke", "here_ceiling"] == ""
    line = report_content.misses_line(df)
    assert line == ("On the reference machine, the 2 measured claims that miss, by kind: 1 implementation short of "
                    "its ceiling, 0 ceiling below the target, 1 no ceiling measured; model rows: 1 no ceiling measured.")
    out, page, dom = _page(f, df, tmp_path)
    misses = [a for _, a, _ in dom.find("span") if "data-miss" in a]
    assert {(a["data-side"], a["data-miss"]) for a in misses} == {("reference", "implementation"),
                                                                 ("reference", "no-ceiling")}
    text = dom.text
    assert "ceiling 2 \u00b7 target >= 1.5" in text and "ceiling 2.5 \u00b7 target >= 1.5" in text
    assert "miss: implementation, 0.7 of its ceiling" in text and line in text
    md = (out / "report.md").read_text()
    assert f"- {line}" in md and "\u00b7 ceiling 2 \u00b7 miss: implementation, 0.7 of its ceiling" in md


@pytest.mark.parametrize("value, target, direction, unit, expected", [
    (2.0, 1.0, ">=", "x", 1.0),           # twice the target: one doubling right
    (0.5, 1.0, ">=", "x", -1.0),
    (0.5, 1.0, "<=", "s", 1.0),           # a time half the bound holds: right
    (4.0, 1.0, "<", "s", -2.0),
    (88.5, 91.5, ">=", "% top-1", -3.0),  # accuracy: a difference in points
    (-3.75, 0.0, ">", "x", -3.75),        # a target at 0: a difference
    (0.11, 0.5, "<=", "top-1 points lost", 0.39),
    (float("nan"), 0.5, "<=", "points", None),
    (None, 1.0, ">=", "x", None),
])
def test_every_claim_sits_on_one_axis_right_when_it_holds(value, target, direction, unit, expected):
    x = claims_chart.position(value, target, direction, claims_chart.is_difference(unit, target))
    assert x == expected if expected is None else x == pytest.approx(expected)


def test_the_picture_places_each_side_and_the_papers_value_in_its_unit(built):
    _, df = built
    pos = claims_chart.placed(df).set_index("claim_id")
    assert pos.loc["h.both", "reference"] == pytest.approx(math.log2(1.4 / 1.5))
    assert pos.loc["h.both", "here"] == pytest.approx(math.log2(2.0 / 1.5))
    assert pos.loc["h.both", "paper"] == pytest.approx(math.log2(2.0 / 1.5))
    assert math.isnan(pos.loc["h.ref", "here"])  # not run here: nothing drawn for here
    assert math.isnan(pos.loc["h.smoke", "here"])  # a smoke value is not placed against a paper target
    assert math.isnan(pos.loc["h.time", "paper"])  # the paper's value is in another unit (paper_unit)
    assert pos.loc["h.time", "reference"] == pytest.approx(1.0)  # 1 s against <= 2 s
    png = claims_chart.png(df)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) < 200_000


def test_a_note_shows_two_sentences_and_keeps_the_rest():
    head, rest = report_content.split_note("What is measured. Why it misses (1.2x, e.g. here). Third. Fourth?")
    assert head == "What is measured. Why it misses (1.2x, e.g. here)." and rest == "Third. Fourth?"
    assert report_content.split_note("") == ("", "")


def _page(f, df, tmp_path):
    out = tmp_path / "out"
    figures = report.default_figures(f["results"], f["reference"])
    page = report.write(df.reset_index(drop=True), out, figures, results=f["results"], reference_root=f["reference"],
                        junit=f["results"] / "tests" / "junit.xml", config_root=f["config"])
    return out, page, Elements(page.read_text())


def test_the_page_links_values_to_records_and_provenance(built, tmp_path):
    f, df = built
    out, page, dom = _page(f, df, tmp_path)
    rows = {a["data-claim"]: a for _, a, _ in dom.find("tr", class_="claim")}
    assert list(rows) == list(df.claim_id)
    assert {k: (a["data-reference"], a["data-here"]) for k, a in rows.items()}["h.both"] == ("not-reproduced", "reproduced")
    pills = [(a["data-side"], a["data-verdict"]) for _, a, _ in dom.find("span") if "data-verdict" in a]
    assert len([p for p in pills if p[0] == "reference"]) == len(df) == len([p for p in pills if p[0] == "here"])
    hrefs = [a["href"] for _, a, _ in dom.find("a")]
    for h in (h for h in hrefs if h.endswith("record.json")):
        assert (out / h).resolve().is_file(), h
    anchors = {a["id"] for _, a, _ in dom.elements if "id" in a}
    for h in (h for h in hrefs if h.startswith("#")):
        assert h[1:] in anchors, h
    fast = f["here"]["fast"]["record_id"]
    assert f"#rec-{fast}" in hrefs and f"rec-{fast}" in anchors
    assert "http://127.0.0.1:5000/#/experiments/7/runs/abc123" in hrefs
    text = dom.text
    assert "driver 580.159.04" in text and "GPU shared with up to 3 other processes" in text
    assert "What is measured. Why it misses." in text and "A third sentence, behind the disclosure." in text


def test_the_page_is_self_contained_with_thumbnails_linking_to_full_figures(built, tmp_path):
    f, df = built
    out, page, dom = _page(f, df, tmp_path)
    sources = [a["src"] for _, a, _ in dom.find("img")]
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    assert not re.search(r"""(src|href)=["']https?://(?!127\.0\.0\.1)""", page.read_text())  # nothing fetched
    figures = dom.find("figure")
    assert {a["id"] for _, a, _ in figures} == {"fig-k-fast", "fig-k-skipped"}
    full = [a["href"] for _, a, _ in dom.find("a") if a.get("href", "").endswith((".png", ".pdf"))]
    assert {Path(h).name for h in full} == {"fast.png", "fast.pdf", "skipped.png", "skipped.pdf"}
    assert all((out / h).resolve().is_file() for h in full)
    assert "reference run" in dom.text and "this run, paper scale" in dom.text
    assert (out / "claims_chart.png").is_file() and page.stat().st_size < 1_500_000


def test_the_artifact_section_maps_badges_to_this_runs_evidence(built, tmp_path):
    f, df = built
    out, page, dom = _page(f, df, tmp_path)
    text = dom.text
    for badge in artifact.BADGES:
        assert badge in text
    assert "3 passed" not in text and "2 passed, 1 failed, 1 skipped of 4 tests" in text
    assert "tests.comet.test_codec::test_c" in text and "needs a CUDA GPU" in text
    assert "make test" in text and "python -m repro.pipeline.run experiment=" in text
    md = (out / "report.md").read_text()
    for cid in df.claim_id:
        assert cid in md
    for needle in ("not reproduced", "not run here", "smoke run (not judged)", "Results Reproduced",
                   "2 passed, 1 failed", "fast.pdf", "claims_chart.png", "driver 580.159.04"):
        assert needle in md, needle


def test_experiment_runs_count_a_sweeps_points_in_its_row(built):
    f, _ = built
    runs = artifact.reference_runs(f["reference"], f["config"])
    sweep = runs["k/sweep"]
    assert sweep["duration_s"] == 12.5 and sweep["points"] == {"n": 1, "duration_s": 100.0,
                                                               "disk_bytes": sweep["points"]["disk_bytes"]}
    own = (Path(sweep["path"])).stat().st_size
    assert sweep["disk_bytes"] == own and sweep["points"]["disk_bytes"] > 0  # the point's folder is not its own
    assert set(artifact.experiment_runs(f["results"], f["config"])) == {"k/fast", "k/skipped", "k/smoke", "k/cpu"}


def test_junit_counts_by_test_folder(built):
    f, _ = built
    suite = artifact.junit(f["results"] / "tests" / "junit.xml")
    assert (suite.tests, suite.passed, suite.failed, suite.skipped) == (4, 2, 1, 1)
    assert suite.by_folder["tsm2x"] == {"passed": 1, "skipped": 1} and suite.when == "2026-12-02 18:00:00"
    assert artifact.junit(f["results"] / "none.xml") is None


def test_the_real_ledger_renders_with_the_committed_references(tmp_path):
    """Every claim of config/claims on an empty results folder against results/reference: each one
    with a committed run has its value, and the conditions PAPERS.md asks for are there."""
    ref = REPO / "results" / "reference"
    if not (ref / "nvidia-h200").is_dir():
        pytest.skip("no committed reference runs")
    (tmp_path / "empty").mkdir()
    df = claims.build(REPO / "config" / "claims", tmp_path / "empty", ref).set_index("claim_id", drop=False)
    assert set(df.here_verdict) <= {"not-run-here", "pending", "unavailable"}
    assert df.loc["sycldnn.conv"].reference_verdict == "unavailable"  # shown as such, never as pending
    judged = df[df.reference_verdict.isin(["reproduced", "not-reproduced"])]
    assert len(judged) >= 20 and all(judged.reference_record.str.endswith("record.json"))
    acc = df.loc["comet.acc"]  # judged at comet.mem's 13.5x: no sweep point reaches it
    assert acc.reference_verdict == "not-reproduced" and any("no point reaches" in d for d in acc.reference_details)
    assert any(d.startswith("also max_mem_reduction") for d in acc.reference_details)
    assert any(d.startswith("also min_speedup_fp64") for d in df.loc["tsm2.r_speedup_ours"].reference_details)
    # the paper's statistic, computed from the committed run's own table
    assert any(d.startswith("headline mean of points.csv:speedup (kind=tsm2r, dtype=float32) = ")
               for d in df.loc["tsm2.r_speedup"].reference_details)
    assert any(d.startswith("also e2e_vs_prunetrain") for d in df.loc["ct.vs_during_narrow"].reference_details)
    for r in judged.itertuples():  # every miss has its kind; a ceiling is the same card's run
        assert (r.reference_miss in claims.MISS_KINDS) == (r.reference_verdict == "not-reproduced"), r.claim_id
    r_speedup = df.loc["tsm2.r_speedup"]
    if r_speedup.reference_ceiling:
        card = r_speedup.reference_record.split("/")[-4]
        assert any(d.startswith("ceiling: ") and f"{card}/tsm2x/tsm2_r/record.json" in d
                   for d in r_speedup.reference_details)
    comp = df.loc["comet.compressor"]
    assert [d.split(" =")[0] for d in comp.reference_details[:2]] == ["also decompress_gbps", "also max_err_over_eb"]
    page = report.write(df.reset_index(drop=True), tmp_path / "out", report.default_figures(tmp_path / "empty", ref),
                        results=tmp_path / "empty", reference_root=ref)
    assert page.stat().st_size < 1_500_000
    _assert_printed_paths_exist(page, REPO)


def _card_text(dom, side):
    """The text of a summary card (its elements up to the next card or section)."""
    start = dom.elements.index(dom.find("div", id=f"verdicts-{side}")[0])
    end = next((i for i in range(start + 1, len(dom.elements))
                if dom.elements[i][1].get("id", "").startswith("verdicts-") or dom.elements[i][0] == "h2"
                and dom.elements[i][1].get("id")), len(dom.elements))
    return " ".join(t for _, _, t in dom.elements[start:end])


def test_each_card_states_one_denominator_and_its_bar_has_a_legend(built, tmp_path):
    """Every "N of M" of a card has the card's denominator; the bar's parts, named with their counts
    in its legend, add up to it."""
    f, df = built
    out, page, dom = _page(f, df, tmp_path)
    for card in report_content.cards(_ctx(f, df, out)):
        text = " ".join(_card_text(dom, card.side).split())
        pairs = re.findall(r"(\d+) of (\d+)\b", text)
        assert pairs and {int(m) for _, m in pairs} == {card.total}, (card.side, pairs)
        assert f"{card.count} of {card.total} {card.what}" in text
        legend = [t.strip() for tag, a, t in dom.elements[dom.elements.index(dom.find("ul", id=f"legend-{card.side}")[0]):]
                  if tag == "li"][:len(card.segments)]
        assert legend == [f"{n} {label}" for n, label, _ in card.legend()]
        assert sum(n for n, _ in card.segments) == card.total
    ref = report_content.reference_card(_ctx(f, df, out))
    judged = int(df.reference_verdict.isin(claims.JUDGED).sum())
    assert (ref.count, ref.total) == (int((df.reference_verdict == "reproduced").sum()), judged)
    md = (out / "report.md").read_text()
    assert f"**On the reference machine: {ref.headline}**" in md


def _ctx(f, df, out):
    from repro import layout
    from repro.report.content import Context

    return Context(df=df.reset_index(drop=True), out=out, figures=[], here_runs=artifact.experiment_runs(f["results"], f["config"]),
                   reference_runs={}, tests=None, badges=[], mlflow_uri="", mlflow_runs={}, results=f["results"],
                   experiments=layout.experiment_names(f["config"]))


def test_the_per_paper_cells_name_what_they_count(built, tmp_path):
    f, df = built
    glance = report_content.per_paper(df.reset_index(drop=True)).set_index("paper")
    for cell in glance.drop(columns=["claims", "reference hardware"]).to_numpy().ravel():
        assert cell == "-" or re.fullmatch(r"\d+ [a-z][a-z ()-]+(, \d+ [a-z][a-z ()-]+)*", cell), cell
    assert glance.loc["P", "reference machine"] == "1 held, 1 missed"  # h.both misses, h.ref holds
    assert glance.loc["P", "pending"] == "1 pending" and glance.loc["Q", "pending"] == "-"
    out, page, dom = _page(f, df, tmp_path)
    assert "1 held, 1 missed" in dom.text and not re.search(r"\d+ / \d+ / \d+", dom.text)


def _printed_paths(text: str) -> set[str]:
    """The file paths a page's text names: tokens under results/, docs/, config/, tests/ or src/, or
    absolute, ending in a file name with a suffix or in a folder's slash."""
    found = re.findall(r"(?<![\w<>/.-])((?:/|\.\./|results/|docs/|config/|tests/|src/)[\w./-]*(?:\.\w+|/))(?![\w<>])", text)
    return {p.rstrip(".") for p in found if "<" not in p}


def test_every_path_the_report_prints_exists(built, tmp_path, monkeypatch):
    """Every link resolves, and every path the text names exists (the commands apart: they name what
    they make)."""
    f, df = built
    monkeypatch.chdir(tmp_path)
    for junit in (f["results"] / "tests" / "junit.xml", None):  # with test results and without
        out = tmp_path / "out"
        page = report.write(df.reset_index(drop=True), out, report.default_figures(f["results"], f["reference"]),
                            results=f["results"], reference_root=f["reference"], junit=junit, config_root=f["config"])
        _assert_printed_paths_exist(page, tmp_path)


def _assert_printed_paths_exist(page: Path, cwd: Path):
    out = page.parent
    dom = Elements(page.read_text())
    for href in (a["href"] for _, a, _ in dom.find("a") if "href" in a):
        if not href.startswith(("#", "http://", "https://")):
            assert (out / href).resolve().exists(), href
    for text in (dom.text, (out / "report.md").read_text()):
        for command in sorted((c for c, _ in report_content.COMMANDS), key=len, reverse=True):  # they name what they make
            text = text.replace(command, "")
        paths = _printed_paths(text)
        assert paths
        for p in paths:
            assert any((base / p).exists() for base in (Path("/"), cwd, REPO, out)), p


def test_without_chromium_the_report_says_why_there_is_no_screenshot(built, tmp_path, monkeypatch):
    from repro.report import browser

    f, df = built
    monkeypatch.setattr(browser, "chromium", lambda: None)
    out = tmp_path / "out"
    out.mkdir()
    stale = out / "report.png"
    stale.write_bytes(b"an earlier screenshot")
    page = report.write(df.reset_index(drop=True), out, [], results=f["results"], reference_root=f["reference"],
                        config_root=f["config"], screenshot=stale)
    line = Elements(page.read_text()).find("p", id="screenshot")[0][2]
    assert line == "No screenshot (report.png): chromium is not installed (apt-get install -y chromium)."
    assert line in (out / "report.md").read_text() and not stale.exists()
    page = report.write(df.reset_index(drop=True), out, [], results=f["results"], reference_root=f["reference"],
                        config_root=f["config"])  # none asked for: no line
    assert not Elements(page.read_text()).find("p", id="screenshot")


def _smoke_results(f, top1: float) -> Path:
    """A results folder as a smoke run leaves it: every experiment of the fixture's config at smoke
    scale (the GPU ones skipped), and the learning check's experiment with its epochs."""
    from repro.report import learning
    from report_fixture import EXPERIMENTS, write_record

    results = f["results"].parent / f"smoke-{top1:g}"
    path = f["config"] / "experiment" / f"{learning.EXPERIMENT}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("name: resnet32\npaper: baseline\ngpus: 1\n")
    for exp, gpus in EXPERIMENTS.items():
        write_record(results, exp, {"speedup": 0.5}, scale="smoke", gpu=None,
                     **({"status": "skipped"} if gpus else {}))
    write_record(results, learning.EXPERIMENT, {"final_top1": top1, "n_test_images": 1000}, scale="smoke", gpu=None)
    (results / learning.EXPERIMENT / "epochs.csv").write_text("epoch,test_loss,test_top1\n1,2.2,12.0\n2,1.9,"
                                                              f"{top1}\n")
    return results


@pytest.mark.parametrize("top1, verdict", [(30.0, "holds"), (11.0, "fails")])
def test_a_smoke_runs_card_says_what_ran_and_was_checked(built, tmp_path, top1, verdict):
    """At smoke scale no claim is judged here: the card counts the experiments that finished (of the
    experiment files), says whether the learning check held, and that claims are not judged at this
    scale; it shows no count of claims that hold."""
    from report_fixture import EXPERIMENTS

    f, _ = built
    results = _smoke_results(f, top1)
    df = claims.build(f["ledger"], results, f["reference"], f["config"])
    assert not df.here_verdict.isin(claims.JUDGED).any()
    page = report.write(df, tmp_path / "out", [], results=results, reference_root=f["reference"],
                        config_root=f["config"])
    dom = Elements(page.read_text())
    text = " ".join(_card_text(dom, "here").split())
    skipped = sum(1 for gpus in EXPERIMENTS.values() if gpus)
    experiments = len(EXPERIMENTS) + 1
    assert f"{experiments - skipped} of {experiments} experiments finished" in text
    assert f"{experiments - skipped} finished" in text and f"{skipped} skipped" in text
    assert f"Learning check on baseline/resnet32: {verdict}" in text
    assert "Claims: none judged here" in text and "smoke scale" in text and "claims hold" not in text
    if verdict == "fails":
        assert f"final top-1 {top1:.1f}% < 16.0%" in text
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"**Here: {experiments - skipped} of {experiments} experiments finished**" in md
