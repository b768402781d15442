"""One process per GPU: start N workers, each with torch.distributed initialised, and collect
what each returns.

    results = multigpu.launch(worker, 2, backend="nccl", args=(params,))   # [rank 0's, rank 1's]

``worker(rank, world_size, *args)`` must be a module-level function (the workers are processes of
their own, start_method, so it is pickled by name). Rank r uses GPU r of those
``CUDA_VISIBLE_DEVICES`` lists (backend "nccl") or is a CPU process (backend "gloo", the stand-in the
CPU machines test with). What each worker returns is pickled back to the caller in rank order.

Why ``torch.multiprocessing`` processes and not a ``torchrun`` subprocess: the experiment runner is
already the process that validates the config and writes the record, so the workers are a
function call inside it (arguments and results stay Python objects, no command line or result
files to parse), and a failing worker's traceback comes back with its rank. The rendezvous is a
file store in a fresh temporary folder, so no port is picked or raced for.

Every worker (and the parent, before starting them) runs with :data:`NO_MULTICAST` set: the lent GPU
machines refuse NVLink multicast (NVLS), so NCCL, torch's symmetric memory and NVSHMEM are told
not to create multicast objects. Nothing here calls ``cuMulticastCreate``.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
BACKENDS = ("nccl", "gloo")


class WorkerError(RuntimeError):
    """A worker raised or died; ``rank`` says which, ``detail`` holds its traceback or exit cause."""

    def __init__(self, rank: int, detail: str):
        self.rank, self.detail = rank, detail
        super().__init__(f"worker rank {rank} failed:\n{detail}")


def backend_for(device: str) -> str:
    """The torch.distributed backend for a run on ``device`` ("cuda" -> nccl, "cpu" -> gloo)."""
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    return "nccl" if device == "cuda" else "gloo"


def check_world(n: int, backend: str) -> None:
    """Refuse a worker count the machine cannot serve, before anything starts."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of workers must be a positive integer, got {n!r}")
    if backend == "nccl":
        import torch

        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n > visible:
            raise ValueError(f"{n} GPU workers requested but {visible} CUDA GPU(s) are visible "
                             f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")


def launch(worker: Callable[..., Any], n: int, *, backend: str, args: tuple = (),
           timeout_s: float = 600.0) -> list[Any]:
    """Run ``worker(rank, n, *args)`` in ``n`` processes (start_method); return their results by rank.

    Raises :class:`WorkerError` naming the first rank that failed (with its traceback, and the
    tracebacks of every other rank that reported one: a rank that fails on "connection closed by
    peer" often names another's crash), or ``TimeoutError`` after ``timeout_s`` (the workers are then
    terminated)."""
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException

    check_world(n, backend)
    os.environ.update(NO_MULTICAST)
    with tempfile.TemporaryDirectory(prefix="repro-multigpu-") as tmp:
        store, out = Path(tmp) / "store", Path(tmp)
        ctx = mp.start_processes(_worker, args=(worker, n, backend, str(store), str(out), args, dict(os.environ)),
                                 nprocs=n, join=False, start_method=start_method(backend))
        deadline = time.monotonic() + timeout_s
        failed = None
        try:
            while not ctx.join(timeout=max(0.0, min(5.0, deadline - time.monotonic())), grace_period=10):
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{n} workers still running after {timeout_s:.0f} s")
        except ProcessException as exc:
            failed = exc
        finally:
            for proc in ctx.processes:
                if proc.is_alive():
                    proc.terminate()
                    proc.join(10)
        if failed is not None:  # every rank has stopped: the others' reports are all written
            detail = _reported_failure(out, failed.error_index) or str(failed).strip()
            for rank in range(n):
                if rank != failed.error_index and (other := _reported_failure(out, rank)):
                    detail += f"\n(rank {rank} also failed:)\n{other}"
            raise WorkerError(failed.error_index, detail)
        return [pickle.loads((out / f"{rank}.result").read_bytes()) for rank in range(n)]


def _reported_failure(out: Path, rank: int) -> str:
    path = out / f"{rank}.error"
    return path.read_text() if path.is_file() else ""


def start_method(backend: str) -> str:
    """How the workers start. GPU workers (nccl) are spawned: a fresh interpreter each, nothing of the
    parent's CUDA state inherited. CPU workers (gloo) are forked from multiprocessing's fork server,
    which imports torch once (preloaded) and stays up for the caller's later launches: each rank then
    starts in milliseconds instead of importing torch itself (1-1.5 CPU s a rank; 4 ranks on 2 cores
    paid it 4 times per launch). A fork server, not a plain fork of the caller: the caller's OpenMP
    thread pool and other threads are not fork-safe, the fork server has run nothing. Its workers
    write to the standard streams the fork server started with (the caller's at its first launch)."""
    if backend == "gloo":
        import multiprocessing

        multiprocessing.set_forkserver_preload(["torch", "torch.distributed"])
        return "forkserver"
    return "spawn"


def _worker(rank: int, worker, n: int, backend: str, store: str, out: str, args: tuple,
            environ: dict | None = None) -> None:
    """The started process: environment, process group, the worker, its result file. ``environ`` is the
    caller's os.environ at the launch (a forked worker would otherwise have the fork server's, from its
    start, perhaps launches ago); torch's thread count follows its OMP_NUM_THREADS."""
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    os.environ.update(NO_MULTICAST)
    import torch
    import torch.distributed as dist

    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        kw = {"device_id": torch.device("cuda", rank)} if backend == "nccl" else {}
        dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=n, **kw)
        try:
            result = worker(rank, n, *args)
        finally:
            dist.destroy_process_group()
        (Path(out) / f"{rank}.result").write_bytes(pickle.dumps(result))
    except BaseException:
        (Path(out) / f"{rank}.error").write_text(traceback.format_exc())
        raise
