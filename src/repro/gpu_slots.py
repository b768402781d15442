"""One GPU per job on a machine with several: Snakemake's ``--resources gpu=N`` caps how many GPU
jobs run at once, and each job claims the first free GPU here (an exclusive ``flock`` on
``<lock_dir>/gpu<i>.lock``, held until the process exits) and makes it its only visible device.

Nothing happens where a scheduler or the user already chose (``CUDA_VISIBLE_DEVICES`` is set, as
SLURM does) or where the machine has at most one GPU. Kept free of torch: the claim must come
before CUDA is initialised.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path

from repro.scale import gpu_count

log = logging.getLogger("repro")
_held = []  # open lock files: the claim lasts as long as the process


def default_lock_dir() -> Path:
    return Path(os.environ.get("REPRO_GPU_LOCKS", "results/.gpu-slots"))


def claim_gpu(lock_dir: Path | None = None, poll_s: float = 2.0, count: int | None = None) -> int | None:
    """Claim a free GPU (waiting for one if all are taken); returns its index, or None if no claim was needed."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return None
    lock_dir = lock_dir or default_lock_dir()
    n = gpu_count() if count is None else count
    if n <= 1:
        return None
    lock_dir.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        for i in range(n):
            fh = open(lock_dir / f"gpu{i}.lock", "w")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                continue
            _held.append(fh)
            os.environ["CUDA_VISIBLE_DEVICES"] = str(i)
            log.info("claimed GPU %d of %d", i, n)
            return i
        if not waited:
            log.info("all %d GPUs busy; waiting for one", n)
            waited = True
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    """``python -m repro.gpu_slots [--locks DIR] -- CMD ...``: run CMD on a GPU of its own."""
    import argparse
    import subprocess

    parser = argparse.ArgumentParser(prog="python -m repro.gpu_slots", description=main.__doc__)
    parser.add_argument("--locks", type=Path, default=default_lock_dir())
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command after --")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    claim_gpu(args.locks)
    return subprocess.run(command).returncode  # the lock is held until the command ends


if __name__ == "__main__":
    raise SystemExit(main())
