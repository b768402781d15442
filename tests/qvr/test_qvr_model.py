"""The Q-VR model: closed-form cases, the controller, determinism and parameter errors."""

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from repro.experiment import Context, load_entry
from repro.papers.qvr import model, pipeline
from repro.papers.qvr.controller import Controller, costs
from repro.papers.qvr.experiment import QVRParams
from repro.sim.curves import crossing
from repro.papers.qvr.foveation import layers
from repro.papers.qvr.system import ASSUMED, SOURCES, SystemParams
from repro.papers.qvr.workload import GameSpec
from repro.sim.network import NetworkProfile, make_trace
from repro.sim.params import ParamError

REPO = Path(__file__).resolve().parents[2]
GAME = GameSpec(name="g", geometry_ms=4.0, pixel_ms=30.0, cv=0.0)
CONST = NetworkProfile(name="const", mean_mbps=100.0, latency_ms=5.0)


def frames(arm, s=SystemParams(), game=GAME, net=CONST, duration=2.0, seed=0):
    lay = layers(s)
    return pipeline.simulate(arm, game, net, make_trace(net, duration, seed), s, lay, duration, seed, seed)[0], lay


def test_foveation_layers_are_consistent():
    s = SystemParams()
    lay = layers(s)
    assert lay.fovea_px[0] == 0 and lay.fovea_px[-1] == pytest.approx(lay.display_px)
    assert np.all(np.diff(lay.fovea_px) >= 0) and np.all(np.diff(lay.periphery_px) <= 0)
    assert lay.periphery_px[0] < 0.2 * lay.display_px  # acuity falls off: the periphery needs few pixels
    assert lay.quality(0, 1.0) == 1.0 and lay.quality(0, 0.5) < 1.0 and lay.quality(len(lay.e1) - 1, 0.5) == 1.0


def test_local_only_latency_is_work_over_the_gpu_plus_fixed_stages():
    s = SystemParams()
    got, _ = frames("local", s)
    expect = GAME.geometry_ms + GAME.pixel_ms + s.sw_compose_ms + s.tracking_display_ms
    assert all(f["latency_ms"] == pytest.approx(expect) for f in got)
    frame_ms = GAME.geometry_ms + GAME.pixel_ms + s.sw_compose_ms
    assert len(got) == pytest.approx(2.0 * 1e3 / frame_ms, abs=1)


def test_constant_network_gives_the_analytic_latency():
    s = dataclasses.replace(SystemParams(), inflight=1)
    got, lay = frames("static", s, duration=1.0)
    c = costs(lay, s, GAME.geometry_ms, GAME.pixel_ms, full_periphery=True)
    i = lay.index(s.static_fovea_deg)
    remote = (2 * CONST.latency_ms / 1e3 + c.server[i] + c.encode[i] + 8 * c.periphery_bytes[i] / 100e6 + c.decode[i])
    expect = (max(remote, c.local[i]) + s.sw_compose_ms / 1e3) * 1e3 + s.tracking_display_ms
    assert all(f["latency_ms"] == pytest.approx(expect, rel=1e-9) for f in got)


def test_controller_stays_local_when_the_network_is_useless_and_offloads_when_it_is_good():
    s = SystemParams()
    lay = layers(s)
    c = costs(lay, s, GAME.geometry_ms, GAME.pixel_ms)
    uca = lay.display_px / (s.uca_gpx_s * 1e9)
    assert Controller(s, 0.1e6, 0.2).choose(c, uca)[0] == len(lay.e1) - 1
    i, scale = Controller(s, 1e9, 1e-3).choose(c, uca)
    assert i < len(lay.e1) - 1 and scale == 1.0
    ctl = Controller(s, 1e6, 0.0)
    ctl.observe(1e6, 0.08, 0.01)  # 100 Mbit/s measured
    assert ctl.bw == pytest.approx(0.8 * 1e6 + 0.2 * 1e8) and ctl.lat == pytest.approx(0.002)


def test_qvr_beats_local_on_a_good_network():
    local, _ = frames("local")
    qvr, _ = frames("qvr")
    assert np.mean([f["latency_ms"] for f in qvr]) < 0.6 * np.mean([f["latency_ms"] for f in local])
    assert len(qvr) > len(local)


def test_same_seed_same_result_other_seed_other_result():
    s = SystemParams()
    nets = [NetworkProfile(name="wifi", mean_mbps=100, cv=0.4, latency_ms=3, jitter_ms=2, drop_rate=0.01)]
    games = [GameSpec(name="g", cv=0.2)]
    a = model.run(s, games, nets, ["static", "qvr"], 1.0, seed=3)[0]
    b = model.run(s, games, nets, ["static", "qvr"], 1.0, seed=3)[0]
    c = model.run(s, games, nets, ["static", "qvr"], 1.0, seed=4)[0]
    assert a.equals(b)
    assert not a["latency_ms"].equals(c["latency_ms"])


def test_every_system_parameter_is_cited_or_assumed():
    names = {f.name for f in dataclasses.fields(SystemParams)}
    assert set(SOURCES) | ASSUMED == names and not set(SOURCES) & ASSUMED
    text = (REPO / "config/experiment/qvr/traces.yaml").read_text()
    for name in names:
        line = re.search(rf"^\s+{name}:.*$", text, re.M)
        assert line, f"{name} missing from traces.yaml"
        assert ("assumed" in line.group(0)) == (name in ASSUMED), line.group(0)


@pytest.mark.parametrize("change,key", [
    ({"system": {"server_speedup": -1.0}}, "system.server_speedup"),
    ({"system": {"inflight": 0}}, "system.inflight"),
    ({"arms": ["local", "cloud"]}, "arms[1]"),
    ({"networks": [NetworkProfile(name="bad", mean_mbps=-5.0)]}, "network.bad.mean_mbps"),
    ({"games": [GameSpec(name="bad", pixel_ms=0.0)]}, "games.bad.pixel_ms"),
    ({"duration_s": 0.0}, "duration_s"),
])
def test_bad_parameters_fail_at_start_with_the_key(change, key, tmp_path):
    p = QVRParams()
    for field, value in change.items():
        setattr(p, field, dataclasses.replace(p.system, **value) if field == "system" else value)
    for entry in ("traces", "bandwidth_sweep", "sensitivity_screen"):
        with pytest.raises(ParamError, match=re.escape(key)):
            load_entry(f"repro.papers.qvr.experiment:{entry}")(p, Context(out_dir=tmp_path))


def test_rising_crossing():
    assert crossing([1, 10], [1.0, 2.0], 1.1, rising=True) == pytest.approx(10 ** 0.1)
    assert crossing([1, 10], [1.2, 2.0], 1.1, rising=True) == 0.0
    assert crossing([1, 10], [1.0, 1.05], 1.1, rising=True) == math.inf
    assert crossing([1, 10], [2.0, 1.0], 1.1) == pytest.approx(10 ** 0.9)


def test_experiment_files_compose_against_the_params():
    from omegaconf import OmegaConf
    base = yaml.safe_load((REPO / "config/experiment/qvr/traces.yaml").read_text())
    for name in ("traces", "bandwidth_sweep", "sensitivity"):
        cfg = yaml.safe_load((REPO / f"config/experiment/qvr/{name}.yaml").read_text())
        assert cfg.get("gpus", base["gpus"]) == 0
        for layer in (base["params"], base["smoke"], cfg.get("params", {}), cfg.get("smoke", {})):
            OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(QVRParams), layer))
