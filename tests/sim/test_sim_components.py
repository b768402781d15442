"""repro.sim components against closed-form cases."""

import math

import numpy as np
import pytest
import simpy

from repro.sim.cache import BufferCache
from repro.sim.compositor import Compositor
from repro.sim.engine import CountingEnvironment, pool_map
from repro.sim.gpu import NUMASystem
from repro.sim.memory import Port
from repro.sim.network import BandwidthTrace, Network, NetworkProfile, make_trace
from repro.sim.params import ParamError
from repro.sim.sensitivity import curve, screen


def run(env, gen):
    proc = env.process(gen)
    env.run()
    return proc.value


def test_port_prices_bytes_by_bandwidth_plus_latency():
    env = simpy.Environment()
    port = Port(env, bandwidth=1e9, latency=1e-6)
    run(env, port.transfer(1e6))
    assert env.now == pytest.approx(1e-3 + 1e-6)


def test_port_shares_bandwidth_between_concurrent_users():
    env = simpy.Environment()
    port = Port(env, bandwidth=1e9)
    for _ in range(4):
        env.process(port.transfer(1e6))
    env.run()
    assert env.now == pytest.approx(4e-3)
    assert port.bytes == 4e6


def test_infinite_bandwidth_takes_no_time():
    env = simpy.Environment()
    run(env, Port(env, bandwidth=math.inf).transfer(1e12))
    assert env.now == 0


@pytest.mark.parametrize("topology,expected", [("switch", 3 * 1e6 / 1e9), ("full", 1e6 / 1e9)])
def test_remote_reads_are_priced_by_the_topology(topology, expected):
    # three owners each send 1 MB to GPM 0 at once: a switch has one ingress port, full has three links
    env = CountingEnvironment()
    numa = NUMASystem(env, 4, memory_bandwidth=math.inf, link_bandwidth=1e9, topology_kind=topology)
    run(env, numa.read_spread(0, {1: 1e6, 2: 1e6, 3: 1e6}))
    assert env.now == pytest.approx(expected)
    assert numa.remote_bytes == pytest.approx(3e6)
    assert env.events > 0


def test_remote_read_is_bounded_by_the_owners_memory():
    env = simpy.Environment()
    numa = NUMASystem(env, 2, memory_bandwidth=1e8, link_bandwidth=1e9)
    run(env, numa.read(0, 1, 1e6))
    assert env.now == pytest.approx(1e-2)


def test_cache_hits_what_is_resident_and_evicts_lru():
    c = BufferCache(capacity=10)
    assert c.read("a", 6) == 6
    assert c.read("a", 4) == 0
    assert c.read("a", 8) == 2
    assert c.read("b", 5) == 5  # evicts a
    assert c.read("a", 8) == 8
    assert c.read("huge", 50) == 50 and "huge" not in c.resident


def test_compositor_waits_for_all_parts():
    env = simpy.Environment()
    comp = Compositor(env)
    parts = [env.timeout(1.0), env.timeout(3.0)]
    run(env, comp.compose(parts, 0.5))
    assert env.now == pytest.approx(3.5)


def test_constant_network_gives_the_analytic_latency():
    profile = NetworkProfile("const", mean_mbps=100, latency_ms=5)
    env = simpy.Environment()
    net = Network(env, profile, make_trace(profile, 1.0, seed=0), seed=0)
    run(env, net.send(250_000))
    assert env.now == pytest.approx(8 * 250_000 / 100e6 + 5e-3)


def test_drops_cost_a_timeout_and_a_resend():
    profile = NetworkProfile("lossy", mean_mbps=100, drop_rate=0.5, segment_bytes=1000, rto_ms=10)
    env = simpy.Environment()
    net = Network(env, profile, make_trace(profile, 1.0, seed=0), seed=1)
    run(env, net.send(100_000))
    wire = 8 * 1000 / 100e6
    assert net.drops > 0
    assert env.now == pytest.approx(net.segments * wire + net.drops * 10e-3)


def test_trace_is_seeded_and_has_the_profiles_mean():
    p = NetworkProfile("wifi", mean_mbps=200, cv=0.4, corr_s=0.5, step_s=0.01)
    a, b = make_trace(p, 200.0, seed=3), make_trace(p, 200.0, seed=3)
    assert np.array_equal(a.bps, b.bps)
    assert not np.array_equal(a.bps, make_trace(p, 200.0, seed=4).bps)
    assert a.mean_bps == pytest.approx(200e6, rel=0.1)
    assert BandwidthTrace(np.array([1.0, 2.0]), 1.0).at(5.0) == 2.0


@pytest.mark.parametrize("kwargs,key", [({"mean_mbps": -1}, "mean_mbps"), ({"mean_mbps": 1, "drop_rate": 1.0}, "drop_rate"),
                                        ({"mean_mbps": 1, "jitter_ms": -2}, "jitter_ms")])
def test_bad_network_parameters_name_the_key(kwargs, key):
    with pytest.raises(ParamError, match=key):
        NetworkProfile("n", **kwargs).check()


def test_bad_component_parameters_name_the_key():
    env = simpy.Environment()
    with pytest.raises(ParamError, match="bandwidth"):
        Port(env, bandwidth=-5)
    with pytest.raises(ParamError, match="gpms"):
        NUMASystem(env, 0, 1e9, 1e9)
    with pytest.raises(ParamError, match="topology"):
        NUMASystem(env, 2, 1e9, 1e9, topology_kind="ring")


def test_environment_counts_processed_events():
    env = CountingEnvironment()
    for _ in range(10):
        env.process((lambda: (yield env.timeout(1)))())
    env.run()
    assert env.events >= 20


def test_pool_map_gives_the_builtin_maps_result():
    with pool_map(2) as mapper:
        assert list(mapper(abs, [-1, 2, -3])) == [1, 2, 3]
    with pool_map(1) as mapper:
        assert mapper is map


def test_screen_flags_parameters_that_move_the_headline():
    def headline(over):
        a = over.get("a", 1.0)
        b = over.get("b", 1.0)
        return {"y": a * (1 + 0.01 * b), "_n": 1.0}

    df, base = screen(headline, {"a": 1.0, "b": 1.0}, ["a", "b"], [0.5, 2.0])
    flags = df.groupby("key")["sensitive"].first()
    assert base["y"] == pytest.approx(1.01)
    assert bool(flags["a"]) and not bool(flags["b"])
    assert "_n_rel" not in df.columns
    c = curve(headline, [("a", 3.0)])
    assert c["y"].iloc[0] == pytest.approx(3.03)
