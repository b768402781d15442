"""The interconnect harness on GPUs: the SM copy kernel (tails included) and the pointer chase on
one GPU, host-device copies, and with 2+ GPUs the P2P sweep and NCCL collectives at tiny sizes."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
torch = pytest.importorskip("torch")

from repro import kernels  # noqa: E402
from repro.experiment import Context  # noqa: E402
from repro.papers.interconnect import p2p  # noqa: E402
from repro.papers.interconnect.experiment import (CollectiveParams, HostDeviceParams, P2PParams, collectives,  # noqa: E402
                                           host_device)
from repro.papers.interconnect.experiment import p2p as p2p_experiment  # noqa: E402
from conftest import built_kernels  # noqa: E402

pytestmark = pytest.mark.gpu
KERNELS = Path(__file__).resolve().parents[2] / "src" / "repro" / "papers" / "interconnect" / "kernels"
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
LOG = logging.getLogger("test")


@pytest.fixture(scope="session")
def kernels_dir(tmp_path_factory) -> Path:
    return built_kernels(tmp_path_factory, sorted(KERNELS.glob("*.cu")))


@pytest.mark.parametrize("nbytes", [1, 15, 16, 17, 4099, 1 << 20])
def test_sm_copy_copies_every_byte(kernels_dir, nbytes):
    rig = p2p.Rig([0], 1 << 20, kernels_dir)
    rig.src[0][:] = cupy.arange(1 << 20, dtype=np.uint32).astype(np.uint8)
    rig.dst[0].fill(0)
    copies = [("sm", 0, 0)]
    rig.timed(copies, nbytes, 1)
    cupy.cuda.runtime.deviceSynchronize()
    assert bool((rig.dst[0][:nbytes] == rig.src[0][:nbytes]).all()) and bool((rig.dst[0][nbytes:] == 0).all())


def test_chase_latency_is_positive_and_local_is_sub_microsecond(kernels_dir):
    rig = p2p.Rig([0], 1024, kernels_dir)
    lat = rig.latency(0, 0, 8192, 20000, seed=0)
    assert 0 < lat < 2e-6


def test_host_device_tiny(tmp_path):
    r = host_device(HostDeviceParams(sizes_bytes=[8, 1 << 20], trials=2, target_s=0.001),
                    Context(out_dir=tmp_path, device="cuda", gpus=1))
    assert r.metrics["h2d_pinned_gbps"] > 1 and r.metrics["d2h_pageable_gbps"] > 0.1


@two_gpus
def test_p2p_sweep_tiny(tmp_path, kernels_dir):
    p = P2PParams(sizes_bytes=[8, 1 << 20], trials=2, target_s=0.001, chase_steps=2000)
    r = p2p_experiment(p, Context(out_dir=tmp_path, device="cuda", gpus=2, inputs={"kernels": kernels_dir}))
    df = r.tables["points"]
    assert len(df) == 2 * 2 * (2 * 2 + 2)  # pairs x sizes x (ce/sm x uni/bi on, ce x uni/bi off)
    assert r.metrics["p2p_uni_ce_gbps"] > 10 and r.metrics["remote_latency_us"] > r.metrics["local_latency_us"]
    assert set(r.tables["hypotheses"]["effect"]) >= {"topology", "connectivity", "routing", "pcie_anti_locality"}


@two_gpus
def test_nccl_collectives_tiny(tmp_path):
    p = CollectiveParams(sizes_bytes=[8, 1 << 20], warmup=1, min_iters=2, max_iters=5)
    r = collectives(p, Context(out_dir=tmp_path, device="cuda", gpus=2))
    assert r.metrics["wrong"] == 0 and r.tags["backend"] == "nccl" and r.metrics["all_reduce_busbw_gbps"] > 1


def test_kernels_module_loads(kernels_dir):
    assert kernels.function("gpuic_copy", "chase", 0, kernels_dir) is not None
