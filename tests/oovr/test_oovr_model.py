"""The OO-VR model: closed-form cases, determinism, mechanisms and parameter errors."""

import dataclasses
import math
import re
from pathlib import Path

import pytest
import yaml

from repro.experiment import Context, load_entry
from repro.papers.oovr import frame, model, plans
from repro.papers.oovr.experiment import OOVRParams
from repro.sim.curves import crossing
from repro.papers.oovr.scenes import SceneSpec, generate
from repro.papers.oovr.system import ARMS, ASSUMED, SOURCES, SystemParams
from repro.sim.params import ParamError

REPO = Path(__file__).resolve().parents[2]
SPEC = SceneSpec(name="t", objects=40, width=320, height=256, triangles_m=0.03, textures=20, sharing=1.2)


def sim(arm, system, spec=SPEC, seed=1):
    return frame.simulate(plans.build(generate(spec, seed), system, arm), system)


@pytest.mark.parametrize("arm", ARMS)
def test_one_gpm_compute_bound_is_work_over_throughput(arm):
    s = SystemParams(gpms=1, dram_gbps=math.inf, link_gbps=math.inf)
    scene = generate(SPEC, 1)
    views = 2 if arm in ("oo_app", "oovr") else 1  # a paired task runs both views' stages together
    work = sum(max(2 * scene.tris[o] / (s.tri_rate_g * 1e9), 2 * scene.frags[o] / (s.frag_rate_g * 1e9))
               if views == 2 else
               2 * max(scene.tris[o] / (s.tri_rate_g * 1e9), scene.frags[o] / (s.frag_rate_g * 1e9))
               for o in range(scene.n))
    r = sim(arm, s)
    assert r.remote_bytes == 0
    assert r.frame_s == pytest.approx(work, rel=1e-9)


def test_one_gpm_memory_bound_is_bytes_over_bandwidth():
    s = SystemParams(gpms=1, dram_gbps=1.0, tri_rate_g=1e9, frag_rate_g=1e9, cache_mb=0.0)
    scene = generate(SPEC, 1)
    p = plans.build(scene, s, "afr")
    nbytes = sum(sum(b for _, b, _ in t.reads) + t.fb_bytes for t in p.queues[0][0].tasks)
    assert sim("afr", s).frame_s == pytest.approx(nbytes / 1e9, rel=1e-6)


def _local(plan):
    for q in plan.queues:
        for b in q:
            for t in b.tasks:
                t.reads = [(k, n, plans.OWN) for k, n, _ in t.reads]
                t.fb_home = plans.OWN
    return plan


@pytest.mark.parametrize("topology", ["switch", "full"])
def test_infinite_links_remove_the_numa_penalty(topology):
    scene = generate(dataclasses.replace(SPEC, objects=120, width=640, height=512, triangles_m=0.1), 1)
    slow = SystemParams(topology=topology)
    fast = dataclasses.replace(slow, link_gbps=math.inf)
    local = frame.simulate(_local(plans.build(scene, fast, "sfr")), fast).frame_s
    numa_fast = frame.simulate(plans.build(scene, fast, "sfr"), fast).frame_s
    numa_slow = frame.simulate(plans.build(scene, slow, "sfr"), slow).frame_s
    assert numa_fast == pytest.approx(local, rel=0.10)  # only the owners' DRAM is left to share
    if topology == "switch":  # one 64 GB/s port per GPM: the remote three quarters of the traffic queue there
        assert numa_slow > 1.2 * local
    else:  # three 64 GB/s links per GPM carry this scene's remote traffic without a queue
        assert numa_slow == pytest.approx(numa_fast, rel=0.05)


def test_same_seed_same_result_other_seed_other_result():
    s = SystemParams()
    a = model.run(s, [SPEC], list(ARMS), 2, seed=5)
    b = model.run(s, [SPEC], list(ARMS), 2, seed=5)
    c = model.run(s, [SPEC], list(ARMS), 2, seed=6)
    assert a.equals(b)
    assert not a["frame_ms"].equals(c["frame_ms"])


def test_parallel_workers_give_the_serial_result():
    s = SystemParams()
    specs = [SPEC, dataclasses.replace(SPEC, name="u", objects=30)]
    assert model.run(s, specs, ["sfr", "oovr"], 1, 0, workers=2).equals(model.run(s, specs, ["sfr", "oovr"], 1, 0))


def test_sharing_batches_group_sharers_under_the_cap():
    s = SystemParams()
    scene = generate(dataclasses.replace(SPEC, objects=80, sharing=2.0), 3)
    groups = plans.sharing_batches(scene, s)
    assert sorted(o for g in groups for o in g) == list(range(scene.n))
    cost = [sum(plans.predicted_cost(scene, s, o) for o in g) for g in groups]
    total = sum(plans.predicted_cost(scene, s, o) for o in range(scene.n))
    assert max(c for c, g in zip(cost, groups) if len(g) > 1) <= total / (s.gpms * s.batches_per_gpm) + 1e-15
    assert len(groups) < scene.n  # sharers were merged


def test_oovr_balances_and_moves_less_data_than_the_split_frame_baseline():
    s = SystemParams()
    spec = dataclasses.replace(SPEC, objects=120, width=640, height=512, triangles_m=0.1)
    sfr, obj, app, oovr = (sim(a, s, spec) for a in ("sfr", "object", "oo_app", "oovr"))
    assert oovr.remote_bytes < 0.5 * sfr.remote_bytes
    assert oovr.imbalance <= app.imbalance + 1e-9
    assert oovr.compose_s < obj.compose_s  # distributed hardware composition vs one master in software
    assert oovr.frame_s < obj.frame_s


def test_every_system_parameter_is_cited_or_assumed():
    names = {f.name for f in dataclasses.fields(SystemParams)}
    assert set(SOURCES) | ASSUMED == names and not set(SOURCES) & ASSUMED
    text = (REPO / "config/experiment/oovr/scenes.yaml").read_text()
    for name in names:
        line = re.search(rf"^\s+{name}:.*$", text, re.M)
        assert line, f"{name} missing from scenes.yaml"
        assert ("assumed" in line.group(0)) == (name in ASSUMED), line.group(0)


@pytest.mark.parametrize("change,key", [
    ({"system": {"link_gbps": -64.0}}, "system.link_gbps"),
    ({"system": {"gpms": 0}}, "system.gpms"),
    ({"arms": ["sfr", "magic"]}, "arms[1]"),
    ({"system": {"topology": "ring"}}, "system.topology"),
    ({"frames": 0}, "frames"),
])
def test_bad_parameters_fail_at_start_with_the_key(change, key, tmp_path):
    p = OOVRParams(scenes=[SPEC])
    for field, value in change.items():
        setattr(p, field, dataclasses.replace(p.system, **value) if field == "system" else value)
    for entry in ("scenes", "link_sweep", "sensitivity_screen"):
        with pytest.raises(ParamError, match=re.escape(key)):
            load_entry(f"repro.papers.oovr.experiment:{entry}")(p, Context(out_dir=tmp_path))


def test_bad_scene_parameter_names_the_scene():
    with pytest.raises(ParamError, match=r"scenes\.t\.objects"):
        generate(dataclasses.replace(SPEC, objects=0), 0)


def test_crossing_interpolates_where_the_advantage_goes():
    assert crossing([10, 100], [2.0, 0.5], 1.0) == pytest.approx(10 ** (1 + 2 / 3))
    assert crossing([10, 100], [2.0, 1.5], 1.0) == math.inf


def test_experiment_files_compose_against_the_params():
    from omegaconf import OmegaConf
    base = yaml.safe_load((REPO / "config/experiment/oovr/scenes.yaml").read_text())
    for name in ("scenes", "link_sweep", "sensitivity"):
        cfg = yaml.safe_load((REPO / f"config/experiment/oovr/{name}.yaml").read_text())
        assert cfg.get("gpus", base["gpus"]) == 0
        for layer in (base["params"], base["smoke"], cfg.get("params", {}), cfg.get("smoke", {})):
            OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(OOVRParams), layer))
