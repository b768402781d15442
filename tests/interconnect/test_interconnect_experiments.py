"""The interconnect experiments on the CPU: collectives across 2 gloo processes end to end (the
CPU stand-in, labelled CPU), every experiment file at both scales, sizes, GPU-count errors and
the figures on synthetic tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from repro import layout
from repro.experiment import Context, load_entry
from repro.papers.interconnect import figures
from repro.papers.interconnect.collectives import iterations
from repro.papers.interconnect.experiment import CollectiveParams
from repro.papers.interconnect.p2p import sizes

CONFIGS = Path(__file__).resolve().parents[2] / "config" / "experiment" / "interconnect"


def test_collectives_on_two_gloo_processes(tmp_path):
    spec = load_entry("repro.papers.interconnect.experiment:collectives")
    p = CollectiveParams(sizes_bytes=[8, 3000], warmup=1, min_iters=2, max_iters=3, timeout_s=200)
    r = spec(p, Context(out_dir=tmp_path, device="cpu"))
    df = r.tables["points"]
    assert r.metrics["wrong"] == 0 and r.metrics["ranks"] == 2 and r.tags["mode"] == "CPU"
    assert set(df["op"]) == set(p.ops) and set(df["bytes"]) == {8, 3000}  # 3000 B = 750 floats, even
    ar = df[(df["op"] == "all_reduce") & (df["bytes"] == 3000)].iloc[0]
    assert ar["busbw_gbps"] == pytest.approx(ar["algbw_gbps"])  # 2 ranks: 2(n-1)/n = 1
    ag = df[(df["op"] == "all_gather") & (df["bytes"] == 3000)].iloc[0]
    assert ag["busbw_gbps"] == pytest.approx(ag["algbw_gbps"] / 2)
    fig_dir = tmp_path / "run"
    fig_dir.mkdir()
    df.to_csv(fig_dir / "points.csv", index=False)
    assert len(figures.collectives(fig_dir).axes) == 2


def test_unknown_collective(tmp_path):
    spec = load_entry("repro.papers.interconnect.experiment:collectives")
    with pytest.raises(ValueError, match="unknown collective"):
        spec(CollectiveParams(ops=["gather"], sizes_bytes=[8]), Context(out_dir=tmp_path, device="cpu"))


def test_one_cpu_process_is_refused(tmp_path):
    spec = load_entry("repro.papers.interconnect.experiment:collectives")
    with pytest.raises(ValueError, match="at least 2 ranks"):
        spec(CollectiveParams(cpu_processes=1), Context(out_dir=tmp_path, device="cpu"))


def _merged(path: Path) -> dict:
    """An experiment file with its base merged under it, as Hydra composes it."""
    return layout.experiment_file(f"interconnect/{path.stem}")


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_experiment_files_validate(path):
    cfg = _merged(path)
    assert cfg["name"] == path.stem and cfg["paper"] == "interconnect" and isinstance(cfg["gpus"], int)
    spec = load_entry(cfg["entry"])
    for layer in ({}, cfg.get("smoke") or {}):
        params = spec.params(**{**cfg["params"], **layer})
        assert max(params.sizes_bytes) <= 1 << 30 and min(params.sizes_bytes) >= 8


def test_gpu_counts_of_the_files():
    counts = {p.stem: _merged(p)["gpus"] for p in CONFIGS.glob("*.yaml")}
    assert counts == {"p2p": 2, "p2p_4": 4, "host_device": 1, "collectives": 2, "collectives_4": 4}


def test_sizes_and_iterations():
    assert sizes(8, 1 << 30, 4)[:3] == [8, 32, 128] and sizes(8, 1 << 30, 4)[-1] == 1 << 30
    assert sizes(8, 8, 2) == [8]
    with pytest.raises(ValueError, match="factor >= 2"):
        sizes(8, 64, 1)
    p = CollectiveParams()
    assert iterations(1 << 30, p) == 16 and iterations(8, p) == p.max_iters


def test_p2p_and_host_device_figures(tmp_path):
    rows = [{"src": s, "dst": 1 - s, "method": m, "direction": d, "p2p": o, "bytes": b, "gbps": b / 1e6,
             "time_us": 1.0} for s in (0, 1) for m in ("ce", "sm") for d in ("uni", "bi") for o in ("on", "off")
            for b in (8, 1 << 20)]
    d = tmp_path / "p2p"
    d.mkdir()
    pd.DataFrame(rows).to_csv(d / "points.csv", index=False)
    pd.DataFrame([{"src": 0, "dst": 1, "latency_us": 1.2, "local_latency_us": 0.6},
                  {"src": 1, "dst": 0, "latency_us": 1.3, "local_latency_us": 0.6}]).to_csv(d / "latency.csv", index=False)
    assert len(figures.p2p(d).axes) >= 3
    h = tmp_path / "hd"
    h.mkdir()
    pd.DataFrame([{"device": 0, "memory": m, "direction": x, "bytes": b, "gbps": 1.0} for m in ("pinned", "pageable")
                  for x in ("h2d", "d2h") for b in (8, 1024)]).to_csv(h / "points.csv", index=False)
    assert figures.host_device(h).axes


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="needs nvcc")
def test_copy_kernels_compile(tmp_path):
    from repro.kernels.build import build

    src = Path(__file__).resolve().parents[2] / "src" / "repro" / "papers" / "interconnect" / "kernels" / "gpuic_copy.cu"
    manifest = build(tmp_path, srcs=[src])
    assert manifest["status"] == "built" and manifest["kernels"]["gpuic_copy"]["entries"] == 2


def _fake_p2p_points(devices, p, kernels_dir, log):
    """What p2p.measure returns, for 2 GPUs: bandwidth = bytes / 2.5 ms (uni), twice that both ways."""
    rows = []
    for s, d in ((0, 1), (1, 0)):
        for method, direction, p2p in (("ce", "uni", "on"), ("ce", "bi", "on"), ("sm", "uni", "on"),
                                       ("sm", "bi", "on"), ("ce", "uni", "off"), ("ce", "bi", "off")):
            for b in p.sizes_bytes:
                gbps = b / 2.5e-3 / 1e9 * (2 if direction == "bi" else 1) * (0.1 if p2p == "off" else 1) * (1 + s / 100)
                rows.append({"src": s, "dst": d, "method": method, "direction": direction, "p2p": p2p, "bytes": b,
                             "reps": 1, "time_us": 3.0 if b == 8 else 2500.0, "gbps": gbps})
    lat = [{"src": 0, "dst": 1, "latency_us": 1.1, "local_latency_us": 0.5},
           {"src": 1, "dst": 0, "latency_us": 1.2, "local_latency_us": 0.5}]
    return rows, lat


def test_p2p_metrics_from_measured_points(tmp_path, monkeypatch):
    from repro.papers.interconnect import experiment as ex
    from repro.papers.interconnect import topology

    from test_topology import TWO_NV18

    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(ex.p2p_mod, "measure", _fake_p2p_points)
    monkeypatch.setattr(topology, "read_topology", lambda: (topology.parse_topo(TWO_NV18), TWO_NV18))
    monkeypatch.setattr(ex, "_gpu_name", lambda: "fake")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    p = ex.P2PParams(sizes_bytes=[8, 1 << 30])
    r = ex.p2p.fn(p, Context(out_dir=tmp_path, device="cuda", gpus=2))
    uni = (1 << 30) / 2.5e-3 / 1e9
    assert r.metrics["p2p_uni_ce_gbps"] == pytest.approx(uni)  # the slower pair
    assert r.metrics["p2p_bi_ce_gbps"] == pytest.approx(2 * uni)
    assert r.metrics["p2p_uni_frac_reference"] == pytest.approx(uni / 370.0)
    assert r.metrics["ce_small_copy_us"] == 3.0 and r.metrics["remote_latency_us"] == 1.2
    h = r.tables["hypotheses"].set_index("effect")
    assert not h.loc["connectivity", "testable"] and h.loc["uniformity", "holds"]
    assert r.tags["links"] == "NV18" and (tmp_path / "topology.txt").read_text() == TWO_NV18


def test_p2p_refuses_one_gpu(tmp_path, monkeypatch):
    from repro.papers.interconnect import experiment as ex

    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match="P2P needs at least 2 GPUs"):
        ex.p2p.fn(ex.P2PParams(), Context(out_dir=tmp_path, device="cuda", gpus=1))
    with pytest.raises(ValueError, match="holds 2 GPU\\(s\\) but 1 are visible"):
        ex.p2p.fn(ex.P2PParams(), Context(out_dir=tmp_path, device="cuda", gpus=2))
