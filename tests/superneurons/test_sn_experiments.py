"""The SuperNeurons experiments at smoke scale on the CPU (liveness estimates, real code paths),
the bounded depth search, and bad inputs."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch.nn as nn

from repro.experiment import Context
from repro.models import build_model
from repro.papers.superneurons.experiment import (DepthParams, PeakParams, ThroughputParams, conv_layers, depth,
                                           peak_memory, search_depth, throughput)
from repro.papers.superneurons.figures import depth as depth_figure
from repro.papers.superneurons.figures import peak_memory as peak_figure
from repro.papers.superneurons.figures import throughput as throughput_figure
from repro.papers.superneurons.figures import throughput_networks as throughput_networks_figure
from repro.papers.superneurons.probe import ProbeSpec, run_probe

TINY_BENCH = dict(batch_size=2, image_size=16, num_classes=10, steps=1, isolate=False)


def _fake_probe(limit):
    def probe(n):
        return {"fits": n <= limit, "reason": "ok" if n <= limit else "oom"}
    return probe


@pytest.mark.parametrize("limit", [4, 37, 300, 999])
def test_search_depth_finds_the_limit_within_resolution(limit):
    best, bound, probes = search_depth(_fake_probe(limit), 16, 4, 2000, 0.04, 60)
    assert bound == "exact" and best <= limit and limit - best <= max(1, 0.04 * best)
    assert len(probes) < 25


def test_search_depth_reports_ceiling_time_and_nothing_fits():
    assert search_depth(_fake_probe(10_000), 16, 4, 100, 0.04, 60)[:2] == (100, "ceiling")
    assert search_depth(_fake_probe(2), 16, 4, 100, 0.04, 60)[:2] == (None, "exact")
    best, bound, _ = search_depth(_fake_probe(500), 16, 4, 2000, 0.04, -1)
    assert bound == "time" and best == 16  # a lower bound, said so


def test_conv_layer_count_matches_the_model():
    for blocks in (4, 13, 40):
        model = build_model("bottleneck_resnet", blocks=blocks, width=2, num_classes=10)
        assert sum(isinstance(m, nn.Conv2d) for m in model.modules()) == conv_layers(blocks)


def test_probe_estimates_on_cpu_and_refuses_over_cap():
    kw = dict(model_kw={"blocks": 8, "width": 4}, num_classes=10, batch_size=2, image_size=16, steps=1)
    ok = run_probe(ProbeSpec(arm="ours", cap_bytes=1e9, **kw))
    assert ok["fits"] and not ok["measured"] and ok["est_dynamic_bytes"] > 0
    over = run_probe(ProbeSpec(arm="plain", cap_bytes=1e4, **kw))
    assert not over["fits"] and over["reason"] == "estimate over cap"
    host = run_probe(ProbeSpec(arm="save_on_cpu", host_fraction=1e-12, **kw))
    assert not host["fits"] and host["reason"].startswith("host memory")
    with pytest.raises(ValueError, match="unknown arm"):
        ProbeSpec(arm="magic")


def test_peak_memory_smoke(tmp_path):
    p = PeakParams(**{**TINY_BENCH, "image_size": None},
                   networks=[{"name": "t", "model": "bottleneck_resnet", "kw": {"blocks": [1, 1, 1, 1], "width": 4},
                              "image_size": 32}])
    result = peak_memory(p, Context(out_dir=tmp_path))
    table = result.tables["peak_memory"]
    assert list(table.config) == ["plain", "liveness", "pool", "recompute", "all", "all+wscap"]
    assert table.fits.all()
    assert "peak_dynamic_over_largest_layer" not in result.metrics  # CPU: estimates only, under est_ keys
    by = table.set_index("config")
    est = by.est_dynamic_bytes
    assert est["all"] < est["recompute"] < est["plain"]
    cap = by.loc["all+wscap", "workspace_cap_mib"]  # auto: 10% of the largest working set
    assert cap == max(1, int(0.1 * by.loc["all", "largest_working_set"] / 2**20))
    assert est["all+wscap"] == est["all"]  # no cuDNN here: no workspace counted
    assert pd.isna(by.loc["all", "workspace_cap_mib"]) and by.workspace_cap_env.isna().all()  # in-process
    assert "not applied" in result.tags["workspace_cap"] and result.tags["cudnn"] == "cudnn.benchmark off"
    m, ratio = result.metrics, by.est_dynamic_over_largest_layer
    assert m["est_peak_dynamic_over_largest_layer"] == pytest.approx(ratio["all+wscap"])  # the full runtime
    assert m["est_peak_dynamic_over_largest_layer_all"] == pytest.approx(ratio["all"])
    table.to_csv(tmp_path / "peak_memory.csv", index=False)
    peak_figure(tmp_path)


def test_depth_and_throughput_smoke(tmp_path):
    p = DepthParams(**TINY_BENCH, model_kw={"width": 4}, cap_gib=0.001, max_blocks=24, resolution=0.5,
                    start_blocks={"plain": 4, "checkpoint": 4, "save_on_cpu": 4, "ours": 8},
                    arm_budget_s={"plain": 60, "checkpoint": 60, "save_on_cpu": 60, "ours": 60})
    result = depth(p, Context(out_dir=tmp_path))
    m = result.metrics
    assert "depth_ratio" not in m and m["est_max_blocks_ours"] > m["est_max_blocks_plain"] > 0
    assert list(result.tables["depth"].bound) == ["exact", "exact", "exact", "ceiling"]
    for name, table in result.tables.items():
        table.to_csv(tmp_path / f"{name}.csv", index=False)
    depth_figure(tmp_path)
    (tmp_path / "record.json").write_text(json.dumps({"status": "ok", "metrics": m}))
    t = ThroughputParams(**TINY_BENCH, model_kw={"width": 4}, equal_depth_blocks=4)
    with pytest.raises(ValueError, match="inputs.depth"):
        throughput(t, Context(out_dir=tmp_path))
    out = tmp_path / "t"
    out.mkdir()
    run = throughput(ThroughputParams(**TINY_BENCH, model_kw={"width": 4}, equal_depth_blocks=4,
                                      checkpoint_depth_blocks=6), Context(out_dir=out))
    assert {"speed_vs_plain", "speed_vs_checkpoint"} <= set(run.metrics)
    table = run.tables["throughput"]
    assert set(table.blocks) == {4, 6}
    ours = table[table.arm == "ours"]  # what limited ours, per timed step
    diagnostics = ["recomputed_segments", "recomputed_units", "speed_working_set", "checkpoint_bytes",
                   "pool_budget_bytes", "offloaded_bytes_per_step", "prefetched_bytes_per_step",
                   "late_fetches_per_step", "inflight_wait_s_per_step", "sgd_host_s_per_step"]
    assert ours[diagnostics].notna().all().all() and table[table.arm == "plain"].recomputed_units.isna().all()
    run.tables["throughput"].to_csv(out / "throughput.csv", index=False)
    throughput_figure(out)


def test_peak_memory_reports_both_denominators(tmp_path, monkeypatch):
    """sn.peak with and without the workspace in the denominator (issue 45): the allocator's dynamic peak
    over the largest layer's working set (tensors only) and over its largest need (working set plus the
    measured backward transients, which hold cuDNN's workspace). Fake probes stand in for the GPU's."""
    measured = {  # network -> config -> dynamic bytes; largest working set 100 (a) / 200 (b), need 150 / 220
        "a": {"plain": 400, "all": 160}, "b": {"plain": 900, "all": 250}}
    ws, need = {"a": 100, "b": 200}, {"a": 150, "b": 220}

    def fake_probe(self, spec, ctx, cache=None):
        net = "a" if spec.model_kw.get("width") == 4 else "b"
        return {"fits": True, "reason": "ok", "dynamic_bytes": measured[net][spec.arm], "est_dynamic_bytes": 1,
                "largest_working_set": ws[net], "largest_working_set_ws": need[net]}

    monkeypatch.setattr(PeakParams, "probe", fake_probe)
    nets = [{"name": n, "model": "bottleneck_resnet", "kw": {"blocks": [1, 1, 1, 1], "width": w}, "image_size": 32}
            for n, w in (("a", 4), ("b", 8))]
    p = PeakParams(**{**TINY_BENCH, "image_size": None}, configs=["plain", "all"], networks=nets)
    m = peak_memory(p, Context(out_dir=tmp_path, device="cuda")).metrics
    assert m["peak_dynamic_over_largest_layer"] == pytest.approx(max(160 / 100, 250 / 200))  # largest over networks
    assert m["peak_dynamic_over_largest_layer_ws"] == pytest.approx(max(160 / 150, 250 / 220))
    assert m["ratio_all_a"] == pytest.approx(1.6) and m["ratio_all_a_ws"] == pytest.approx(160 / 150)


def test_throughput_rounds_alternate_order_and_take_medians(tmp_path, monkeypatch):
    """rounds=3: every arm measured three times, the second round in reverse order; the metrics
    take each arm's median and round_spread_max the largest max/min - 1 of one arm's rounds."""
    order, speeds = [], {"plain": [100, 130, 110], "ours": [90, 99, 120]}

    def fake_probe(self, spec, ctx, cache=None):
        order.append(spec.arm)
        return {"fits": True, "reason": "ok", "images_per_s": speeds[spec.arm][order.count(spec.arm) - 1]}

    monkeypatch.setattr(ThroughputParams, "probe", fake_probe)
    p = ThroughputParams(**TINY_BENCH, arms=["plain", "ours"], equal_depth_blocks=4, checkpoint_depth_blocks=4,
                         rounds=3)
    run = throughput(p, Context(out_dir=tmp_path))
    assert order == ["plain", "ours", "ours", "plain", "plain", "ours"]
    assert run.metrics["images_per_s_plain"] == 110 and run.metrics["images_per_s_ours"] == 99
    assert run.metrics["speed_vs_plain"] == pytest.approx(0.9)
    assert run.metrics["round_spread_max"] == pytest.approx(120 / 90 - 1)
    assert list(run.tables["throughput"]["round"]) == [1, 1, 2, 2, 3, 3]
    out = tmp_path / "fig"
    out.mkdir()
    run.tables["throughput"].to_csv(out / "throughput.csv", index=False)
    (out / "record.json").write_text(json.dumps({"status": "ok", "metrics": run.metrics}))
    throughput_figure(out)
    with pytest.raises(ValueError, match="rounds"):
        throughput(ThroughputParams(**TINY_BENCH, rounds=0, checkpoint_depth_blocks=4), Context(out_dir=tmp_path))


def test_an_interrupted_peak_memory_run_resumes_from_its_probe_cache(tmp_path, monkeypatch):
    """A killed run leaves its finished probes in probe_cache.jsonl; the rerun takes them (a cut last
    line, another code fingerprint or another spec is probed again), tags it and removes the file."""
    from repro.experiment import Context
    from repro.papers.superneurons import experiment as ex
    from repro.papers.superneurons.probe import ProbeCache, ProbeSpec, probe_fingerprint

    params = ex.PeakParams(isolate=False, batch_size=2, steps=1, num_classes=10, configs=["plain", "all"],
                           networks=[{"name": "resnet_tiny", "model": "bottleneck_resnet",
                                      "kw": {"blocks": [1, 1, 1, 1], "width": 4}, "image_size": 32}])
    ctx = Context(out_dir=tmp_path, device="cpu")
    calls = []
    real = ex.run_probe
    monkeypatch.setattr(ex, "run_probe", lambda spec: calls.append(spec.arm) or real(spec))
    first = ex.peak_memory(params, ctx)
    assert calls == ["plain", "all"] and "resumed_probes" not in first.tags
    assert not (tmp_path / ex.PROBE_CACHE).exists()  # finished: the cache is gone
    # a run killed after its first probe: that probe's line, a stale one and a cut one remain
    cache = ProbeCache(tmp_path / ex.PROBE_CACHE, probe_fingerprint("cpu"))
    spec = params.spec("plain", ctx, model="bottleneck_resnet", model_kw={"blocks": [1, 1, 1, 1], "width": 4},
                       momentum_on_host="no", pool_budget_bytes=params.pool_budget_bytes, workspace_cap_mib=None)
    spec.image_size = 32
    cache.put(spec, {**real(spec), "reason": "ok"})
    ProbeCache(tmp_path / ex.PROBE_CACHE, "other code").put(ProbeSpec(arm="all"), {"fits": True})
    with (tmp_path / ex.PROBE_CACHE).open("a") as f:
        f.write('{"key": "cut')
    calls.clear()
    second = ex.peak_memory(params, ctx)
    assert calls == ["all"]
    assert second.tags["resumed_probes"].startswith("1 probes")
    cols = ["network", "config", "fits", "est_dynamic_bytes", "largest_working_set"]
    assert second.tables["peak_memory"][cols].equals(first.tables["peak_memory"][cols])
    assert not (tmp_path / ex.PROBE_CACHE).exists()


NETS = [{"name": "a", "model": "bottleneck_resnet", "kw": {"blocks": [1, 1, 1, 1], "width": 4}, "image_size": 16},
        {"name": "b", "model": "vgg11", "kw": {"width": 0.0625}, "image_size": 16, "batch_size": 4}]


def test_throughput_networks_matches_ours_to_the_compiled_arms_peak(tmp_path, monkeypatch):
    """Networks mode: every arm per network, then ours with its budget at amb_0.5's measured dynamic
    peak; the matched speed and peak ratios per network and their minimum over the networks."""
    calls = []
    speed = {"plain": 100.0, "amb_0.5": 80.0, "ours": 90.0}

    def fake_probe(self, spec, ctx, cache=None):
        calls.append((spec.arm, spec.model, spec.batch_size, spec.budget_bytes))
        matched = spec.budget_bytes is not None
        ips = 110.0 if matched and spec.model == "vgg11" else (96.0 if matched else speed[spec.arm])
        dynamic = {"plain": 10e9, "amb_0.5": 6e9, "ours": 8e9}[spec.arm] if not matched else spec.budget_bytes * 0.95
        return {"fits": True, "reason": "ok", "images_per_s": ips, "dynamic_bytes": dynamic,
                "peak_bytes": dynamic + 1e9}

    monkeypatch.setattr(ThroughputParams, "probe", fake_probe)
    p = ThroughputParams(**TINY_BENCH, arms=["plain", "amb_0.5", "ours"], matched=["amb_0.5"], networks=NETS)
    run = throughput(p, Context(out_dir=tmp_path, device="cuda"))
    assert calls[:4] == [("plain", "bottleneck_resnet", 2, None), ("amb_0.5", "bottleneck_resnet", 2, None),
                         ("ours", "bottleneck_resnet", 2, None), ("ours", "bottleneck_resnet", 2, 6e9)]
    assert calls[-1] == ("ours", "vgg11", 4, 6e9)  # the entry's own batch size
    m = run.metrics
    assert m["speed_vs_amb_0.5_a"] == pytest.approx(90 / 80)
    assert m["speed_vs_amb_0.5_matched_a"] == pytest.approx(96 / 80)
    assert m["speed_vs_amb_0.5_matched_b"] == pytest.approx(110 / 80)
    assert m["speed_vs_amb_matched_min"] == pytest.approx(96 / 80)
    assert m["peak_ratio_vs_amb_0.5_matched_a"] == pytest.approx((0.95 * 6e9 + 1e9) / 7e9)
    table = run.tables["throughput"]
    assert list(table.matched_to.fillna("-")) == ["-", "-", "-", "amb_0.5"] * 2
    out = tmp_path / "fig"
    out.mkdir()
    table.to_csv(out / "throughput.csv", index=False)
    (out / "record.json").write_text(json.dumps({"status": "ok", "metrics": m}))
    throughput_networks_figure(out)


def test_throughput_networks_on_the_cpu_runs_today_arms_and_skips_matching(tmp_path):
    p = ThroughputParams(**TINY_BENCH, arms=["plain", "sac", "amb_0.5", "ours"], matched=["amb_0.5"],
                         networks=NETS[:1], warmup=1)
    run = throughput(p, Context(out_dir=tmp_path))
    assert {f"images_per_s_a_{a}" for a in p.arms} <= set(run.metrics)
    assert "speed_vs_amb_0.5_matched_a" not in run.metrics and "speed_vs_amb_matched_min" not in run.metrics
    assert "not run" in run.tags["matched_peak"]


@pytest.mark.parametrize("bad,match", [(dict(matched=["amb_0.5"]), "must be in arms"),
                                       (dict(matched=["ours"], arms=["ours"]), "unknown arm"),
                                       (dict(arms=["plain", "sack"]), "unknown arm")])
def test_throughput_networks_bad_arms(tmp_path, bad, match):
    kw = dict(arms=["plain", "ours"], networks=NETS[:1]) | bad
    with pytest.raises(ValueError, match=match):
        throughput(ThroughputParams(**TINY_BENCH, **kw), Context(out_dir=tmp_path))


def test_peak_memory_runs_the_layer_plan_by_name(tmp_path):
    """configs may name "layers" (issue 45's layer-granular plan: cheap layers recomputed, the rest
    offloaded); on the CPU its row holds the plan's estimate, under plain's."""
    p = PeakParams(**{**TINY_BENCH, "image_size": None}, configs=["plain", "all", "layers"],
                   networks=[{"name": "t", "model": "bottleneck_resnet", "kw": {"blocks": [1, 1, 1, 1], "width": 4},
                              "image_size": 32}])
    table = peak_memory(p, Context(out_dir=tmp_path)).tables["peak_memory"].set_index("config")
    assert table.fits.all()
    assert 0 < table.loc["layers", "est_dynamic_bytes"] < table.loc["plain", "est_dynamic_bytes"]
    with pytest.raises(ValueError, match="unknown"):
        peak_memory(PeakParams(**{**TINY_BENCH, "image_size": None}, configs=["layer"]), Context(out_dir=tmp_path))


def test_the_layer_plan_arm_runs_beside_ours(tmp_path):
    """ours_layer (issue 45): ours with the layer-granular plan, an arm the experiments take by name; on
    the CPU its throughput row is the code path, its plan says what the layer plan decided."""
    p = ThroughputParams(**TINY_BENCH, arms=["plain", "ours", "ours_layer"], networks=NETS[:1], warmup=1)
    run = throughput(p, Context(out_dir=tmp_path))
    assert {f"images_per_s_a_{a}" for a in p.arms} <= set(run.metrics)
    r = run_probe(ProbeSpec(arm="ours_layer", batch_size=2, image_size=16, num_classes=10, steps=1, warmup=1,
                            model="bottleneck_resnet", model_kw={"blocks": [1, 1, 1, 1], "width": 4}))
    assert r["fits"] and "layer_groups" in r["plan"] and r["plan"]["segments"] == 0
