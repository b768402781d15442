"""GPUs of their own for jobs on a machine with several: Snakemake's ``--resources gpu=N`` caps how
many GPUs running jobs use at once, and each job claims as many free GPUs as its experiment uses
(an exclusive ``flock`` on ``<lock_dir>/gpu<i>.lock`` each, held until the process exits) and makes
them its only visible devices.

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

from repro.pipeline.scale import gpu_count

log = logging.getLogger("repro")
_held = []  # open lock files: the claim lasts as long as the process


def default_lock_dir() -> Path:
    return Path(os.environ.get("REPRO_GPU_LOCKS", "results/.gpu-slots"))


def listed_devices(value: str) -> list[str]:
    """The devices a CUDA_VISIBLE_DEVICES value names, as CUDA reads it: entries up to the first
    that is not a device (``-1``, ``none``, a typo) hide the rest, so ``-1`` means none."""
    out = []
    for entry in (e.strip() for e in value.split(",")):
        if not (entry.isdigit() or entry.startswith(("GPU-", "MIG-"))):
            break
        out.append(entry)
    return out


def visible_gpus() -> int:
    """The GPUs this process may use: those CUDA_VISIBLE_DEVICES names where it is set (as SLURM
    sets it), at most as many as nvidia-smi lists; else every GPU nvidia-smi lists."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        named = listed_devices(os.environ["CUDA_VISIBLE_DEVICES"])
        return min(len(named), gpu_count()) if named else 0
    return gpu_count()


def gpu_source() -> str:
    """Where visible_gpus() took its count from, for messages."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} and nvidia-smi"
    return "nvidia-smi"


def claim_gpus(want: int = 1, lock_dir: Path | None = None, poll_s: float = 2.0,
               count: int | None = None) -> list[int] | None:
    """Claim ``want`` free GPUs (waiting while fewer are free) and make them the visible devices;
    returns their indices, or None if no claim was needed (CUDA_VISIBLE_DEVICES already set, or the
    machine has no more GPUs than asked for). Locks are taken all at once or not at all, so two jobs
    waiting for two GPUs each cannot each hold one forever."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return None
    lock_dir = lock_dir or default_lock_dir()
    n = gpu_count() if count is None else count
    if n <= want:
        return None
    lock_dir.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        got = []
        for i in range(n):
            fh = open(lock_dir / f"gpu{i}.lock", "w")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                continue
            got.append((i, fh))
            if len(got) == want:
                _held.extend(fh for _, fh in got)
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i, _ in got)
                log.info("claimed GPU(s) %s of %d", os.environ["CUDA_VISIBLE_DEVICES"], n)
                return [i for i, _ in got]
        for _, fh in got:  # fewer free than wanted: give them back and wait
            fh.close()
        if not waited:
            log.info("fewer than %d of %d GPUs free; waiting", want, n)
            waited = True
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    """``python -m repro.pipeline.gpu_slots [--locks DIR] -- CMD ...``: run CMD on a GPU of its own."""
    import argparse
    import subprocess

    parser = argparse.ArgumentParser(prog="python -m repro.pipeline.gpu_slots", description=main.__doc__)
    parser.add_argument("--locks", type=Path, default=default_lock_dir())
    parser.add_argument("--gpus", type=int, default=1, help="how many GPUs the command needs (default 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command after --")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    claim_gpus(args.gpus, args.locks)
    return subprocess.run(command).returncode  # the lock is held until the command ends


if __name__ == "__main__":
    raise SystemExit(main())
