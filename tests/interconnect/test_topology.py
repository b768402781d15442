"""Parsing nvidia-smi topo -m and the NUMA hypotheses on a uniform (NVSwitch-like) and a
DGX-1-like hybrid cube-mesh topology (samples written in nvidia-smi's layout for these tests)."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.papers.interconnect import topology as T

TWO_NV18 = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \tNV18\t0-47\t0\t\tN/A\n"
            "GPU1\tNV18\t X \t0-47\t0\t\tN/A\n"
            "NIC0\tPXB\tSYS\t\t\t\t\n\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n")
CUBE = ["X NV1 NV1 NV2 NV2 SYS SYS SYS", "NV1 X NV2 NV1 SYS NV2 SYS SYS", "NV1 NV2 X NV2 SYS SYS NV1 SYS",
        "NV2 NV1 NV2 X SYS SYS SYS NV1", "NV2 SYS SYS SYS X NV1 NV1 NV2", "SYS NV2 SYS SYS NV1 X NV2 NV1",
        "SYS SYS NV1 SYS NV1 NV2 X NV2", "SYS SYS SYS NV1 NV2 NV1 NV2 X"]
DGX1 = ("\t" + "\t".join(f"GPU{i}" for i in range(8)) + "\tCPU Affinity\n"
        + "".join(f"GPU{i}\t" + "\t".join(row.split()) + "\t0-19\n" for i, row in enumerate(CUBE)))


def test_parse_two_gpus():
    t = T.parse_topo(TWO_NV18)
    assert t.gpus == 2 and t.links == {(0, 1): "NV18", (1, 0): "NV18"} and t.nvlinks(0, 1) == 18


def test_parse_ignores_colour_codes_and_nics():
    t = T.parse_topo("\x1b[4m" + TWO_NV18.replace("NV18", "\x1b[0mNV18"))
    assert t.links[(0, 1)] == "NV18"


def test_parse_cube_mesh():
    t = T.parse_topo(DGX1)
    assert t.gpus == 8 and len(t.links) == 56
    assert t.nvlinks(0, 3) == 2 and t.nvlinks(0, 1) == 1 and t.nvlinks(0, 5) == 0 and t.pcie_distance(0, 5) == 4


def test_visible_gpus_are_renumbered():
    t = T.visible(T.parse_topo(DGX1), T.physical_ids(2, "4,7"))
    assert t.gpus == 2 and t.links == {(0, 1): "NV2", (1, 0): "NV2"}
    assert T.physical_ids(3, None) == [0, 1, 2]
    with pytest.raises(ValueError, match="not a list of GPU indices"):
        T.physical_ids(1, "GPU-1234")
    with pytest.raises(ValueError, match=r"GPUs \[9\] are not in the 8-GPU topology"):
        T.visible(T.parse_topo(DGX1), [0, 9])


def test_parse_rejects_other_text():
    with pytest.raises(ValueError, match="no GPU header"):
        T.parse_topo("No devices were found")


def _pairs(topo, bw, lat, off=10.0):
    return pd.DataFrame([{"src": i, "dst": j, "uni_gbps": bw(i, j), "off_gbps": off, "latency_us": lat(i, j)}
                         for (i, j) in topo.links])


def test_uniform_topology_tests_only_uniformity():
    t = T.parse_topo(TWO_NV18)
    h = T.hypotheses(t, _pairs(t, lambda i, j: 390.0 + i, lambda i, j: 1.0)).set_index("effect")
    assert not h.loc[["topology", "connectivity", "routing", "pcie_anti_locality"], "testable"].any()
    assert h.loc["uniformity", "testable"] and h.loc["uniformity", "holds"]


def test_cube_mesh_tests_three_effects():
    t = T.parse_topo(DGX1)
    h = T.hypotheses(t, _pairs(t, lambda i, j: 18.4 * t.nvlinks(i, j) or 8.0,
                               lambda i, j: 9.0 if t.nvlinks(i, j) else 25.0)).set_index("effect")
    assert h.loc["topology", "testable"] and h.loc["topology", "holds"]
    assert h.loc["connectivity", "holds"] and h.loc["connectivity", "ratio"] == pytest.approx(2.0)
    assert h.loc["routing", "holds"] and not h.loc["pcie_anti_locality", "testable"]
    assert not h.loc["uniformity", "holds"]


def test_a_flat_cube_mesh_refutes_connectivity():
    t = T.parse_topo(DGX1)
    h = T.hypotheses(t, _pairs(t, lambda i, j: 20.0, lambda i, j: 9.0)).set_index("effect")
    assert h.loc["connectivity", "testable"] and not h.loc["connectivity", "holds"]
