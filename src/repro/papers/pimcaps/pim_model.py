"""Analytical model of PIM-CapsNet: the routing procedure in the logic layer of an HMC-like
stack, pipelined with the GPU running the conv layers of the next batch.

The stack has ``vaults`` vaults, each with ``pes_per_vault`` processing elements under its DRAM.
Routing's five steps (the prediction vectors u_hat = W u; per iteration c = softmax(b),
s = sum_l c u_hat, v = squash(s), b += u_hat . v) are split over the vaults along one dimension
(batch, low capsules or high capsules), the one with the best execution score 1 / (E + M) as the
paper's inter-vault design picks it: E the busiest vault's time, M the inter-vault traffic's.
Each step in a vault takes max(its flops / PE throughput, its DRAM bytes / vault bandwidth) and a
barrier; u_hat lives in the vault's DRAM (it is far larger than PE buffers), so each iteration
streams it twice. The GPU sends u and receives v over the external link.

Per batch (GPU times measured by the characterisation):
  GPU only:  T = conv_s + routing_s,            E = P_conv conv_s + P_routing routing_s
  PIM:       T = max(conv_s, T_pim) (steady-state pipeline),
             E = P_conv conv_s + P_idle (T - conv_s) + P_pe T_pim + DRAM and link bits x pJ/bit
Speedup = T_gpu / T_pim-system; energy saving = 1 - E_pim / E_gpu.

Every parameter says where it comes from: cited from the paper in ``SOURCES`` (its section), or
listed in ``ASSUMED`` (the comment names the public figure it follows); the GPU side is measured (the
characterisation record). A test checks that every field is in exactly one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

DIMS = ("batch", "low", "high")


@dataclass
class HMCParams:
    vaults: int = 32                 # paper, evaluation set-up: an HMC of 32 vaults
    pes_per_vault: int = 16          # paper, evaluation set-up: 16 PEs and an operation controller per vault
    pe_power_w: float = 2.24         # paper, overhead analysis: average power of the added logic
    pe_ghz: float = 1.25             # assumed: logic-layer clock (HMC logic runs at 1-1.25 GHz in PIM studies)
    flops_per_pe_cycle: float = 2.0  # assumed: one multiply-add per PE per cycle
    vault_gbps: float = 10.0         # assumed: HMC 2.0 internal bandwidth per vault (320 GB/s over 32 vaults)
    intervault_gbps: float = 40.0    # assumed: the logic layer's vault-to-vault network, per vault
    link_gbps: float = 320.0         # assumed: HMC 2.0 external links, GPU <-> stack, 4 x 80 GB/s
    dram_pj_per_bit: float = 3.7     # assumed: HMC DRAM access energy (Jeddeloh & Keeth, VLSI 2012)
    link_pj_per_bit: float = 6.8     # assumed: HMC SerDes link energy (same source)
    barrier_us: float = 0.1          # assumed: one cross-vault barrier (a round trip in the logic layer)
    gpu_power_w: float = 700.0       # assumed where not measured: H200 SXM board power limit
    gpu_idle_w: float = 100.0        # assumed where not measured: H200 idle board power


# What the paper states (read through its published summary; docs/papers/pimcaps.md says which parts).
SOURCES = {
    "vaults": "§Evaluation set-up / design overview: an HMC of 32 vaults",
    "pes_per_vault": "design (intra-vault level): 16 PEs and an operation controller in each vault's logic",
    "pe_power_w": "overhead analysis: 2.24 W average power of the added logic (0.32% area)",
}
ASSUMED = {f.name for f in fields(HMCParams)} - set(SOURCES)


@dataclass
class Workload:
    batch: int
    low: int         # L: low-level (primary) capsules
    high: int        # H: high-level (class) capsules
    d_in: int        # primary capsule size
    d_out: int       # class capsule size
    iterations: int


@dataclass
class Steps:
    """Flops and DRAM bytes of every routing step, summed over the stack."""
    flops: list[float]
    dram_bytes: list[float]
    names: list[str]


def routing_steps(w: Workload) -> Steps:
    b, lo, h, di, do = w.batch, w.low, w.high, w.d_in, w.d_out
    uhat = 4.0 * b * lo * h * do
    names, flops, bytes_ = ["predict"], [2.0 * b * lo * h * do * di], [4.0 * (b * lo * di + lo * h * do * di) + uhat]
    for r in range(w.iterations):
        names += [f"softmax{r}", f"weighted_sum{r}", f"squash{r}"]
        flops += [5.0 * b * lo * h, 2.0 * b * lo * h * do, 6.0 * b * h * do]
        bytes_ += [8.0 * b * lo * h, uhat + 4.0 * b * lo * h, 8.0 * b * h * do]
        if r < w.iterations - 1:
            names.append(f"agreement{r}")
            flops.append(2.0 * b * lo * h * do + b * lo * h)
            bytes_.append(uhat + 8.0 * b * lo * h)
    return Steps(flops, bytes_, names)


def intervault_bytes(w: Workload, dim: str, vaults: int) -> float:
    """Bytes crossing vaults for one routing procedure when split along ``dim``."""
    b, lo, h, do = w.batch, w.low, w.high, w.d_out
    if dim == "batch":  # W is read by every vault: it is sent to the vaults that do not hold it
        return 4.0 * lo * h * do * w.d_in * (vaults - 1)
    if dim == "low":  # s is summed over L: an all-reduce of B x H x D per iteration
        return w.iterations * 2.0 * 4.0 * b * h * do * (vaults - 1)
    # high: the softmax over H needs every vault's logits: B x L gathered per iteration
    return w.iterations * 2.0 * 4.0 * b * lo * (vaults - 1)


def pim_time(w: Workload, hw: HMCParams, dim: str) -> dict[str, float]:
    """Routing time in the stack split along dim: (E, M, total) in seconds."""
    extent = {"batch": w.batch, "low": w.low, "high": w.high}[dim]
    busy = min(hw.vaults, extent)
    share = math.ceil(extent / busy) / extent  # the busiest vault's fraction of the work
    steps = routing_steps(w)
    pe_flops = hw.pes_per_vault * hw.pe_ghz * 1e9 * hw.flops_per_pe_cycle
    e = sum(max(f * share / pe_flops, by * share / (hw.vault_gbps * 1e9)) for f, by in zip(steps.flops, steps.dram_bytes))
    e += len(steps.names) * hw.barrier_us * 1e-6
    m = intervault_bytes(w, dim, busy) / (hw.intervault_gbps * 1e9 * busy)
    return {"E": e, "M": m, "total": e + m}


def best_split(w: Workload, hw: HMCParams) -> tuple[str, dict[str, float]]:
    """The dimension with the highest execution score 1 / (E + M)."""
    times = {d: pim_time(w, hw, d) for d in DIMS}
    dim = min(times, key=lambda d: times[d]["total"])
    return dim, times[dim]


def evaluate(w: Workload, hw: HMCParams, conv_s: float, routing_s: float, power_conv_w: float,
             power_routing_w: float, power_idle_w: float) -> dict[str, float]:
    """GPU-only against PIM-CapsNet for one batch (powers NaN: the assumed ones are used)."""
    p_conv = hw.gpu_power_w if math.isnan(power_conv_w) else power_conv_w
    p_rout = hw.gpu_power_w if math.isnan(power_routing_w) else power_routing_w
    p_idle = hw.gpu_idle_w if math.isnan(power_idle_w) else power_idle_w
    dim, t = best_split(w, hw)
    link_bytes = 4.0 * w.batch * (w.low * w.d_in + w.high * w.d_out)
    t_pim = t["total"] + link_bytes / (hw.link_gbps * 1e9)
    t_sys = max(conv_s, t_pim)
    dram_bits = 8.0 * sum(routing_steps(w).dram_bytes)
    e_pim_stack = hw.pe_power_w * t_pim + (dram_bits * hw.dram_pj_per_bit + 8.0 * link_bytes * hw.link_pj_per_bit) * 1e-12
    e_gpu = p_conv * conv_s + p_rout * routing_s
    e_sys = p_conv * conv_s + p_idle * (t_sys - conv_s) + e_pim_stack
    return dict(split=dim, pim_routing_s=t_pim, pim_E_s=t["E"], pim_M_s=t["M"], gpu_only_s=conv_s + routing_s,
                pim_system_s=t_sys, speedup=(conv_s + routing_s) / t_sys, energy_gpu_j=e_gpu,
                energy_pim_j=e_sys, energy_saving=1.0 - e_sys / e_gpu, routing_speedup=routing_s / t_pim,
                bound="gpu conv" if conv_s >= t_pim else "pim routing")


def with_internal_bandwidth(hw: HMCParams, vault_gbps: float) -> HMCParams:
    return replace(hw, vault_gbps=vault_gbps)
