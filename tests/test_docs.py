"""The paper pages (docs/papers/*.md) state what is: no dated work-log narrative, and every
relative link resolves.

History (which session, which commit, earlier values) belongs in CHANGELOG.md and
docs/gpu-notes.md; a page gives each result's value and a link to its record, which carries the
commit (docs/papers/README.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ROOT / "docs" / "papers"
PAGES = sorted(PAPERS.glob("*.md"))

LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
EXTERNAL = ("http://", "https://", "mailto:")

# What a work log looks like. A commit id is allowed only inside a link to a record or to an
# external page (e.g. an artifact pinned at a commit): those links are removed before the search.
NARRATIVE = {
    "session number": re.compile(r"\b[Ss]essions? \d+"),
    "date": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
    "History heading": re.compile(r"^#+\s.*\bHistory\b", re.MULTILINE),
    "version with its commit": re.compile(r"\bv\d+(?:\.\d+)*\s*\((?:commit\s+)?[0-9a-f]{7}"),
    # 7 to 40 hex digits with at least one digit and one letter a-f, not part of a longer word.
    "commit id": re.compile(r"(?<![\w./-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w-])"),
}


def _without_allowed_links(text: str) -> str:
    def drop(m: re.Match) -> str:
        target = m.group("target")
        if target.startswith(EXTERNAL) or target.split("#")[0].endswith("record.json"):
            return ""
        return m.group(0)

    return LINK.sub(drop, text)


def narrative(text: str) -> list[str]:
    """'kind: line' for every line of text that reads as a dated work log."""
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        clean = _without_allowed_links(line)
        for kind, pattern in NARRATIVE.items():
            m = pattern.search(clean)
            if m:
                found.append(f"line {lineno}, {kind} {m.group(0)!r}: {line.strip()[:120]}")
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Relative link targets of page that do not exist. A target beside the repository (the
    project keeps `shared/` beside the checkout) is checked only where that folder exists."""
    broken = []
    for m in LINK.finditer(page.read_text()):
        target = m.group("target")
        if target.startswith(EXTERNAL) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.is_relative_to(root) and path.is_relative_to(root.parent):
            if not (root.parent / path.relative_to(root.parent).parts[0]).is_dir():
                continue
        if not path.exists():
            broken.append(target)
    return broken


def test_there_are_paper_pages():
    assert PAGES and (PAPERS / "README.md") in PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_has_no_dated_work_log(page):
    found = narrative(page.read_text())
    assert not found, f"{page.name} narrates history (move it to docs/gpu-notes.md):\n" + "\n".join(found)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    assert not broken_links(page), f"{page.name}: links to missing files: {broken_links(page)}"


# Lines the pages held before their history moved to docs/gpu-notes.md: the checker must flag each.
OLD_LINES = [
    "**H200, one GPU** (`results/reference/nvidia-h200/interconnect/host_device/`, commit 8e084e8,",
    "python -m repro.pipeline.run experiment=sptrsv/single_gpu scale=paper         # 1 H200, 165 s measured (session 10)",
    "on graphs ~9x smaller. Partition times on one core of this CPU (shared, 2026-12-03): vertex (METIS)",
    "## 7. History",
    "- v1 (3b14f3e; H200 at 13bf67a and 81fc7ac, sessions 2-3): liveness profile, speed/memory-centric recomputation",
    "- v2 (ca2f073, with 4012532's `roofline_speedup_geomean*`; H200 in session 2 on 2xH200, published 8a66293)",
    "| `comet.compressor` | compress 1011.5 GB/s | >= 1000 each | reproduced (at the edge) | `comet_bench` (490fff5) |",
    "order: **v1** handed the codec each channels-last activation in memory order; **v2** (the default since 5a741f1)",
    "- v2 (1fab3a1): every phase its own CUDA graph",
]

# Lines the pages hold now that look close to history but are not.
PRESENT_LINES = [
    "The artifact is [hipdac-lab/ICS21-ClickTrain at commit 97d35ff](https://github.com/hipdac-lab/ICS21-ClickTrain/tree/97d35ff)",
    "**H200** (`reorder`, 156 s; [record](../../results/reference/nvidia-h200/gpucache/reorder/record.json)): edge order",
    "step and the same per-step decay, 0.0019957); BatchNorm biases at 64x the lr and wd / 64",
    "| `tsm2.r_speedup` | fp32 geomean **1.468x** | >= 1.6 | not reproduced | [`tsm2_r`](../../results/reference/nvidia-h200/tsm2x/tsm2_r/record.json) |",
    "Keeth 2012), 0.1 us per barrier, and 700 W / 100 W GPU busy / idle",
    "The 64-block step is launch-bound and lent hosts differ, so compare speeds within one record only.",
]


@pytest.mark.parametrize("line", OLD_LINES)
def test_checker_flags_work_log_lines(line):
    assert narrative(line)


@pytest.mark.parametrize("line", PRESENT_LINES)
def test_checker_passes_present_tense_lines(line):
    assert not narrative(line)


def test_checker_finds_a_missing_link(tmp_path):
    root = tmp_path / "repo"
    page = root / "docs" / "papers" / "x.md"
    page.parent.mkdir(parents=True)
    (root / "docs" / "papers" / "y.md").write_text("y\n")
    page.write_text("[gone](../../results/reference/nvidia-h200/none/record.json) [web](https://example.org)\n"
                    "[there](y.md#part) [beside the repo](../../../shared/PAPERS.md)\n")
    assert broken_links(page, root) == ["../../results/reference/nvidia-h200/none/record.json"]
    (tmp_path / "shared").mkdir()
    assert broken_links(page, root)[-1] == "../../../shared/PAPERS.md"
