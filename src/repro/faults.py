"""Fault injection for the fault suite (tests/faults/): ``REPRO_KILL_AT=<point>`` makes the process
that reaches ``kill_point("<point>")`` kill itself with SIGKILL there, as ``kill -9`` would, so a
test can stop the pipeline at a chosen step and check that a rerun repairs everything. Unset (every
normal run), a point costs one environment lookup.

Points, one per kind of step (tests/faults/test_kill_and_rerun.py kills each):

``data.train_written``    data prep: the train split written, the test split and manifest not yet
``train.checkpointed``    a training epoch: the first epoch's checkpoint saved, the run unfinished
``build.compiled``        a kernel build: compiled (or found nvcc missing), no status file written
``figure.temp_written``   a figure: its temporary PNG and PDF written, not yet moved into place
``tracking.run_created``  ingestion: an MLflow run exists, nothing logged yet
``tracking.logged``       ingestion: metrics logged, no artifacts, not terminated
``report.csv_written``    the report: claims.csv written, the chart, report.md and report.html not

With ``REPRO_KILL_LOG=<file>`` also set, the process appends the point's name to that file before it
dies, so a test can tell a kill from a failure.
"""

from __future__ import annotations

import os
import signal

ENV = "REPRO_KILL_AT"
LOG_ENV = "REPRO_KILL_LOG"
POINTS = ("data.train_written", "train.checkpointed", "build.compiled", "figure.temp_written",
          "tracking.run_created", "tracking.logged", "report.csv_written")


def kill_point(name: str) -> None:
    if os.environ.get(ENV) == name:
        if os.environ.get(LOG_ENV):
            with open(os.environ[LOG_ENV], "a") as fh:
                fh.write(f"{name} {os.getpid()}\n")
        os.kill(os.getpid(), signal.SIGKILL)
