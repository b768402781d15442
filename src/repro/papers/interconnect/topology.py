"""The machine's GPU topology, read from ``nvidia-smi topo -m`` (link type per GPU pair: X, NV<k>
for k bonded NVLinks, or a PCIe path PIX/PXB/PHB/NODE/SYS), and the paper's four NUMA effects
(Li et al., TPDS 2020, Sec. 3) stated as hypotheses this topology can or cannot test.

The effects: (1) topology: pairs without a direct NVLink are slower than NVLink neighbours;
(2) connectivity: pairs joined by more NVLinks are faster; (3) routing: traffic between pairs not
directly joined takes a longer path (more hops), with more latency; (4) PCIe anti-locality: with
P2P off, copies staged through the host can be slower for GPUs close on the PCIe tree than for
distant ones. (1)-(3) need pairs that differ in NVLink count or directness; (4) needs pairs that
differ in PCIe distance.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

import pandas as pd

PCIE = ("PIX", "PXB", "PHB", "NODE", "SYS")  # near to far on the PCIe tree (nvidia-smi's legend order)


@dataclass(frozen=True)
class Topology:
    """links[(i, j)]: the nvidia-smi link label between GPU i and GPU j (i != j)."""

    gpus: int
    links: dict
    source: str  # "nvidia-smi topo -m" or why it is absent

    def nvlinks(self, i: int, j: int) -> int:
        m = re.fullmatch(r"NV(\d+)", self.links.get((i, j), ""))
        return int(m.group(1)) if m else 0

    def pcie_distance(self, i: int, j: int) -> int | None:
        label = self.links.get((i, j), "")
        return PCIE.index(label) if label in PCIE else None


def parse_topo(text: str) -> Topology:
    """The GPU x GPU part of ``nvidia-smi topo -m``'s matrix (NIC rows and affinity columns dropped)."""
    lines = [ln.rstrip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()]
    header = next((ln for ln in lines if re.match(r"^\s+GPU0\b", ln)), None)
    if header is None:
        raise ValueError("no GPU header line (GPU0 GPU1 ...) in the topology text")
    cols = [c.strip() for c in header.strip().split("\t") if c.strip()]
    gpu_cols = [c for c in cols if re.fullmatch(r"GPU\d+", c)]
    links = {}
    for ln in lines:
        cells = [c.strip() for c in ln.split("\t")]
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        i = int(cells[0][3:])
        for col, label in zip(cols, cells[1:], strict=False):  # rows may end early (empty affinity cells)
            if col in gpu_cols and col != cells[0]:
                links[(i, int(col[3:]))] = label
    return Topology(gpus=len(gpu_cols), links=links, source="nvidia-smi topo -m")


def visible(topo: Topology, physical: list[int]) -> Topology:
    """The topology of the GPUs this process sees, renumbered as CUDA numbers them (CUDA device d
    is nvidia-smi's GPU physical[d])."""
    missing = [g for g in physical if g >= topo.gpus]
    if missing:
        raise ValueError(f"GPUs {missing} are not in the {topo.gpus}-GPU topology")
    links = {(a, b): topo.links[(i, j)] for a, i in enumerate(physical) for b, j in enumerate(physical) if a != b}
    return Topology(gpus=len(physical), links=links, source=f"{topo.source}, GPUs {physical}")


def physical_ids(count: int, env: str | None) -> list[int]:
    """nvidia-smi's indices of CUDA devices 0..count-1 from CUDA_VISIBLE_DEVICES (unset: the
    first ``count``); UUID lists are not resolved and raise."""
    if not env:
        return list(range(count))
    ids = [x.strip() for x in env.split(",") if x.strip()]
    if not all(x.isdigit() for x in ids):
        raise ValueError(f"CUDA_VISIBLE_DEVICES={env!r} is not a list of GPU indices")
    return [int(x) for x in ids[:count]]


def read_topology() -> tuple[Topology, str]:
    """This machine's topology and the raw text (empty Topology where nvidia-smi is missing)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return Topology(gpus=0, links={}, source="nvidia-smi not found"), ""
    text = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=60).stdout
    return parse_topo(text), text


def pair_table(topo: Topology) -> pd.DataFrame:
    return pd.DataFrame([{"src": i, "dst": j, "link": lab, "nvlinks": topo.nvlinks(i, j),
                          "pcie_distance": topo.pcie_distance(i, j)} for (i, j), lab in sorted(topo.links.items())])


def _spread(values: pd.Series) -> float:
    return float(values.max() / values.min()) if len(values) and values.min() > 0 else float("nan")


def hypotheses(topo: Topology, pairs: pd.DataFrame, margin: float = 1.1) -> pd.DataFrame:
    """One row per NUMA effect: whether this topology can test it and, where it can, the verdict
    from ``pairs`` (per ordered GPU pair: src, dst, uni_gbps (P2P on, 1 GiB), off_gbps (P2P off),
    latency_us). An effect holds where the faster group beats the slower by ``margin``."""
    nv = {(i, j): topo.nvlinks(i, j) for (i, j) in topo.links}
    counts = sorted(set(nv.values()))
    direct = [p for p, c in nv.items() if c > 0]
    indirect = [p for p, c in nv.items() if c == 0]
    pcie = {p: topo.pcie_distance(*p) for p in topo.links if topo.pcie_distance(*p) is not None}
    by = pairs.set_index(["src", "dst"]) if len(pairs) else pairs

    def mean(col: str, sel) -> float:
        rows = by.loc[[p for p in sel if p in by.index], col] if len(by) else pd.Series(dtype=float)
        return float(rows.mean()) if len(rows) else float("nan")

    rows = []
    if direct and indirect:
        a, b = mean("uni_gbps", direct), mean("uni_gbps", indirect)
        rows.append(("topology", "NVLink neighbours beat pairs without a direct NVLink", True,
                     f"{len(direct)} NVLink pairs, {len(indirect)} without", a / b, a / b >= margin))
    else:
        rows.append(("topology", "NVLink neighbours beat pairs without a direct NVLink", False,
                     "every pair has a direct NVLink" if direct else "no NVLink pairs", float("nan"), None))
    if len([c for c in counts if c > 0]) > 1:
        hi, lo = max(counts), min(c for c in counts if c > 0)
        a = mean("uni_gbps", [p for p, c in nv.items() if c == hi])
        b = mean("uni_gbps", [p for p, c in nv.items() if c == lo])
        rows.append(("connectivity", "pairs joined by more NVLinks are faster", True, f"NV{hi} vs NV{lo}", a / b,
                     a / b >= margin))
    else:
        rows.append(("connectivity", "pairs joined by more NVLinks are faster", False,
                     f"every NVLink pair has the same link count ({counts})", float("nan"), None))
    if direct and indirect:
        a, b = mean("latency_us", indirect), mean("latency_us", direct)
        rows.append(("routing", "pairs not directly joined see more latency (longer route)", True,
                     "latency of indirect over direct pairs", a / b, a / b >= margin))
    else:
        rows.append(("routing", "pairs not directly joined see more latency (longer route)", False,
                     "no pair needs an indirect route", float("nan"), None))
    if len(set(pcie.values())) > 1:
        near, far = min(pcie.values()), max(pcie.values())
        a = mean("off_gbps", [p for p, d in pcie.items() if d == far])
        b = mean("off_gbps", [p for p, d in pcie.items() if d == near])
        rows.append(("pcie_anti_locality", "with P2P off, PCIe-distant pairs copy faster than near ones", True,
                     f"{PCIE[far]} vs {PCIE[near]}", a / b, a / b >= margin))
    else:
        rows.append(("pcie_anti_locality", "with P2P off, PCIe-distant pairs copy faster than near ones", False,
                     "the matrix shows no PCIe path differences between pairs" if not pcie else
                     f"every pair has the same PCIe path ({PCIE[next(iter(pcie.values()))]})", float("nan"), None))
    uni = pairs["uni_gbps"] if len(pairs) else pd.Series(dtype=float)
    spread = _spread(uni)
    rows.append(("uniformity", "every ordered pair within 5% of the others (what a uniform topology predicts)",
                 len(uni) > 1, f"{len(uni)} ordered pairs", spread, (spread <= 1.05) if len(uni) > 1 else None))
    return pd.DataFrame(rows, columns=["effect", "hypothesis", "testable", "basis", "ratio", "holds"])
