"""Jobs of a killed workflow stop: the Snakefile names its own process in the environment
(:func:`export_workflow_pid`), and each job (``repro.pipeline.run``, ``repro.pipeline.tracking``) runs a watchdog
thread (:func:`start`) that ends the job when that process is gone, so a ``kill -9`` of Snakemake
does not leave its jobs running as orphans beside a rerun's. The process is told by PID and start
time (a reused PID is not mistaken for it), and only on the host that exported it (a cluster job
on another node has no such process to watch). Light: the Snakefile imports it at every start.
"""

from __future__ import annotations

import os
import socket
import threading
import time

ENV = "REPRO_WORKFLOW_PID"  # "<pid>:<start time>:<host>" of the Snakemake process running the jobs


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22), None if gone."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(value: str) -> bool | None:
    """Whether the process named by ``value`` still runs; None where this host cannot tell."""
    try:
        pid, started, host = value.split(":", 2)
    except ValueError:
        return None
    if host != socket.gethostname() or not os.path.isdir("/proc"):
        return None
    return _start_time(int(pid)) == started


def export_workflow_pid() -> None:
    """Name this process as the one the jobs watch, unless a live one is named already (a nested
    Snakemake a job runs keeps its parent's)."""
    if os.environ.get(ENV) and _alive(os.environ[ENV]):
        return
    started = _start_time(os.getpid())
    if started is not None:
        os.environ[ENV] = f"{os.getpid()}:{started}:{socket.gethostname()}"


def start(interval: float = 2.0) -> threading.Thread | None:
    """Watch the named workflow process (if any, on this host); when it is gone, end this process
    with exit code 143 (as SIGTERM would), after saying why on stderr."""
    value = os.environ.get(ENV)
    if not value or not _alive(value):
        return None

    def watch():
        while True:
            time.sleep(interval)
            if _alive(value) is False:
                os.write(2, f"repro: the workflow process ({value.split(':')[0]}) is gone: stopping this job\n".encode())
                os._exit(143)

    thread = threading.Thread(target=watch, name="repro-watchdog", daemon=True)
    thread.start()
    return thread
