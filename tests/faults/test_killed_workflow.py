"""A killed Snakemake's jobs stop (issue 19, item 8): ``kill -9`` of a real snakemake run, and the
job it started (watching it through repro.pipeline.watchdog, as repro.pipeline.run and repro.pipeline.tracking do) ends
within seconds instead of running on as an orphan beside a rerun's."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO

SNAKEFILE = """
import sys
sys.path.insert(0, {src!r})
from repro.pipeline import watchdog
watchdog.export_workflow_pid()  # as workflow/rules/common.smk does

rule job:
    output: "done.txt"
    shell: "{python} -c 'import os, time; from repro.pipeline import watchdog; watchdog.start({watch}); "
           "open(\\"job.pid\\", \\"w\\").write(str(os.getpid())); time.sleep(120)' && touch {{output}}"
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def _run_and_kill(tmp_path, watch: str) -> int:
    (tmp_path / "Snakefile").write_text(SNAKEFILE.format(src=str(REPO / "src"), python=sys.executable, watch=watch))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("REPRO_WORKFLOW_PID", None)
    smk = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", "-d", str(tmp_path)],
                           cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "job.pid").exists() or not (tmp_path / "job.pid").read_text():
        assert time.monotonic() < deadline and smk.poll() is None, "the job never started"
        time.sleep(0.2)
    job = int((tmp_path / "job.pid").read_text())
    os.kill(smk.pid, signal.SIGKILL)
    smk.wait()
    return job


@pytest.mark.slow
def test_jobs_of_a_killed_snakemake_stop(tmp_path):
    job = _run_and_kill(tmp_path, watch="0.2")
    deadline = time.monotonic() + 10
    while _alive(job) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(job), "the job ran on after its Snakemake was killed"
    assert not (tmp_path / "done.txt").exists()


@pytest.mark.slow
def test_without_the_watchdog_the_job_is_orphaned(tmp_path):
    """The fault itself, so the test above cannot pass for another reason (a job killed with its parent)."""
    job = _run_and_kill(tmp_path, watch="interval=3600")  # a watchdog that never looks again
    try:
        time.sleep(3)
        assert _alive(job)
    finally:
        if _alive(job):
            os.kill(job, signal.SIGKILL)
