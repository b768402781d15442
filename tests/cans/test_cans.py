"""CANS's two experiment files run at smoke scale on the CPU (edge_load, then bandit on its record),
their figures draw, and the mechanisms keep their invariants: LinUCB's bound by hand and against
mabwiser on a fixed stream, the simulation's latencies against repro.split.optimise, sharing a model
learning faster than one model per device, and regret that falls."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from sim_smoke import REPO, chain  # noqa: E402

from repro.papers.cans import bandit as bd  # noqa: E402
from repro.papers.cans.linucb import LinUCB, choose, disjoint, features  # noqa: E402
from repro.split import optimise  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cans")
    out = chain(tmp, "cans/edge_load", "cans/bandit", input_name="edge_load")
    out["surfaces"] = bd.read_surfaces(tmp / "edge_load" / "record.json", 6)
    return out


def test_edge_load_measures_device_and_every_client_count(runs):
    result, fig = runs["edge_load"]
    layers = result.tables["layers"]
    assert set(layers["role"]) == {"device", "edge"} and set(layers["net"]) == {"alexnet", "resnet"}
    assert sorted(layers.loc[layers["role"] == "edge", "clients"].unique()) == [1, 2, 4]
    per = layers.groupby(["net", "role", "clients"])["unit"].apply(lambda u: sorted(u) == list(range(len(u))))
    assert per.all()  # every count has every unit once
    sizes = layers.groupby(["net", "role", "clients"]).size().groupby("net").nunique()
    assert (sizes == 1).all() and (layers["time_s"] > 0).all()
    assert (layers.groupby(["net", "role", "clients"])["kind"].last() == "head").all()
    assert "stand-in" in result.tags["edge"] and fig is not None


@pytest.mark.gpu
def test_edge_under_load_on_the_gpu():
    from repro.papers.cans.edge_load import concurrent_times, units
    from repro.split import exits

    net = exits.build("resnet", depth=8, width=4)
    for clients in (1, 3):
        times = concurrent_times(net, "cuda", clients, warmup=2, repeats=5)
        assert len(times) == len(units(net)) and min(times) > 0


def test_surfaces_interpolate_and_extend_the_client_counts(runs):
    net = runs["surfaces"][("alexnet", 1)]
    assert net.edge.shape == (6, net.L) and net.X.shape == (net.L, 5) and len(net.bytes) == net.L + 1
    assert np.all(np.diff(net.edge, axis=1) <= 0)  # the edge's part shrinks as the split moves right
    np.testing.assert_allclose(net.edge[2], (net.edge[1] + net.edge[3]) / 2)  # 3 clients: halfway between 2 and 4
    np.testing.assert_allclose(net.edge_at(99), net.edge[-1])


def test_world_latency_is_the_substrate_latency_with_the_edge_alone(runs):
    layers = runs["edge_load"][0].tables["layers"]
    a = bd.Assumed(devices_per_type=1, horizon=8)
    world = bd.build_world(runs["surfaces"], bd._types(), a, bd.BanditParams(), seed=3)
    for i in range(world.n):
        ty = bd._types()[world.kind[i]]
        rows = layers[layers["net"] == ty["net"]]
        dev = rows[rows["role"] == "device"].sort_values("unit")["time_s"].to_numpy() * ty["slowdown"]
        edge = rows[(rows["role"] == "edge") & (rows["clients"] == 1)].sort_values("unit")["time_s"].to_numpy()
        p = optimise.Profile(dev[:-1], edge[:-1], [dev[-1]], [edge[-1]], world.nets[i].bytes, [len(dev) - 1], [1.0])
        bps = world.bps[0, i]
        np.testing.assert_allclose(world.all_splits(i, bps, 0), optimise.latency(p, bps, world.rtt[i])[0], rtol=1e-9)


def test_forced_sampling_frees_a_learner_stuck_on_the_device(runs, monkeypatch):
    """A warm start that prices every offloading split far above the device's own time keeps a learner
    on the device for good: it observes nothing there. With forced
    sampling it offloads once after every ``forced_after`` device-only runs, so it keeps observing."""
    a = bd.Assumed(devices_per_type=1, horizon=60)
    world = bd.build_world(runs["surfaces"], bd._types(), a, bd.BanditParams(), seed=3)
    real = world.offload

    def pessimistic(i, s, bps, clients):  # the warm start's offline observations: 100x the online delay
        return 100.0 * real(i, s, bps, clients)
    monkeypatch.setattr(world, "offload", pessimistic)
    device_only = np.array([k[-1] for k in world.known])
    stuck, _ = bd.simulate(world, "cans", 1.0, 1.0, warm=5, forced_after=0)
    assert np.allclose(stuck, device_only)  # never left the device
    freed, _ = bd.simulate(world, "cans", 1.0, 1.0, warm=5, forced_after=3)
    offloaded = ~np.isclose(freed, device_only)
    for i in range(world.n):  # at most three device-only decisions in a row, then one offload
        runs_of_local = np.diff(np.flatnonzero(np.r_[True, offloaded[:, i], True])) - 1
        assert runs_of_local.max() <= 3 and offloaded[:, i].sum() >= 60 // 4 - 1


def test_bandit_headlines_and_invariants(runs):
    result, fig = runs["bandit"]
    m, steps = result.metrics, result.tables["steps"]
    assert set(steps["policy"]) == set(bd.POLICIES) and (steps["regret_ms"] >= -1e-9).all()
    mean = steps.groupby("policy")["latency_ms"].mean()
    assert m["latency_reduction_pct"] == pytest.approx(100 * (1 - mean["cans"] / mean["ans"]))
    assert m["oracle_reduction_vs_ans_pct"] == pytest.approx(100 * (1 - mean["oracle"] / mean["ans"]))
    assert m["mabwiser_choice_match"] == 1.0 and m["mabwiser_regret_ours_ms"] == pytest.approx(m["mabwiser_regret_theirs_ms"])
    assert m["assumed_min"] <= m["latency_reduction_pct"] <= m["assumed_max"] and m["assumed_parameters"] == 8
    assert fig is not None


def test_lcb_by_hand_and_the_known_device_arm():
    model = LinUCB(2, alpha=2.0, l2_lambda=1.0)
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    model.update(X[0], 4.0)  # A = diag(2, 1), b = (4, 0)
    np.testing.assert_allclose(model.lcb(X), [2.0 - 2.0 * np.sqrt(0.5), 0.0 - 2.0])
    assert choose(np.array([0.0, 0.0, 1.0]), model, X) == 1  # the unexplored arm is the most optimistic
    assert choose(np.array([0.0, 0.0, -5.0]), model, X) == 2  # the device-only arm's known time wins
    np.testing.assert_array_equal(disjoint(np.array([1.0, 2.0]), 1, 3), [0, 0, 1, 2, 0, 0])


def test_features_by_hand():
    X = features(np.array([4e6, 2e6, 1e6]), ["conv", "relu", "head"], np.array([3e9, 1e9, 2e9]))
    np.testing.assert_allclose(X, [[4.0, 1 / 3, 2 / 3, 6.0, 1.0], [2.0, 0.0, 2 / 3, 3.0, 1.0]])


def _toy_world(devices: int, steps: int, seed: int) -> bd.World:
    """Identical devices whose best split is the last layer's (the first tensors are large: sending
    them costs 40-160 ms, running everything on the device 15 ms, splitting after layer 3 about 13)."""
    rng = np.random.default_rng(seed)
    L = 4
    device = np.full(L + 1, 3e-3)
    sizes = np.array([200e3, 100e3, 50e3, 2e3, 2e3])
    edge = np.tile(np.cumsum(np.full(L + 1, 2e-4)[::-1])[::-1][:-1], (devices, 1)) * np.arange(1, devices + 1)[:, None] ** 0.2
    net = bd.Net(device, sizes, edge, features(sizes, ["conv"] * L + ["head"], np.full(L + 1, 1e8)))
    known = np.append(np.concatenate([[0.0], np.cumsum(device[:-1])])[:L], device.sum())
    bps = 10e6 * np.exp(rng.normal(0, 0.2, (steps, devices)))
    return bd.World([0] * devices, [net] * devices, [known] * devices, np.full(devices, 2e-3), np.full(devices, 10e6), bps,
                    np.array([rng.permutation(devices) for _ in range(steps)]))


def test_sharing_a_model_learns_faster_than_one_per_device_and_regret_falls():
    world = _toy_world(devices=8, steps=120, seed=1)
    shared, _ = bd.simulate(world, "fedlinucb_no_warm_start", alpha=1.0, l2=1.0, warm=0)
    alone, regret_alone = bd.simulate(world, "ans", alpha=1.0, l2=1.0, warm=0)
    assert shared.mean() < alone.mean()
    assert regret_alone[-30:].mean() < regret_alone[:30].mean()
    oracle, regret = bd.simulate(world, "oracle", alpha=1.0, l2=1.0, warm=0)
    assert oracle.mean() <= min(shared.mean(), alone.mean()) and regret.min() >= 0


def test_mabwiser_makes_our_choices_on_a_fixed_stream():
    world = _toy_world(devices=1, steps=150, seed=2)
    got = bd.mabwiser_check(world.nets[0], world.known[0], 2e-3, world.bps[:, 0], alpha=1.5, l2=1.0)
    assert got["mabwiser_choice_match"] == 1.0
    assert got["mabwiser_regret_ours_ms"] == pytest.approx(got["mabwiser_regret_theirs_ms"])


def test_claims_read_metrics_bandit_writes(runs):
    claims = yaml.safe_load((REPO / "config" / "claims" / "cans.yaml").read_text())["claims"]
    assert [c["id"] for c in claims] == ["cans.latency"] and claims[0]["kind"] == "model"
    c = claims[0]
    metrics = runs["bandit"][0].metrics
    for cond in [c["metric"], *c["also"], c["ceiling"]]:
        assert cond["experiment"] == "cans/bandit" and cond["key"] in metrics
    assert c["assumed"]["experiment"] == "cans/bandit"
    assert yaml.safe_load((REPO / "config" / "experiment" / "cans" / "bandit.yaml").read_text())["params"]["target"] == c["target"]
