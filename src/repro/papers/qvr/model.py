"""Runs the Q-VR model over networks, games and arms and reduces it to the paper's numbers.

Headline (over every (network, game) pair): ``speedup`` = mean of local-only mean latency / Q-VR
mean latency (the paper's end-to-end speedup over local rendering), ``speedup_max`` its largest
value, ``fps_gain`` = mean of Q-VR FPS / static collaborative FPS.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from repro.papers.qvr import pipeline
from repro.papers.qvr.foveation import layers
from repro.papers.qvr.system import ARMS, SystemParams
from repro.papers.qvr.workload import GameSpec
from repro.sim.network import NetworkProfile, make_trace
from repro.sim.engine import pool_map
from repro.sim.params import ParamError, choices, positive

QUANTILES = np.linspace(0, 1, 101)


def check(s: SystemParams, games: list[GameSpec], networks: list[NetworkProfile], arms: list[str], duration_s: float) -> None:
    """Every parameter, before any simulation: a bad one raises ParamError naming its key."""
    s.check()
    choices("arms", arms, ARMS)
    positive("duration_s", duration_s)
    if not games:
        raise ParamError("games: at least one game is needed")
    if not networks:
        raise ParamError("networks: at least one network profile is needed")
    for g in games:
        g.check()
    for n in networks:
        n.check()


def run_network(s: SystemParams, games: list[GameSpec], net: NetworkProfile, index: int, arms: list[str],
                duration_s: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(summary rows, latency-quantile rows) of every (game, arm) on one network."""
    lay = layers(s)
    trace = make_trace(net, duration_s, seed=seed * 1000 + index)
    runs, cdf = [], []
    for gi, game in enumerate(games):
        for arm in arms:
            frames, events = pipeline.simulate(arm, game, net, trace, s, lay, duration_s,
                                               seed=seed * 1000 + 100 * index + gi, game_seed=seed * 1000 + gi)
            lat = np.array([f["latency_ms"] for f in frames]) if frames else np.array([np.nan])
            runs.append({"network": net.name, "game": game.name, "arm": arm, "fps": len(frames) / duration_s,
                         "latency_ms": float(np.mean(lat)), "latency_p50_ms": float(np.median(lat)),
                         "latency_p95_ms": float(np.percentile(lat, 95)),
                         "within_target": float(np.mean(lat <= s.latency_target_ms)),
                         "quality": float(np.mean([f["quality"] for f in frames])) if frames else np.nan,
                         "fovea_deg": float(np.mean([f["fovea_deg"] for f in frames])) if frames else np.nan,
                         "mbps": 8 * sum(f["bytes"] for f in frames) / duration_s / 1e6,
                         "trace_mean_mbps": trace.mean_bps / 1e6, "frames": len(frames), "events": events})
            cdf += [{"network": net.name, "game": game.name, "arm": arm, "q": q, "latency_ms": v}
                    for q, v in zip(QUANTILES, np.quantile(lat, QUANTILES))]
    return runs, cdf


def _job(args):
    return run_network(*args)


def run(s: SystemParams, games: list[GameSpec], networks: list[NetworkProfile], arms: list[str], duration_s: float,
        seed: int, workers: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    check(s, games, networks, arms, duration_s)
    jobs = [(s, games, net, i, list(arms), duration_s, seed) for i, net in enumerate(networks)]
    with pool_map(min(workers, len(jobs))) as mapper:
        parts = list(mapper(_job, jobs))
    return (pd.DataFrame([r for runs, _ in parts for r in runs]), pd.DataFrame([r for _, cdf in parts for r in cdf]))


def per_pair(runs: pd.DataFrame) -> pd.DataFrame:
    """Per game (mean over networks): Q-VR's latency speedup over local and FPS gain over static."""
    wide = runs.pivot_table(index=["network", "game"], columns="arm", values=["latency_ms", "fps"])
    out = pd.DataFrame(index=wide.index)
    if {"local", "qvr"} <= set(runs["arm"]):
        out["speedup"] = wide["latency_ms"]["local"] / wide["latency_ms"]["qvr"]
    if {"static", "qvr"} <= set(runs["arm"]):
        out["fps_gain"] = wide["fps"]["qvr"] / wide["fps"]["static"]
    return out.groupby("game").mean()


def summarize(runs: pd.DataFrame) -> dict[str, float]:
    wide = runs.pivot_table(index=["network", "game"], columns="arm", values=["latency_ms", "fps", "quality"])
    m: dict[str, float] = {}
    if {"local", "qvr"} <= set(runs["arm"]):
        sp = wide["latency_ms"]["local"] / wide["latency_ms"]["qvr"]
        m.update(speedup=float(sp.mean()), speedup_max=float(sp.max()), speedup_min=float(sp.min()))
        m["fps_vs_local"] = float((wide["fps"]["qvr"] / wide["fps"]["local"]).mean())
    if {"static", "qvr"} <= set(runs["arm"]):
        m["fps_gain"] = float((wide["fps"]["qvr"] / wide["fps"]["static"]).mean())
        m["fps_gain_max"] = float((wide["fps"]["qvr"] / wide["fps"]["static"]).max())
        m["speedup_vs_static"] = float((wide["latency_ms"]["static"] / wide["latency_ms"]["qvr"]).mean())
    if "qvr" in set(runs["arm"]):
        m["qvr_quality"] = float(wide["quality"]["qvr"].mean())
        m["qvr_within_target"] = float(runs.loc[runs["arm"] == "qvr", "within_target"].mean())
    return m
