"""ScissionLite's split evaluation as a model fed by measurements (``split``, claims scl.vs_local and
scl.vs_scission).

From the ``nets`` record: each net's per-layer latency on the device (this CPU at each thread count)
and the edge, the bytes crossing each split point, and at each transfer-layer split point the two
codecs (the trained transfer layer, the int8 split tensor) with their measured top-1 drop and their
device-side and edge-side times. Scission's latency of a plain split ``s`` is device part + rtt + 8
bytes / bandwidth + edge part (repro.split.optimise.latency; ``s = L`` is device only, nothing sent);
a codec at ``s`` adds its two sides' times and sends its own bytes instead. Per net and device thread
count:

- device only and edge only (send the input, run it all on the edge);
- Scission: the plain split of least latency (device and edge only included);
- int8: the best split with an int8 split tensor, or a plain one;
- ScissionLite: the best split with a transfer layer, or a plain one;
- ideal: the best split if the tensor sent cost nothing (no bytes, free codecs): the ceiling of any
  codec at any split.
Codecs whose top-1 drop exceeds ``max_drop_points`` are not chosen. The headlines are the paper's
"up to": the largest speedup over the nets and thread counts.

Parameters: the bandwidth is the paper's (58.8 Mbit/s, TX2 to the edge); the round trip is the
ScissionTL artifact's ping (27.4 ms, assumed: the paper's own text was not read); the device slowdown
scales this CPU's times towards a weaker device (assumed; 1 = as measured). The tornado moves the
assumed ones over their spans, the curves the slowdown and the bandwidth."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.sim import sensitivity
from repro.split import optimise

METHODS = ("device_only", "edge_only", "scission", "int8", "scissionlite", "ideal")
HEADLINES = ("vs_local", "vs_scission")


@dataclass
class Assumed:
    device_slowdown: float = 1.0  # assumed: the device's measured times times this (1: this CPU as it is)
    rtt_ms: float = 27.4  # the ScissionTL artifact's TX2-edge ping (benchmark_data/network_stats.csv)


@dataclass
class SplitParams:
    assumed: Assumed = field(default_factory=Assumed)
    spans: dict[str, sensitivity.Span] = field(default_factory=dict)  # assumed.<field> -> range and why
    bandwidth_mbps: float = 58.8  # the paper's TX2-edge link
    max_drop_points: float = 1.0  # a codec losing more top-1 than this (points) is not chosen (issue 51)
    tornado: str = "vs_local"  # the headline the tornado moves (one of HEADLINES)
    curve_slowdown: list[float] = field(default_factory=lambda: [0.5, 1.0, 3.0, 10.0, 30.0, 100.0])
    curve_bandwidth: list[float] = field(default_factory=lambda: [1.0, 5.0, 20.0, 58.8, 200.0, 1000.0])
    targets: dict[str, float] = field(default_factory=lambda: {"vs_local": 16.0, "vs_scission": 2.8})  # drawn


@dataclass
class Inputs:
    """Per (net, device threads): the plain-split Profile; per net: the codec rows (measured times on
    the device at those threads and on the edge, bytes sent, top-1 drop)."""

    profiles: dict[tuple[str, int], optimise.Profile]
    codecs: pd.DataFrame


def read_nets(path: Path) -> Inputs:
    run = Path(path).parent
    layers, acc, codecs = (pd.read_csv(run / f"{n}.csv") for n in ("layers", "accuracy", "codecs"))
    profiles = {}
    for net, g in layers.groupby("net"):
        top1 = acc.loc[(acc["net"] == net) & (acc["codec"] == "none"), "top1"].to_numpy()
        edge = g[g["role"] == "edge"]
        for threads, d in g[g["role"] == "device"].groupby("threads"):
            rows = d[d["where"] == "layer"].sort_values("index")
            sizes = [int(rows["in_bytes"].iloc[0]), *rows["out_bytes"].astype(int)]
            e_rows = edge[edge["where"] == "layer"].sort_values("index")
            profiles[(net, int(threads))] = optimise.Profile(
                rows["time_s"].to_numpy(), e_rows["time_s"].to_numpy(), [d.loc[d["where"] == "head0", "time_s"].sum()],
                [edge.loc[edge["where"] == "head0", "time_s"].sum()], sizes, [len(rows)], top1)
    drops = acc[acc["codec"] != "none"][["net", "split", "codec", "drop_points"]]
    dev = codecs[codecs["role"] == "device"][["net", "split", "codec", "threads", "down_s", "bytes", "plain_bytes"]]
    edge = codecs[codecs["role"] == "edge"][["net", "split", "codec", "up_s"]]
    return Inputs(profiles, dev.merge(edge, on=["net", "split", "codec"]).merge(drops, on=["net", "split", "codec"]))


def evaluate(inp: Inputs, a: Assumed, bandwidth_mbps: float, max_drop_points: float) -> pd.DataFrame:
    """One row per (net, threads, method): latency_ms, split, codec, drop_points, and the net's
    device/edge speed ratio (its whole time on the device over its whole time on the edge)."""
    bw, rtt = bandwidth_mbps * 1e6, a.rtt_ms / 1e3
    rows = []
    for (net, threads), prof in inp.profiles.items():
        p = prof.scaled(a.device_slowdown)
        plain = optimise.latency(p, bw, rtt)[0]
        n = len(p.device)
        # the same splits with nothing sent and nothing to code: what no codec can beat
        ideal = np.append(plain[:n] - 8.0 * p.bytes[:n] / bw, plain[n])
        best = {"device_only": (plain[n], n, "none", 0.0), "edge_only": (plain[0], 0, "none", 0.0),
                "scission": (plain.min(), int(plain.argmin()), "none", 0.0),
                "ideal": (ideal.min(), int(ideal.argmin()), "none", 0.0)}
        c = inp.codecs[(inp.codecs["net"] == net) & (inp.codecs["threads"] == threads)
                       & (inp.codecs["drop_points"] <= max_drop_points)]
        coded = (plain[c["split"].to_numpy()] + 8.0 * (c["bytes"] - c["plain_bytes"]).to_numpy() / bw
                 + c["down_s"].to_numpy() * a.device_slowdown + c["up_s"].to_numpy())
        for method, codec in (("int8", "int8"), ("scissionlite", "tl")):
            best[method] = best["scission"]
            mask = (c["codec"] == codec).to_numpy()
            if mask.any():
                k = int(np.flatnonzero(mask)[np.argmin(coded[mask])])
                if coded[k] < best[method][0]:
                    best[method] = (coded[k], int(c["split"].iloc[k]), codec, float(c["drop_points"].iloc[k]))
        ratio = plain[n] / (p.edge.sum() + p.edge_head[-1])  # the whole net's time, device over edge
        rows += [dict(net=net, threads=threads, method=m, latency_ms=1e3 * t, split=s, codec=k, drop_points=d,
                      device_edge_ratio=ratio) for m, (t, s, k, d) in best.items()]
    return pd.DataFrame(rows)


def speedups(points: pd.DataFrame) -> pd.DataFrame:
    """Per (net, threads): ScissionLite's speedup over device only and over Scission, int8's over
    Scission, and the ideal's (the ceilings), with the accuracy drop ScissionLite's choice costs."""
    w = points.pivot_table(index=["net", "threads"], columns="method", values="latency_ms")
    chosen = points[points["method"] == "scissionlite"].set_index(["net", "threads"])
    return pd.DataFrame({"vs_local": w["device_only"] / w["scissionlite"], "vs_scission": w["scission"] / w["scissionlite"],
                         "int8_vs_scission": w["scission"] / w["int8"], "ideal_vs_local": w["device_only"] / w["ideal"],
                         "ideal_vs_scission": w["scission"] / w["ideal"], "drop_points": chosen["drop_points"],
                         "device_edge_ratio": chosen["device_edge_ratio"]}).reset_index()


def headline(points: pd.DataFrame) -> dict[str, float]:
    """The paper's "up to": the largest speedup over nets and thread counts, its choice's top-1 drop,
    and the same statistic of the ideal split (the ceiling)."""
    sp = speedups(points)
    out = {}
    for h in HEADLINES:
        top = sp.loc[sp[h].idxmax()]
        out.update({h: float(top[h]), f"{h}_drop_points": float(top["drop_points"]),
                    f"{h}_ceiling": float(sp[f"ideal_{h}"].max())})
    out["int8_vs_scission"] = float(sp["int8_vs_scission"].max())
    out["device_edge_ratio_min"], out["device_edge_ratio_max"] = map(float, sp["device_edge_ratio"].agg(["min", "max"]))
    return out


@dataclass
class Headline:
    """The headlines with assumed parameters overridden (``assumed.<field>``); picklable."""

    inputs: Inputs
    assumed: Assumed
    bandwidth_mbps: float
    max_drop_points: float

    def __call__(self, overrides: dict) -> dict[str, float]:
        a = dataclasses.replace(self.assumed, **{k.split(".", 1)[1]: float(v) for k, v in overrides.items()
                                                 if k.startswith("assumed.")})
        bw = float(overrides.get("bandwidth_mbps", self.bandwidth_mbps))
        return headline(evaluate(self.inputs, a, bw, self.max_drop_points))


@experiment(params=SplitParams, needs_gpu=False)
def split(p: SplitParams, ctx: Context) -> Result:
    if p.tornado not in HEADLINES:
        raise ValueError(f"tornado: one of {', '.join(HEADLINES)}, got {p.tornado!r}")
    inp = read_nets(ctx.inputs["nets"])
    points = evaluate(inp, p.assumed, p.bandwidth_mbps, p.max_drop_points)
    metrics = headline(points)
    head = Headline(inp, p.assumed, p.bandwidth_mbps, p.max_drop_points)
    defaults = {f"assumed.{f.name}": float(getattr(p.assumed, f.name)) for f in dataclasses.fields(Assumed)}
    tornado, base, _ = sensitivity.tornado(head, defaults, p.spans, p.tornado, progress=ctx.progress)
    t_metrics, t_tags = sensitivity.tornado_summary(tornado, base)
    curve = pd.DataFrame([{"key": "assumed.device_slowdown", "value": v, **head({"assumed.device_slowdown": v})}
                          for v in p.curve_slowdown]
                         + [{"key": "bandwidth_mbps", "value": v, **head({"bandwidth_mbps": v})} for v in p.curve_bandwidth])
    drops = inp.codecs.drop_duplicates(["net", "split", "codec"])
    for codec, g in drops.groupby("codec"):
        metrics[f"{codec}_drop_median_points"] = float(g["drop_points"].median())
        metrics[f"{codec}_within_drop_share"] = float((g["drop_points"] <= p.max_drop_points).mean())
    metrics.update(t_metrics)
    return Result(metrics=metrics, tables={"points": points, "speedups": speedups(points), "tornado": tornado,
                                           "curve": curve, "codecs": inp.codecs},
                  tags={**t_tags, "tornado_headline": p.tornado})
