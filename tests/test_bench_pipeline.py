"""benchmarks/pipeline.py (`make bench-pipeline`): what it parses from Snakemake and the record it writes."""

import importlib.util
import json
from pathlib import Path

import pytest

from repro import records

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_pipeline", ROOT / "benchmarks" / "pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DRY_RUN = """Building DAG of jobs...
Job stats:
job               count
--------------  -------
build_kernel          8
figure               78
all                   1
total                87

Reasons:
"""


def test_job_counts_read_snakemakes_job_stats_table(bench):
    assert bench.job_counts(DRY_RUN) == {"build_kernel": 8, "figure": 78, "all": 1}
    assert bench.job_counts("Nothing to be done (all requested files are present and up to date).") == {}


def test_job_seconds_sum_each_job_once_and_only_this_runs(bench, tmp_path):
    """A job with two outputs has two metadata files: it counts once; jobs that ended before the run
    started (an older run's) do not count; unreadable files are skipped."""
    def meta(name, rule, start, end, job_hash):
        (tmp_path / name).write_text(json.dumps({"rule": rule, "starttime": start, "endtime": end, "job_hash": job_hash,
                                                 "shellcmd": f"cmd {job_hash}"}))

    meta("a", "figure", 100.0, 102.5, 1)
    meta("b", "figure", 100.3, 102.5, 1)  # the same job's PDF (Snakemake stamps each output's start)
    meta("c", "figure", 101.0, 102.0, 2)
    meta("d", "build_kernel", 100.0, 112.0, 3)
    meta("e", "figure", 10.0, 12.0, 4)  # an older run
    (tmp_path / "f").write_text("{broken")
    assert bench.job_seconds(since=50.0, metadata=tmp_path) == {
        "build_kernel": {"jobs": 1, "job_s": 12.0}, "figure": {"jobs": 2, "job_s": 3.5}}


def test_the_record_is_a_valid_record_with_every_timing(bench):
    t = {"s": 1.5, "runs": [1.4, 1.5, 1.6], "load": 0.3, "out": ""}
    m = {"mode": "full", "cores": "all", "cpu_count": 2, "started": "2026-12-03T00:00:00+00:00", "slurm_plugin": False,
         "calibration": t, "calibration_after": {**t, "s": 1.8},
         "clean_dag": {"s": 250.0, "load": 0.1, "load_after": 1.9}, "snakemake_start": t, "slurm_probe": t,
         "dag_build": t, "noop_rerun": t, "jobs_to_run": 0,
         "job_fixed": {"python": t, "repro.pipeline.run": t, "repro.figures": t},
         "per_rule": {"figure": {"jobs": 78, "job_s": 120.0}}}
    record = bench.as_record(m)
    records.validate(record)
    assert record["metrics"]["clean_dag_s"] == 250.0 and record["metrics"]["noop_rerun_s"] == 1.5
    assert record["metrics"]["jobs.figure"] == 78 and record["metrics"]["job_s.figure"] == 120.0
    assert record["metrics"]["calibration_after_s"] == 1.8 and record["params"]["slurm_plugin"] is False
    assert "SLURM plugin not installed" in bench.report(m) and "machine calibration (after)" in bench.report(m)
    assert record["metrics"]["job_fixed_repro_pipeline_run_s"] == 1.5 and "commit" in record["provenance"]
    assert json.loads(record["tags"]["load_average_1min"])["clean_dag"] == 0.1
    assert "clean smoke DAG" in bench.report(m) and "no-op rerun" in bench.report(m)
    del m["noop_rerun"]
    m["jobs_to_run"] = 5
    assert "not up to date (5 jobs to run)" in bench.report(m) and "noop_rerun_s" not in bench.as_record(m)["metrics"]


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.real.test_real_browser" name="test_ui" time="700.5"/>
<testcase classname="tests.test_workflow" name="test_dag" time="30.0"/>
<testcase classname="tests.test_workflow" name="test_skip" time="0.1"><skipped message="no GPU"/></testcase>
<testcase classname="tests.comet.test_codec" name="test_bad" time="2.0"><failure message="x"/></testcase>
<testcase classname="tests.comet.test_codec" name="test_err" time="1.0"><error message="y"/></testcase>
</testsuite></testsuites>"""


def test_make_test_is_summarised_per_folder_and_recorded(bench, tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    s = bench.junit_summary(path, longest=2)
    assert (s["passed"], s["failed"], s["skipped"]) == (2, 2, 1)
    assert s["folders"] == {"tests.real": 700.5, "tests": 30.1, "tests.comet": 3.0}
    assert s["longest"] == [(700.5, "tests.real.test_real_browser::test_ui"), (30.0, "tests.test_workflow::test_dag")]
    t = {"s": 1.5, "runs": [1.5], "load": 0.3, "out": ""}
    m = {"mode": "quick", "cores": "all", "cpu_count": 2, "started": "2026-12-07T00:00:00+00:00", "slurm_plugin": False,
         "calibration": t, "calibration_after": t, "snakemake_start": t, "dag_build": t, "jobs_to_run": 0,
         "job_fixed": {"python": t}, "per_rule": {}, "make_test": {**t, "s": 640.0, "rc": 1, **s}}
    record = bench.as_record(m)
    records.validate(record)
    assert record["metrics"]["make_test_s"] == 640.0 and record["metrics"]["tests_failed"] == 2
    assert record["metrics"]["test_s.tests.real"] == 700.5
    assert json.loads(record["tags"]["make_test_longest"])[0] == [700.5, "tests.real.test_real_browser::test_ui"]
    assert "make test" in bench.report(m) and "2 failed" in bench.report(m)


def test_file_durations_sum_each_test_files_tests(bench, tmp_path):
    """tests/durations.json's numbers: seconds per test file, a class's tests in their module's file; a
    classname that names no file of the repository (a plugin's) is left out."""
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT.replace('</testsuite>', '<testcase classname="tests.test_workflow.TestX" name="t" '
                                  'time="0.4"/><testcase classname="nowhere.test_q" name="t" time="9"/></testsuite>'))
    assert bench.file_durations(path) == {"tests/comet/test_codec.py": 3.0, "tests/real/test_real_browser.py": 700.5,
                                          "tests/test_workflow.py": 30.5}


def test_the_suite_hands_out_the_longest_files_first(monkeypatch):
    """tests/durations.json orders the files (conftest.pytest_collection_modifyitems): those whose tests
    read the smoke DAG first, then the longest, a file without a time after them in collection order,
    each file whole; the container's tests last. The committed file knows the suite's files."""
    import conftest

    class Item:
        def __init__(self, nodeid, smoke=False):
            self.nodeid, self.fixturenames, self.keywords = nodeid, ["smoke_run"] if smoke else [], {}

    monkeypatch.setattr(conftest, "measured_durations", lambda: {"tests/a.py": 1.0, "tests/b.py": 9.0, "tests/s.py": 0.1})
    items = [Item("tests/real/test_real_container.py::t"), Item("tests/new.py::t1"), Item("tests/a.py::t1"),
             Item("tests/b.py::t1"), Item("tests/a.py::t2"), Item("tests/s.py::t", smoke=True), Item("tests/b.py::t2"),
             Item("tests/old.py::t")]
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == ["tests/s.py::t", "tests/b.py::t1", "tests/b.py::t2", "tests/a.py::t1",
                                         "tests/a.py::t2", "tests/new.py::t1", "tests/old.py::t",
                                         "tests/real/test_real_container.py::t"]
    monkeypatch.undo()
    seconds = conftest.measured_durations()
    assert "tests/real/test_real_browser.py" in seconds and "tests/test_workflow.py" in seconds
