"""The GPU interconnect experiments (Li et al., TPDS 2020, arXiv 1903.04611; its suite is Tartan;
NVIDIA's nvbandwidth and nccl-tests are the reference tools).

- ``p2p`` (2 or 4 GPUs): the topology from nvidia-smi, P2P bandwidth (copy engine and SM copies,
  one way and both ways, P2P on and off, 8 B to 1 GiB) and remote-load latency per ordered GPU
  pair, and the paper's four NUMA effects as hypotheses this topology can or cannot test.
- ``host_device`` (1 GPU): pinned and pageable host-device bandwidth, 8 B to 1 GiB.
- ``collectives`` (2 or 4 GPUs; on the CPU 2 gloo processes, labelled CPU): NCCL collectives
  through torch.distributed with nccl-tests' algbw and busbw.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from repro import kernels
from repro.experiment import Context, Result, experiment
from repro.papers.interconnect import p2p as p2p_mod
from repro.papers.interconnect.busbw import COLLECTIVES

GIB = 1 << 30


def _default_sizes() -> list[int]:
    return p2p_mod.sizes(8, GIB, 4)


@dataclass
class P2PParams:
    sizes_bytes: list[int] = field(default_factory=_default_sizes)  # bytes per direction
    trials: int = 5  # timed batches per point (median)
    target_s: float = 0.01  # GPU time of one batch, which sizes its copies
    max_reps: int = 1000
    chase_slots: int = 8192  # 8-byte slots of the latency ring (64 KiB)
    chase_steps: int = 20000
    seed: int = 0
    reference_uni_gbps: float = 370.0  # nvbandwidth's one-way NVLink P2P for the machine class (PAPERS.md B4)
    reference_bi_gbps: float = 740.0  # twice the one-way reference (assumed: a full-duplex link)


def _gpu_count(ctx: Context) -> int:
    import torch

    visible = torch.cuda.device_count()
    k = ctx.gpus or visible
    if k < 1 or k > visible:
        raise ValueError(f"the run holds {k} GPU(s) but {visible} are visible")
    return k


@experiment(params=P2PParams, needs_gpu=True)
def p2p(p: P2PParams, ctx: Context) -> Result:
    """P2P bandwidth and latency per GPU pair, the topology and the NUMA hypotheses."""
    from repro.papers.interconnect import topology

    k = _gpu_count(ctx)
    if k < 2:
        raise ValueError(f"P2P needs at least 2 GPUs, the run holds {k}")
    kernels_dir = Path(ctx.inputs["kernels"]) if "kernels" in ctx.inputs else kernels.default_dir()
    topo, raw = topology.read_topology()
    (ctx.out_dir / "topology.txt").write_text(raw or topo.source)
    if topo.gpus:
        topo = topology.visible(topo, topology.physical_ids(k, os.environ.get("CUDA_VISIBLE_DEVICES")))
    points, latency = p2p_mod.measure(list(range(k)), p, kernels_dir, ctx.log)
    df, lat = pd.DataFrame(points), pd.DataFrame(latency)
    top = df[df["bytes"] == max(p.sizes_bytes)]
    small = df[df["bytes"] == min(p.sizes_bytes)]

    def pick(frame: pd.DataFrame, method: str, direction: str, p2p: str) -> pd.DataFrame:
        return frame[(frame["method"] == method) & (frame["direction"] == direction) & (frame["p2p"] == p2p)]

    def worst(method: str, direction: str, p2p: str) -> float:  # the slowest pair at the largest size
        return float(pick(top, method, direction, p2p)["gbps"].min())

    pairs = (pick(top, "ce", "uni", "on")[["src", "dst", "gbps"]].rename(columns={"gbps": "uni_gbps"})
             .merge(pick(top, "ce", "uni", "off")[["src", "dst", "gbps"]].rename(columns={"gbps": "off_gbps"}),
                    on=["src", "dst"])
             .merge(lat, on=["src", "dst"]))
    hyp = topology.hypotheses(topo, pairs)
    metrics = {
        "gpus": k, "topology_gpus": topo.gpus, "max_bytes": max(p.sizes_bytes),
        "p2p_uni_ce_gbps": worst("ce", "uni", "on"), "p2p_bi_ce_gbps": worst("ce", "bi", "on"),
        "p2p_uni_sm_gbps": worst("sm", "uni", "on"), "p2p_bi_sm_gbps": worst("sm", "bi", "on"),
        "p2p_off_uni_ce_gbps": worst("ce", "uni", "off"), "p2p_off_bi_ce_gbps": worst("ce", "bi", "off"),
        "ce_small_copy_us": float(pick(small, "ce", "uni", "on")["time_us"].median()),
        "remote_latency_us": float(lat["latency_us"].max()), "local_latency_us": float(lat["local_latency_us"].max()),
        "n_hypotheses_testable": int(hyp["testable"].sum()),
    }
    metrics["p2p_uni_frac_reference"] = metrics["p2p_uni_ce_gbps"] / p.reference_uni_gbps
    metrics["p2p_bi_frac_reference"] = metrics["p2p_bi_ce_gbps"] / p.reference_bi_gbps
    links = sorted(set(topo.links.values()))
    return Result(metrics=metrics, tables={"points": df, "latency": lat, "hypotheses": hyp,
                                           "topology": topology.pair_table(topo)},
                  artifacts={"topology": ctx.out_dir / "topology.txt"},
                  tags={"links": ",".join(links) or topo.source, "gpu": _gpu_name(),
                        "timing": "CUDA events, median of batches"})


@dataclass
class HostDeviceParams:
    sizes_bytes: list[int] = field(default_factory=_default_sizes)
    trials: int = 5
    target_s: float = 0.01
    max_reps: int = 1000


@experiment(params=HostDeviceParams, needs_gpu=True)
def host_device(p: HostDeviceParams, ctx: Context) -> Result:
    """Pinned and pageable host-device bandwidth per GPU of the run."""
    from repro.papers.interconnect import hostdevice

    k = _gpu_count(ctx)
    df = pd.DataFrame([r for d in range(k) for r in hostdevice.measure(d, p, ctx.log)])
    top = df[df["bytes"] == max(p.sizes_bytes)]
    metrics = {f"{d}_{m}_gbps": float(top[(top["direction"] == d) & (top["memory"] == m)]["gbps"].min())
               for d in ("h2d", "d2h") for m in ("pinned", "pageable")}
    metrics["gpus"] = k
    return Result(metrics=metrics, tables={"points": df}, tags={"gpu": _gpu_name(), "timing": "CUDA events"})


@dataclass
class CollectiveParams:
    ops: list[str] = field(default_factory=lambda: list(COLLECTIVES))
    sizes_bytes: list[int] = field(default_factory=_default_sizes)  # nccl-tests' S (whole array)
    warmup: int = 5
    min_iters: int = 5
    max_iters: int = 200
    iters_bytes: int = 16 * GIB  # iterations per size: iters_bytes / S, clamped
    cpu_processes: int = 2  # gloo processes when the run holds no GPU
    timeout_s: float = 500.0


@experiment(params=CollectiveParams, needs_gpu=False)
def collectives(p: CollectiveParams, ctx: Context) -> Result:
    """Collective latency and bus bandwidth: NCCL on the run's GPUs, or gloo on CPU processes."""
    from repro.papers.interconnect import collectives as coll

    cuda = ctx.device == "cuda"
    n = _gpu_count(ctx) if cuda else p.cpu_processes
    if n < 2:
        raise ValueError(f"collectives need at least 2 ranks, got {n}")
    df = pd.DataFrame(coll.run(n, "nccl" if cuda else "gloo", p.ops, p.sizes_bytes, p))
    top, small = df[df["bytes"] == df["bytes"].max()], df[df["bytes"] == df["bytes"].min()]
    metrics = {"ranks": n, "max_bytes": float(df["bytes"].max()), "wrong": int(df["wrong"].sum())}
    for op in p.ops:
        metrics[f"{op}_busbw_gbps"] = float(top[top["op"] == op]["busbw_gbps"].iloc[0])
        metrics[f"{op}_small_us"] = float(small[small["op"] == op]["time_us"].iloc[0])
    label = _gpu_name() if cuda else f"CPU: {n} gloo processes (code path only, not an interconnect measurement)"
    return Result(metrics=metrics, tables={"points": df},
                  tags={"backend": "nccl" if cuda else "gloo", "mode": "GPU" if cuda else "CPU", "gpu": label,
                        "timing": "CUDA events, slowest rank" if cuda else "wall clock between barriers, slowest rank"})


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
