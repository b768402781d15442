"""The scheduler model by hand: curves, sizing, each policy on small chains, the fewest-tiles search."""

import math

import numpy as np
import pytest

from repro.papers.adstile import scheduler as S
from repro.papers.adstile.workload import ChainSpec, Curve, variation, variation_quantile


def linear(work_s: float) -> Curve:
    """Latency work_s / k: perfect scaling."""
    return Curve([1, 2, 4, 8], [work_s / k for k in (1, 2, 4, 8)])


def test_curve_interpolates_extrapolates_and_is_monotone():
    c = Curve([8, 16], [2.0, 1.0])
    assert c(8) == pytest.approx(2.0) and c(16) == pytest.approx(1.0)
    assert c(12) == pytest.approx(1 / 0.75)          # throughput interpolated: 0.5 -> 1.0
    assert c(32) == pytest.approx(0.5)               # Amdahl fit 0 + 16/k beyond the points
    assert c(4) == pytest.approx(4.0)
    noisy = Curve([1, 2], [1.0, 5.0])                 # more tiles never slower
    assert noisy(2) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="positive"):
        Curve([1], [0.0])


def test_variation_stays_in_range_and_quantile_matches():
    f = variation(np.random.default_rng(0), 20000, 3.3, 4.0)
    assert f.min() >= 1.0 and f.max() <= 3.3
    assert np.quantile(f, 0.9) == pytest.approx(variation_quantile(0.9, 3.3, 4.0), rel=0.02)


def setup(chains, curves, mp):
    sizes = {k: (1e6, 1e5) for k in curves}
    return S.build_tasks(chains, curves, sizes), S.draw_factors(chains, mp, 0)


def test_sizing_by_hand():
    tasks = [S.Task(0, 0, "a", linear(8e-3), 0, 0), S.Task(0, 1, "b", linear(8e-3), 0, 0)]
    assert S.size_stages(tasks, 8e-3, 1.0, 8) == [2, 2]    # 4 + 4 ms
    assert S.size_domain(tasks, 8e-3, 1.0, 8) == 2         # both stages on 2 tiles, one after another
    assert S.size_stages(tasks, 1e-3, 1.0, 8) is None      # 2 ms at best


def two_stages_at_100hz(policy: str) -> S.Point:
    """Fewest tiles for one 100 Hz chain of two 8 ms-on-one-tile stages, 8 ms deadline, no variation."""
    chains = [ChainSpec("c", 100.0, ["a", "b"])]
    mp = S.ModelParams(vmax=1.0, horizon_s=0.1)
    tasks, f = setup(chains, {"a": linear(8e-3), "b": linear(8e-3)}, mp)
    return S.fewest_tiles(policy, chains, tasks, [8e-3], mp, f, 16)


def test_reservation_never_moves_and_meets_deadlines():
    pt = two_stages_at_100hz("reservation")
    assert pt.tiles == 4 and pt.stats.misses == 0 and pt.stats.reallocations == 0
    assert pt.stats.frames == 10 and pt.stats.jobs == 20


def test_work_conserving_pays_a_reallocation_per_start_and_share_change():
    chains = [ChainSpec("x", 100.0, ["a"]), ChainSpec("y", 100.0, ["b"])]
    mp = S.ModelParams(vmax=1.0, horizon_s=0.01, restart_us=100.0, migrate_gbps=1.0)
    tasks, f = setup(chains, {"a": linear(4e-3), "b": linear(4e-3)}, mp)
    st = S.simulate("work_conserving", chains, tasks, [10e-3, 10e-3], 4, mp, f, stop_on_miss=False)
    # both released at 0: each starts on 2 tiles, loading 1 MB at 1 GB/s + 100 us: 1.1 ms stalled
    assert st.reallocations == 2 and st.misses == 0
    assert st.stall_tile_s == pytest.approx(2 * 2 * 1.1e-3)
    assert st.waste_pct == pytest.approx(100 * 4.4e-3 / (4.4e-3 + 2 * 2 * 2e-3), rel=1e-6)


def test_ads_tile_domain_moves_nothing_when_it_fits():
    pt = two_stages_at_100hz("ads_tile")
    assert pt.tiles == 2 and pt.stats.misses == 0 and pt.stats.reallocations == 0


def test_ads_tile_borrows_elastic_tiles_for_a_long_frame():
    chains = [ChainSpec("c", 100.0, ["a"])]
    mp = S.ModelParams(vmax=3.0, variation_shape=1.0, quantile=0.0, horizon_s=0.01, restart_us=0.0, migrate_gbps=1e9)
    tasks, _ = setup(chains, {"a": linear(8e-3)}, mp)
    long = [np.array([[3.0]])]      # 24 ms of work on 1 tile; the domain is sized for 8 ms
    st = S.simulate("ads_tile", chains, tasks, [8e-3], 4, mp, long, stop_on_miss=False, domains=[1], elastic=3)
    assert st.reallocations == 1 and st.misses == 1   # checked at 8 ms: 3 more tiles cannot save it
    st = S.simulate("ads_tile", chains, tasks, [16e-3], 4, mp, long, stop_on_miss=False, domains=[1], elastic=3)
    assert st.reallocations == 1 and st.misses == 0   # 8 ms + (2/3 of 24 ms) / 4 = 12 ms


@pytest.mark.parametrize("policy", S.POLICIES)
def test_every_policy_finds_tiles_that_meet_every_deadline(policy):
    chains = [ChainSpec("c", 50.0, ["a", "b"]), ChainSpec("d", 100.0, ["b"])]
    mp = S.ModelParams(horizon_s=0.2, interference=1.1)
    tasks, f = setup(chains, {"a": linear(20e-3), "b": linear(10e-3)}, mp)
    deadlines = [15e-3, 8e-3]
    pt = S.fewest_tiles(policy, chains, tasks, deadlines, mp, f, 64)
    assert not math.isnan(pt.tiles) and pt.stats.misses == 0
    if pt.tiles > 1 and policy in ("fixed_priority", "edf", "work_conserving"):  # one tile fewer misses
        extra = {}
        if policy != "work_conserving":
            ks = [S.size_stages(t, d, mp.vmax * mp.interference, 64) for t, d in zip(tasks, deadlines)]
            extra = {"per_task": {(c, s): k for c, kc in enumerate(ks) for s, k in enumerate(kc)}}
        if pt.tiles - 1 >= max(extra.get("per_task", {0: 1}).values()):
            assert S.simulate(policy, chains, tasks, deadlines, int(pt.tiles) - 1, mp, f, **extra).misses


def test_unknown_dnn_in_a_chain_is_refused():
    with pytest.raises(ValueError, match="chains.c: no latency curve for DNN 'z'"):
        S.build_tasks([ChainSpec("c", 10.0, ["z"])], {"a": linear(1e-3)}, {"a": (0, 0)})
