"""Fault injection for the fault suite (tests/faults/): ``REPRO_KILL_AT=<point>`` makes the process
that reaches ``kill_point("<point>")`` kill itself with SIGKILL there, as ``kill -9`` would, so a
test can stop the pipeline at a chosen step and check that a rerun repairs everything. Unset (every
normal run), a point costs one environment lookup.

Points: ``tracking.run_created`` (an MLflow run exists, nothing logged yet), ``tracking.logged``
(metrics logged, no artifacts, not terminated).
"""

from __future__ import annotations

import os
import signal

ENV = "REPRO_KILL_AT"


def kill_point(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
