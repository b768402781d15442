"""Runs the OO-VR model over scenes and arms and reduces it to the paper's numbers.

``run`` simulates every (scene, arm, frame); ``summarize`` gives per scene and arm the mean frame
time, inter-GPM bytes and load imbalance, and the headline: OO-VR's speedup over the best earlier
distribution of each scene (the fastest of ``afr``, ``sfr``, ``object``), geometric mean over
scenes, and its inter-GPM traffic reduction against that same arm (mean over scenes).
"""

from __future__ import annotations

import dataclasses
import math
import numpy as np
import pandas as pd

from repro.papers.oovr import frame, plans
from repro.papers.oovr.scenes import SceneSpec, generate
from repro.papers.oovr.system import ARMS, EARLIER, SystemParams
from repro.sim.engine import pool_map
from repro.sim.params import choices, count

HEADLINE_ARMS = (*EARLIER, "oovr")


def _scene_seed(seed: int, index: int) -> int:
    return seed * 1000 + index


def run_scene(system: SystemParams, spec: SceneSpec, index: int, arms: list[str], frames: int, seed: int) -> list[dict]:
    rows = []
    for f in range(frames):
        scene = generate(spec, _scene_seed(seed, index), frame=f)
        for arm in arms:
            r = frame.simulate(plans.build(scene, system, arm), system)
            rows.append({"scene": spec.name, "arm": arm, "frame": f, "frame_ms": r.frame_s * 1e3,
                         "render_ms": r.render_s * 1e3, "compose_ms": r.compose_s * 1e3,
                         "remote_mb": r.remote_bytes / 1e6, "imbalance": r.imbalance, "stolen": r.stolen,
                         "events": r.events})
    return rows


def check(system: SystemParams, scenes: list[SceneSpec], arms: list[str], frames: int) -> None:
    """Every parameter, before any simulation: a bad one raises ParamError naming its key."""
    system.check()
    choices("arms", arms, ARMS)
    count("frames", frames)
    if not scenes:
        raise ValueError("scenes: at least one scene is needed")
    for spec in scenes:
        spec.check()


def run(system: SystemParams, scenes: list[SceneSpec], arms: list[str], frames: int, seed: int,
        workers: int = 1) -> pd.DataFrame:
    """One row per (scene, arm, frame); scenes run in ``workers`` processes."""
    check(system, scenes, arms, frames)
    jobs = [(system, spec, i, list(arms), frames, seed) for i, spec in enumerate(scenes)]
    with pool_map(min(workers, len(jobs))) as mapper:
        parts = list(mapper(_run_job, jobs))
    return pd.DataFrame([row for part in parts for row in part])


def _run_job(job):
    return run_scene(*job)


def summarize(rows: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    per = rows.groupby(["scene", "arm"], sort=False)[["frame_ms", "render_ms", "compose_ms", "remote_mb",
                                                        "imbalance"]].mean().reset_index()
    out, metrics = [], {}
    speedups, reductions, vs_sfr_traffic, vs = [], [], [], {a: [] for a in EARLIER}
    for scene, d in per.groupby("scene", sort=False):
        d = d.set_index("arm")
        earlier = [a for a in EARLIER if a in d.index]
        best = min(earlier, key=lambda a: d.loc[a, "frame_ms"]) if earlier else None
        for arm, r in d.iterrows():
            row = {"scene": scene, "arm": arm, **r.to_dict(), "best_earlier": best}
            if "sfr" in d.index:
                row["speedup_vs_sfr"] = d.loc["sfr", "frame_ms"] / r["frame_ms"]
                row["traffic_vs_sfr"] = r["remote_mb"] / d.loc["sfr", "remote_mb"] if d.loc["sfr", "remote_mb"] else math.nan
            out.append(row)
        if best and "oovr" in d.index:
            speedups.append(d.loc[best, "frame_ms"] / d.loc["oovr", "frame_ms"])
            b = d.loc[best, "remote_mb"]
            reductions.append(1 - d.loc["oovr", "remote_mb"] / b if b else math.nan)  # nan: afr moves no data
            if "sfr" in d.index:
                vs_sfr_traffic.append(1 - d.loc["oovr", "remote_mb"] / d.loc["sfr", "remote_mb"])
            for a in earlier:
                vs[a].append(d.loc[a, "frame_ms"] / d.loc["oovr", "frame_ms"])
    if speedups:
        metrics["speedup"] = float(np.exp(np.mean(np.log(speedups))))
        metrics["speedup_min"] = float(min(speedups))
        metrics["speedup_max"] = float(max(speedups))
        metrics["traffic_reduction"] = float(np.nanmean(reductions)) if np.isfinite(reductions).any() else math.nan
        if vs_sfr_traffic:
            metrics["traffic_reduction_vs_sfr"] = float(np.mean(vs_sfr_traffic))
        for a, v in vs.items():
            if v:
                metrics[f"speedup_vs_{a}"] = float(np.exp(np.mean(np.log(v))))
    table = pd.DataFrame(out)
    if "oovr" in set(table["arm"]):
        imb = table.set_index("arm").loc["oovr", "imbalance"]
        metrics["oovr_imbalance"] = float(np.mean(imb))
    return table, metrics


def with_overrides(system: SystemParams, scenes: list[SceneSpec], overrides: dict[str, float]):
    """Copies with ``system.<key>`` set to a value, or every scene's ``scene.<key>`` multiplied by a
    factor (scenes differ, so their fields are scaled together); integers stay integers."""
    sys_kw, scene_kw = {}, {}
    for key, value in overrides.items():
        where, _, name = key.partition(".")
        target = {"system": (system, sys_kw), "scene": (scenes[0], scene_kw)}.get(where)
        if target is None or not hasattr(target[0], name):
            raise KeyError(f"unknown parameter {key!r}")
        target[1][name] = value
    new_scenes = [dataclasses.replace(s, **{k: _like(getattr(s, k), getattr(s, k) * f) for k, f in scene_kw.items()})
                  for s in scenes]
    return (dataclasses.replace(system, **{k: _like(getattr(system, k), v) for k, v in sys_kw.items()}), new_scenes)


def _like(old, value):
    return max(1, int(round(value))) if isinstance(old, int) and not isinstance(old, bool) else float(value)
