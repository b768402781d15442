"""What an artifact-evaluation committee checks, read from this run's files: each experiment's run
(time from its record's duration_s, disk from its folder) on the reference machine and here, the
test suite's JUnit XML, and the evidence for each ACM badge (Available, Functional, Reusable,
Results Reproduced) with what is missing for it. The claims report (repro.report.pages) shows these.
"""

from __future__ import annotations

import tomllib
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from repro import layout, records
from repro.pipeline import provenance
from repro.records import DEFAULT_ORDER
from repro.report.claims import JUDGED

BADGES = ("Available", "Functional", "Reusable", "Results Reproduced")


def _folder_bytes(folder: Path) -> int:
    """Bytes of the files of a run folder, less those of the run folders nested in it (a sweep's points)."""
    nested = {p.parent for p in folder.rglob(records.RECORD_NAME) if p.parent != folder}
    return sum(p.stat().st_size for p in folder.rglob("*")
               if p.is_file() and not any(n in p.parents for n in nested))


def _run(rec: dict) -> dict:
    folder = Path(rec["_dir"])
    return dict(record_id=rec.get("record_id", ""), path=str(folder / records.RECORD_NAME), status=rec["status"],
                scale=rec["scale"], reason=rec.get("reason") or "", started=rec.get("started") or "",
                duration_s=rec.get("duration_s"), disk_bytes=_folder_bytes(folder), provenance=rec["provenance"],
                record=rec)


def experiment_runs(root: Path, config_root: Path | None = None) -> dict[str, dict]:
    """Each experiment's run below ``root`` (``<root>/<paper>/<name>/record.json``) by '<paper>/<name>',
    for the papers of the experiment files under ``config_root`` (the repository's by default), with
    its time and disk; a sweep's points (run folders nested in its folder) are counted under
    ``points``: how many, their total time and disk."""
    runs = {}
    for paper in sorted({layout.split(e)[0] for e in layout.experiment_names(config_root)}):
        for path in sorted((Path(root) / paper).glob(f"*/{records.RECORD_NAME}")):
            run = _run(records.read(path))
            points = [_run(records.read(p)) for p in sorted(path.parent.rglob(records.RECORD_NAME)) if p != path]
            run["points"] = dict(n=len(points), duration_s=sum(p["duration_s"] or 0 for p in points),
                                 disk_bytes=sum(p["disk_bytes"] for p in points))
            runs[f"{paper}/{path.parent.name}"] = run
    return runs


def reference_runs(reference_root: Path, config_root: Path | None = None) -> dict[str, dict]:
    """experiment_runs of the reference machines' folders, by experiment the one repro.pipeline.reference
    prefers (the H200's first)."""
    root = Path(reference_root)
    if not root.is_dir():
        return {}
    slugs = [s for s in DEFAULT_ORDER if (root / s).is_dir()]
    slugs += sorted(p.name for p in root.iterdir() if p.is_dir() and p.name not in slugs)
    runs = {}
    for slug in reversed(slugs):  # the preferred machine's runs last: they win
        runs |= experiment_runs(root / slug, config_root)
    return runs


@dataclass
class TestSuite:
    """The counts of one JUnit XML report, and by tests/<folder>: what passed where."""

    path: Path
    when: str
    tests: int
    failed: int
    skipped: int
    seconds: float
    failures: list[str] = field(default_factory=list)
    skip_reasons: Counter = field(default_factory=Counter)
    by_folder: dict[str, Counter] = field(default_factory=dict)

    @property
    def passed(self) -> int:
        return self.tests - self.failed - self.skipped


def junit(path: Path) -> TestSuite | None:
    """The test suite's results from pytest's --junitxml file (None where there is none)."""
    path = Path(path)
    if not path.is_file():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    cases = [c for s in suites for c in s.iter("testcase")]
    failures, reasons, folders = [], Counter(), {}
    for case in cases:
        parts = (case.get("classname") or "").split(".")
        folder = parts[1] if len(parts) > 2 and parts[0] == "tests" else "tests"
        outcome = ("failed" if case.find("failure") is not None or case.find("error") is not None else
                   "skipped" if case.find("skipped") is not None else "passed")
        folders.setdefault(folder, Counter())[outcome] += 1
        if outcome == "failed":
            failures.append(f"{case.get('classname')}::{case.get('name')}")
        elif outcome == "skipped":
            message = case.find("skipped").get("message") or ""
            reasons[message.split(": ", 1)[-1][:120] or "skipped"] += 1
    stamp = suites[0].get("timestamp") if suites else None
    when = stamp or datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")
    return TestSuite(path=path, when=when[:19].replace("T", " "), tests=len(cases), failed=len(failures),
                     skipped=sum(reasons.values()), seconds=sum(float(s.get("time") or 0) for s in suites),
                     failures=failures, skip_reasons=reasons, by_folder=folders)


@dataclass
class Badge:
    name: str
    evidence: list[str]
    missing: list[str]


def _licence() -> str:
    project = tomllib.loads((layout.REPO_ROOT / "pyproject.toml").read_text()).get("project", {})
    licence = project.get("license")
    return licence.get("text", "") if isinstance(licence, dict) else str(licence or "")


def badges(df: pd.DataFrame, here: dict[str, dict], reference: dict[str, dict], tests: TestSuite | None,
           reference_root: Path) -> list[Badge]:
    """The evidence for each ACM badge in this run's files, and what is missing for it. ``df`` is the
    claims table (repro.report.claims.build), ``here``/``reference`` the experiment runs (experiment_runs)."""
    repo = layout.REPO_ROOT
    git = provenance.git_state()
    licence_files = sorted(p.name for p in repo.glob("LICEN[CS]E*"))
    ref_folders = sorted({Path(r["path"]).parents[2].name for r in reference.values()})
    available = Badge("Available", [
        f"the code at commit {git['commit'][:12]}" + (" (with uncommitted changes)" if git.get("dirty") else ""),
        f"licence: {_licence() or 'none stated'} (pyproject.toml)" + (f", {', '.join(licence_files)}" if licence_files else ""),
        f"committed reference runs: {len(reference)} experiments under {reference_root}/ "
        f"({', '.join(ref_folders) or 'no machine'}), each machine's with its PROVENANCE.md"],
        ([] if licence_files else ["no LICENSE file in the repository"]) +
        ["no archival DOI recorded: deposit the tagged commit (e.g. Zenodo) for this badge"])
    statuses = Counter((r["status"], r["scale"]) for r in here.values())
    ran = ", ".join(f"{n} {status} at {scale} scale" for (status, scale), n in sorted(statuses.items())) or "none"
    functional = Badge("Functional", [
        "`make` sets up .venv and runs the whole DAG (paper scale with a GPU, smoke without); `make test` runs "
        "the tests; `python -m repro.pipeline.run experiment=<paper>/<name> scale=paper` runs one experiment",
        f"experiments run here: {ran}",
        (f"tests: {tests.passed} passed, {tests.failed} failed, {tests.skipped} skipped of {tests.tests} "
         f"({tests.when} UTC, {tests.seconds:.0f} s)" if tests else "tests: no JUnit report found")],
        ([f"{tests.failed} tests failed"] if tests and tests.failed else []) +
        ([] if tests else ["no test results: `make test` writes the JUnit XML this report reads"]) +
        ([] if here else ["no experiment ran here (no records under the results folder)"]))
    papers = layout.papers()
    pages = [p for p in papers if (repo / "docs" / "papers" / f"{p}.md").is_file()]
    tested = [p for p in papers if (repo / "tests" / p).is_dir()]
    reusable = Badge("Reusable", [
        "docs/adding-a-paper.md: a paper is its own files (package, experiment and claims files, rule file, "
        "tests, page); an import contract keeps papers apart",
        f"paper pages docs/papers/<paper>.md: {len(pages)} of {len(papers)} papers",
        f"tests/<paper>/: {len(tested)} of {len(papers)} papers" + (
            f"; passed here: {sum(tests.by_folder.get(p, Counter())['passed'] for p in tested)} of their tests"
            if tests else ""),
        "containers/: Apptainer definitions and a Dockerfile with the pinned packages"],
        [f"no page: {', '.join(sorted(set(papers) - set(pages)))}"] * (len(pages) < len(papers)) +
        [f"no tests folder: {', '.join(sorted(set(papers) - set(tested)))}"] * (len(tested) < len(papers)))
    measured = df[df.kind != "model"]
    hw = ", ".join(sorted({h.replace(" (CPU step over its records)", "") for h in measured.reference_hardware if h}))
    ids = {v: measured.claim_id[measured.reference_verdict == v].tolist() for v in ("reproduced", "not-reproduced",
                                                                                     "no-reference")}
    here_ok = measured.claim_id[measured.here_verdict == "reproduced"].tolist()
    reproduced = Badge("Results Reproduced", [
        f"on the reference machine ({hw or 'none'}): {len(ids['reproduced'])} of the "
        f"{int(measured.reference_verdict.isin(JUDGED).sum())} measured claims judged there reproduced"
        + (f" ({', '.join(ids['reproduced'])})" if ids["reproduced"] else ""),
        f"here at paper scale: {len(here_ok)} reproduced" + (f" ({', '.join(here_ok)})" if here_ok else ""),
        "per paper: the 'At a glance' table; per claim: both verdicts, the value and its record"],
        ([f"not reproduced on the reference machine: {', '.join(ids['not-reproduced'])}"] if ids["not-reproduced"] else [])
        + ([f"no committed run: {', '.join(ids['no-reference'])}"] if ids["no-reference"] else [])
        + ["the committee's own paper-scale run: `make` on its GPU machine fills the 'here' column"])
    return [available, functional, reusable, reproduced]
