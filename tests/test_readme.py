"""README's per-experiment table is the rendering of docs/results-table.yaml over the reference records."""

import json
import shutil

import pytest

from repro.report import readme

from conftest import REPO

SPEC = REPO / "docs" / "results-table.yaml"
LEDGER = REPO / "config" / "claims"
REFERENCE = REPO / "results" / "reference"


def _run(capsys, *args, readme_path=REPO / "README.md", reference=REFERENCE, spec=SPEC):
    code = readme.main([*args, "--readme", str(readme_path), "--reference", str(reference), "--spec", str(spec),
                        "--ledger", str(LEDGER)])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def copy(tmp_path):
    """A copy of the reference tree's records, with the tables they list (a claim may read a table
    statistic), and of README.md, to change."""
    for path in REFERENCE.rglob("record.json"):
        dest = tmp_path / "reference" / path.relative_to(REFERENCE)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
        for table in json.loads(path.read_text()).get("tables") or []:
            if (path.parent / table).is_file():
                shutil.copyfile(path.parent / table, dest.parent / table)
    shutil.copyfile(REPO / "README.md", tmp_path / "README.md")
    return tmp_path


def _edit_metric(record_path, key, value=None):
    rec = json.loads(record_path.read_text())
    if value is None:
        del rec["metrics"][key]
    else:
        rec["metrics"][key] = value
    record_path.write_text(json.dumps(rec))


def test_committed_readme_is_the_rendering_of_the_records(capsys):
    code, out, err = _run(capsys, "--check")
    assert code == 0, f"README.md's table differs from the records (run `make readme`):\n{out}{err}"


def test_a_changed_metric_fails_the_check_naming_its_row(copy, capsys):
    _edit_metric(copy / "reference" / "nvidia-h200" / "tsm2x" / "tsm2_r" / "record.json", "geomean_speedup_fp32", 1.234)
    code, out, err = _run(capsys, "--check", readme_path=copy / "README.md", reference=copy / "reference")
    assert code == 1
    assert "tsm2x/tsm2_r" in err and "baseline/resnet32" not in err
    assert "+| tsm2x/tsm2_r |" in out and "1.23x geomean fp32" in out
    # Rendering writes the new value; the check then passes.
    assert _run(capsys, readme_path=copy / "README.md", reference=copy / "reference")[0] == 0
    assert "1.23x geomean fp32" in (copy / "README.md").read_text()
    assert _run(capsys, "--check", readme_path=copy / "README.md", reference=copy / "reference")[0] == 0


def test_a_metric_a_row_reads_missing_is_an_error_naming_row_experiment_and_metric(copy, capsys):
    _edit_metric(copy / "reference" / "nvidia-h100-80gb-hbm3" / "tsm2x" / "tsm2_l" / "record.json", "min_speedup")
    code, _, err = _run(capsys, "--check", readme_path=copy / "README.md", reference=copy / "reference")
    assert code == 2
    assert "(tsm2x/tsm2_l)" in err and "tsm2x/tsm2_l on nvidia-h100-80gb-hbm3" in err and "'min_speedup'" in err


def test_a_card_without_runs_of_a_row_is_left_out_and_the_first_card_says_not_run(copy, capsys):
    shutil.rmtree(copy / "reference" / "nvidia-h100-80gb-hbm3" / "tsm2x" / "tsm2_l")
    shutil.rmtree(copy / "reference" / "nvidia-h200" / "baseline" / "vgg16")
    assert _run(capsys, readme_path=copy / "README.md", reference=copy / "reference")[0] == 0
    rows = {line.split(" | ")[0][2:]: line for line in (copy / "README.md").read_text().splitlines()
            if line.startswith("| ")}
    assert "H100:" not in rows["tsm2x/tsm2_l"] and "H100: 1.27x mean fp32" in rows["tsm2x/tsm2_r"]
    assert "not run (no record of baseline/vgg16)" in rows["baseline/vgg16"]
    assert rows["baseline/vgg16"].endswith("| not run | not run |")


def test_a_number_typed_by_hand_in_a_template_is_refused(tmp_path):
    spec = tmp_path / "table.yaml"
    spec.write_text("rows:\n  - {experiment: ceilings, label: (denominators), figure: f.png, reads: [ceilings/ceilings],\n"
                    "     value: 'copy {ceilings/ceilings:d2d_copy_GBps:.0f} GB/s of 4800', target: '-',\n"
                    "     time: '{ceilings/ceilings:duration_s:.0f} s'}\n")
    with pytest.raises(readme.TableError, match="typed by hand.*'4800'"):
        readme.load_spec(spec)
    spec.write_text(spec.read_text().replace(" of 4800", " on fp32 and VGG-16 and amb_0.5"))
    assert readme.load_spec(spec)[0].spec["experiment"] == "ceilings"


def test_a_claim_judged_nowhere_shows_pending_or_unavailable_with_its_target(copy, capsys):
    # A claim with no metric (vmesh.gb: pending) or with the ledger's unavailable evidence (sycldnn.conv)
    # is judged on no card: the verdict column says so, as the claims report does, and its target shows.
    spec = copy / "table.yaml"
    spec.write_text("rows:\n"
                    "  - {experiment: vectormesh/baselines, claims: [vmesh.gb], figure: f.png,\n"
                    "     reads: [vectormesh/baselines], value: '{vectormesh/baselines:*_dram_reads:.0f} reads',\n"
                    "     target: '{claim:vmesh.gb:target}x', time: '{vectormesh/baselines:duration_s:.0f} s'}\n"
                    "  - {experiment: ceilings, claims: [sycldnn.conv], figure: f.png, reads: [ceilings/ceilings],\n"
                    "     value: '{ceilings/ceilings:d2d_copy_GBps:.0f} GB/s', target: '-',\n"
                    "     time: '{ceilings/ceilings:duration_s:.0f} s'}\n")
    assert _run(capsys, readme_path=copy / "README.md", reference=copy / "reference", spec=spec)[0] == 0
    rows = {line.split(" | ")[0][2:]: line for line in (copy / "README.md").read_text().splitlines()
            if line.startswith("| ")}
    assert "| 2x | pending |" in rows["vectormesh/baselines"]
    assert "| - | unavailable; H100: unavailable |" in rows["ceilings"]
