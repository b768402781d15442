"""The one-process-per-GPU launcher on 2 CPU processes (gloo): results by rank, the no-multicast
environment in every worker, a failing rank named with its traceback, and refused worker counts."""

from __future__ import annotations

import os

import pytest

from repro import multigpu


def _sum_worker(rank: int, world: int, offset: int) -> dict:
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(rank + offset)])
    dist.all_reduce(t)
    return {"rank": rank, "world": world, "sum": float(t.item()),
            "env": {k: os.environ.get(k) for k in multigpu.NO_MULTICAST}}


def _failing_worker(rank: int, world: int) -> int:
    if rank == 1:
        raise ValueError("rank one broke on purpose")
    return rank


def test_launch_collects_by_rank_with_multicast_off():
    results = multigpu.launch(_sum_worker, 2, backend="gloo", args=(10,), timeout_s=120)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["world"] == 2 and r["sum"] == 21.0 for r in results)
    assert all(r["env"] == multigpu.NO_MULTICAST for r in results)


def test_failing_rank_is_named_with_its_traceback():
    with pytest.raises(multigpu.WorkerError) as err:
        multigpu.launch(_failing_worker, 2, backend="gloo", timeout_s=120)
    assert err.value.rank == 1
    assert "rank one broke on purpose" in err.value.detail and "Traceback" in err.value.detail


def _crash_then_hang_worker(rank: int, world: int) -> int:
    import torch
    import torch.distributed as dist

    if rank == 0:
        raise RuntimeError("rank zero's own failure")
    dist.broadcast(torch.zeros(1), src=0)  # fails once rank 0 is gone (gloo: connection closed)
    return rank


def test_every_reported_failure_is_in_the_error():
    with pytest.raises(multigpu.WorkerError) as err:
        multigpu.launch(_crash_then_hang_worker, 2, backend="gloo", timeout_s=120)
    assert "rank zero's own failure" in err.value.detail  # whichever rank is named first


@pytest.mark.parametrize("n, backend, match", [(0, "gloo", "positive integer"), (2, "mpi", "backend must be"),
                                               (64, "nccl", "64 GPU workers requested")])
def test_refused_before_starting(n, backend, match):
    with pytest.raises(ValueError, match=match):
        multigpu.launch(_sum_worker, n, backend=backend, args=(0,))


def test_backend_for():
    assert multigpu.backend_for("cuda") == "nccl" and multigpu.backend_for("cpu") == "gloo"
    with pytest.raises(ValueError, match="device must be"):
        multigpu.backend_for("tpu")


def _device_worker(rank: int, world: int) -> dict:
    import torch
    import torch.distributed as dist

    t = torch.full((4,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    return {"device": torch.cuda.current_device(), "sum": float(t[0].item()), "backend": dist.get_backend()}


@pytest.mark.gpu
def test_nccl_workers_get_a_gpu_each():
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    results = multigpu.launch(_device_worker, 2, backend="nccl", timeout_s=300)
    assert [r["device"] for r in results] == [0, 1]
    assert all(r["sum"] == 3.0 and r["backend"] == "nccl" for r in results)
