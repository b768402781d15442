"""ScissionLite's experiment files run at smoke scale on the CPU (nets on synthetic CIFAR-shaped
splits, split on its record), their figures draw, and the split model keeps its invariants: latencies
by hand, a codec beyond the accuracy bound is never chosen, ScissionLite never loses to Scission, and
the ideal split bounds every headline."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from sim_smoke import REPO, chain  # noqa: E402

from conftest import prepared_splits  # noqa: E402

from repro.papers.scissionlite import split as splitmod  # noqa: E402
from repro.split import optimise  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scissionlite")
    (tmp / "data").mkdir()
    return chain(tmp, "scissionlite/nets", "scissionlite/split", inputs=prepared_splits(tmp / "data", 256, 128))


def test_nets_trains_codecs_at_split_points_and_times_both_processors(runs):
    result, fig = runs["nets"]
    acc, codecs, layers = result.tables["accuracy"], result.tables["codecs"], result.tables["layers"]
    assert set(acc["net"]) == {"resnet", "vgg", "densenet"} and set(acc["codec"]) == {"none", "tl", "int8"}
    coded = acc[acc["codec"] != "none"]
    assert (coded.groupby(["net", "split"]).size() == 2).all() and coded.groupby("net")["split"].nunique().min() >= 2
    base = acc[acc["codec"] == "none"].set_index("net")["top1"]
    assert np.allclose(coded["drop_points"], 100 * (coded["net"].map(base) - coded["top1"]))
    assert set(codecs["role"]) == {"device", "edge"} and (codecs[["down_s", "up_s"]] > 0).all().all()
    int8 = codecs[codecs["codec"] == "int8"]
    assert (int8["bytes"] == int8["plain_bytes"] // 4 + 8).all()  # a byte a value, an offset and a scale
    assert (codecs["bytes"] < codecs["plain_bytes"]).all() and (layers["time_s"] > 0).all()
    assert "stand-in" in result.tags["edge"] and "TX2" in result.tags["device_1"]
    assert fig is not None


def test_split_headlines_within_their_ceilings(runs):
    result, fig = runs["split"]
    m, points = result.metrics, result.tables["points"]
    for h in splitmod.HEADLINES:
        assert 1.0 <= m[h] <= m[f"{h}_ceiling"] + 1e-9 and m[f"{h}_drop_points"] <= 1.0
    wide = points.pivot_table(index=["net", "threads"], columns="method", values="latency_ms")
    assert (wide["scissionlite"] <= wide["scission"] + 1e-12).all() and (wide["int8"] <= wide["scission"] + 1e-12).all()
    assert (wide["scission"] <= wide[["device_only", "edge_only"]].min(axis=1) + 1e-12).all()
    assert (wide["ideal"] <= wide[["scission", "scissionlite", "int8"]].min(axis=1) + 1e-12).all()
    assert {"assumed_base", "assumed_min", "assumed_max"} <= set(m) and m["assumed_min"] <= m["vs_local"] <= m["assumed_max"]
    assert set(result.tables["curve"]["key"]) == {"assumed.device_slowdown", "bandwidth_mbps"}
    assert 0 < m["device_edge_ratio_min"] <= m["device_edge_ratio_max"]
    assert fig is not None


def _inputs(drop_tl: float = 0.5) -> splitmod.Inputs:
    """Two layers: the device's take 1 s and 10 s, the edge's 0.1 s each; 20000 bytes of input, 8000
    bytes cross split 1."""
    prof = optimise.Profile([1.0, 10.0], [0.1, 0.1], [0.0], [0.0], [20000, 8000, 10], [2], [0.9])
    codecs = pd.DataFrame([dict(net="n", split=1, codec="tl", threads=1, down_s=0.05, bytes=500, plain_bytes=8000,
                                up_s=0.02, drop_points=drop_tl),
                           dict(net="n", split=1, codec="int8", threads=1, down_s=0.01, bytes=2000, plain_bytes=8000,
                                up_s=0.01, drop_points=0.0)])
    return splitmod.Inputs({("n", 1): prof}, codecs)


A = splitmod.Assumed(device_slowdown=1.0, rtt_ms=100.0)
BW = 8000 / 1e6  # Mbit/s: 1 s per 1000 bytes


def test_split_latencies_by_hand():
    t = splitmod.evaluate(_inputs(), A, BW, max_drop_points=1.0).set_index("method")
    s = t["latency_ms"] / 1e3
    assert s["device_only"] == pytest.approx(11.0)
    assert s["edge_only"] == pytest.approx(20.0 + 0.1 + 0.2)
    assert s["scission"] == pytest.approx(1.0 + 8.0 + 0.1 + 0.1) and t.loc["scission", "split"] == 1
    assert s["scissionlite"] == pytest.approx(1.0 + 0.05 + 0.5 + 0.1 + 0.02 + 0.1)
    assert t.loc["scissionlite", "codec"] == "tl" and t.loc["scissionlite", "drop_points"] == 0.5
    assert s["int8"] == pytest.approx(1.0 + 0.01 + 2.0 + 0.1 + 0.01 + 0.1)
    assert s["ideal"] == pytest.approx(0.1 + 0.2)  # the input sent for free
    slow = splitmod.evaluate(_inputs(), splitmod.Assumed(device_slowdown=2.0, rtt_ms=100.0), BW, 1.0)
    assert slow.set_index("method").loc["scissionlite", "latency_ms"] / 1e3 == pytest.approx(
        2.0 + 0.1 + 0.5 + 0.1 + 0.02 + 0.1)
    h = splitmod.headline(splitmod.evaluate(_inputs(), A, BW, 1.0))
    assert h["vs_local"] == pytest.approx(11.0 / 1.77) and h["vs_scission"] == pytest.approx(9.2 / 1.77)
    assert h["vs_local_ceiling"] == pytest.approx(11.0 / 0.3) and h["device_edge_ratio_max"] == pytest.approx(11.0 / 0.2)


def test_a_codec_past_the_accuracy_bound_is_never_chosen():
    t = splitmod.evaluate(_inputs(drop_tl=1.5), A, BW, 1.0).set_index("method")
    assert t.loc["scissionlite", "codec"] == "none"
    assert t.loc["scissionlite", "latency_ms"] == t.loc["scission", "latency_ms"]


def test_ideal_bounds_every_headline_on_random_profiles():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(3, 9))
        prof = optimise.Profile(rng.uniform(1e-3, 1e-1, n), rng.uniform(1e-5, 1e-2, n), [1e-4], [1e-5],
                                rng.integers(100, 200_000, n + 1), [n], [0.9])
        splits = rng.choice(np.arange(1, n), size=min(3, n - 1), replace=False)
        codecs = pd.DataFrame([dict(net="n", split=int(s), codec=c, threads=1, down_s=rng.uniform(0, 1e-2),
                                    bytes=int(prof.bytes[s] / k), plain_bytes=int(prof.bytes[s]), up_s=rng.uniform(0, 1e-2),
                                    drop_points=rng.uniform(0, 2)) for s in splits for c, k in (("tl", 16), ("int8", 4))])
        a = splitmod.Assumed(rng.uniform(0.5, 50), rng.uniform(1, 50))
        h = splitmod.headline(splitmod.evaluate(splitmod.Inputs({("n", 1): prof}, codecs), a, rng.uniform(1, 100), 1.0))
        for k in splitmod.HEADLINES:
            assert 1.0 - 1e-12 <= h[k] <= h[f"{k}_ceiling"] + 1e-12


def test_claims_read_metrics_split_writes(runs):
    claims = yaml.safe_load((REPO / "config" / "claims" / "scissionlite.yaml").read_text())["claims"]
    assert [c["id"] for c in claims] == ["scl.vs_local", "scl.vs_scission"]
    for c in claims:
        assert c["kind"] == "model"
        for cond in [c["metric"], *c["also"], c["ceiling"]]:
            assert cond["experiment"].startswith("scissionlite/split") and cond["key"] in runs["split"][0].metrics
    tornado = {c["id"]: c["assumed"]["experiment"] for c in claims}
    assert tornado == {"scl.vs_local": "scissionlite/split", "scl.vs_scission": "scissionlite/split_vs_scission"}
