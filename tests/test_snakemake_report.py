"""Snakemake's own report (`snakemake --report report.html`): every figure under its paper's category
and its experiment's subcategory, with the caption workflow/report/figure.rst and the claims that
read its record as a column; the claims report and its chart under `claims`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from repro import layout
from repro.report.claims import load_ledger

from conftest import REPO, copy_repository, venv_env

# the cheapest figure: a CPU SimPy model, seconds at smoke scale, no data or kernels
FIGURE = "results/figures/oovr/scenes.png"


def snakemake(work: Path, *args) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=work, env=venv_env(work),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def report_data(archive: Path) -> tuple[dict, dict, zipfile.ZipFile]:
    """(categories, results, the archive) of a `snakemake --report X.zip`: the two objects the
    report's page holds in `<script id="categories">var categories = {...};</script>` and `results`'s."""
    zf = zipfile.ZipFile(archive)
    page = zf.read(next(n for n in zf.namelist() if n.endswith("/report.html"))).decode()

    def var(name):
        found = re.search(rf'<script id="{name}">\s*var {name} = (.*?);\s*</script>', page, re.S)
        assert found, f"no <script id={name!r}> in the report"
        return json.loads(found.group(1))

    return var("categories"), var("results"), zf


@pytest.mark.slow
def test_a_smoke_slice_report_shows_the_figure_under_its_paper_with_caption_and_claims(tmp_path):
    work = copy_repository(tmp_path / "repo")
    snakemake(work, "--cores", "1", FIGURE, "--config", "scale=smoke")
    snakemake(work, "--report", "report.zip", FIGURE, "--config", "scale=smoke")
    categories, results, zf = report_data(work / "report.zip")
    assert categories == {"oovr": {"scenes": [FIGURE]}}
    entry = results[FIGURE]
    assert entry["labels"] == {"experiment": "oovr/scenes", "claims": "oovr"}
    caption = re.sub(r"<[^>]+>", "", entry["caption"])
    assert "Figure of the experiment oovr/scenes" in caption
    assert "results/oovr/scenes/record.json" in caption and "docs/papers/oovr.md" in caption
    assert zf.read(f"report/{entry['data_uri']}") == (work / FIGURE).read_bytes()


def workflow():
    from snakemake.api import ConfigSettings, OutputSettings, ResourceSettings, SnakemakeApi

    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        wf = api.workflow(resource_settings=ResourceSettings(cores=1), config_settings=ConfigSettings(config={}),
                          snakefile=REPO / "Snakefile", workdir=REPO)
        return wf._workflow


def report_flags(rule) -> dict:
    """output name -> its report() settings, for the rule's outputs marked for the report."""
    from snakemake.io import get_flag_value, is_flagged

    return {name: get_flag_value(f, "report") for name, f in rule.output._allitems() if is_flagged(f, "report")}


def test_every_figure_is_in_the_report_under_its_paper_with_the_claims_that_read_it():
    from snakemake.iocontainers import Wildcards

    wf = workflow()
    rules = {r.name: r for r in wf.rules}
    flags = report_flags(rules["figure"])
    assert list(flags) == ["png"]
    png = flags["png"]
    assert Path(png.caption.get_path_or_uri(secret_free=True)).resolve() == REPO / "workflow" / "report" / "figure.rst"
    reads = {}
    for claim in load_ledger(REPO / "config" / "claims"):
        for cond in [claim.get("metric"), *(claim.get("also") or [])]:
            if cond and claim["id"] not in reads.setdefault(cond["experiment"], []):
                reads[cond["experiment"]].append(claim["id"])
    figures = [e for e in layout.experiment_names() if layout.experiment_file(e).get("figure")]
    assert figures == wf.globals["FIGURES"]
    for experiment in figures:
        wc = Wildcards(fromdict={"experiment": experiment})
        assert (png.category(wc), png.subcategory(wc)) == layout.split(experiment)
        assert png.labels(wc) == {"experiment": experiment, "claims": ", ".join(reads.get(experiment, [])) or "-"}
    assert png.labels(Wildcards(fromdict={"experiment": "tsm2x/tsm2_r"}))["claims"] == "tsm2.r_speedup, tsm2.bw"
    claims = report_flags(rules["claims"])
    assert sorted(claims) == ["chart", "report"] and {f.category for f in claims.values()} == {"claims"}
