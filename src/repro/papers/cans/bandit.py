"""CANS's bandit as a model fed by measurements (``bandit``, claim cans.latency).

N devices of a few types (a type: a net, a device profile scaled by a slowdown, a network class)
share one edge server. Every step each device infers one image, the devices deciding one after
another in a random order (requests arrive at different times). A device picks a split point s; it
runs layers 0..s-1 itself (time known to it: it profiles itself), sends the tensor crossing s over
its own link (a lognormal AR(1) bandwidth trace around its own mean, repro.sim.network) and the edge
runs the rest, slowed by the requests it serves at once: this one and every other device whose latest
request was offloaded (the ``edge_load`` record's per-layer times at 1..K concurrent clients,
interpolated in the count). s = L runs the whole net on the device. A learner predicts the offloading
delay from the split's features (repro.papers.cans.linucb): ANS's, the bandwidth unknown and learnt
in the model's weights, or (``context: transfer``) with the transfer time at the bandwidth the
device's previous inference saw; the record has the headline under the other context too.

Policies (repro.papers.cans.linucb; one LinUCB model per device, per group or for all):
- ``cans``: FedLinUCB-DW: one model per device type (grouping), warm-started; the model takes each
  observation before the next decision (aggregation per inference: the paper's period was not read);
- ``fedlinucb_no_grouping``: one model for every device, warm-started;
- ``fedlinucb_no_warm_start``: one model per type, no warm start;
- ``ans``: Autodidactic Neurosurgeon's per-device LinUCB (no sharing, no warm start; its key-frame
  weighting is left out);
- ``static``: Neurosurgeon's fixed split, the best at the type's nominal bandwidth with the edge alone;
- ``oracle``: the best split for the true bandwidth and the other devices' requests on the edge.
Every learner samples by force as ANS does, in the form assumed here: a device that has run the whole
net on itself ``forced_after`` times in a row offloads once at its least certain split (the widest
confidence), because a device-only run observes no offloading delay and a model that prices every
split above the device's own time (a warm start can) would otherwise stay on the device for good.
Warm start (the paper's "offline early-exit inference experience", read here as offline observations
of the offloading delay): ``warm_samples`` observations per offloading split per device at the type's
nominal bandwidth with the edge serving it alone, so biased against the online world.

Regret of a decision: its latency minus the least latency any split would have had given the
bandwidth and the other devices' requests on the edge. The headline: 1 - mean latency(CANS) / mean
latency(ANS), over every device, step and seed. Every parameter below cites the paper or is marked
assumed; the tornado moves each assumed one over its span. None is set from the paper's result."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.papers.cans.linucb import LinUCB, choose, disjoint, features
from repro.sim import sensitivity
from repro.sim.network import NetworkProfile, make_trace

POLICIES = ("cans", "fedlinucb_no_grouping", "fedlinucb_no_warm_start", "ans", "static", "oracle")
MS = 1e3  # the learners see delays in milliseconds (alpha's unit: the confidence width is in ms)
LEARNERS = {"cans": ("type", True), "fedlinucb_no_grouping": ("all", True), "fedlinucb_no_warm_start": ("type", False),
            "ans": ("device", False)}  # policy -> (which devices share a model, warm start)


def _types() -> list[dict]:
    return [{"name": "phone", "net": "alexnet", "threads": 1, "slowdown": 5.0, "bandwidth_mbps": 20.0, "rtt_ms": 5.0},
            {"name": "camera", "net": "resnet", "threads": 1, "slowdown": 10.0, "bandwidth_mbps": 5.0, "rtt_ms": 20.0}]


@dataclass
class Assumed:
    devices_per_type: float = 4.0  # assumed: the paper's prototype has two devices; its simulation's count unread
    alpha: float = 1.0  # assumed: LinUCB's exploration weight
    bandwidth_spread: float = 2.0  # assumed: each device's mean bandwidth is its type's times U(1/x, x) (log-uniform)
    bandwidth_scale: float = 1.0  # assumed: every type's mean bandwidth times this
    device_slowdown: float = 1.0  # assumed: every type's slowdown times this
    horizon: float = 1000.0  # assumed: inferences per device in a run
    warm_samples: float = 1.0  # assumed: offline observations per offloading split per device
    forced_after: float = 10.0  # assumed: device-only runs in a row after which a learner offloads once (ANS's forced sampling)


@dataclass
class BanditParams:
    types: list[dict] = field(default_factory=_types)  # name, net, threads (edge_load's device profile), slowdown,
    # bandwidth_mbps, rtt_ms: all assumed (the paper's device types are Jetson-class boards; their numbers unread)
    assumed: Assumed = field(default_factory=Assumed)
    spans: dict[str, sensitivity.Span] = field(default_factory=dict)  # assumed.<field> -> range and why
    cv: float = 0.3  # assumed: bandwidth fluctuation (lognormal cv), as Edgent's traces
    corr_s: float = 2.0  # assumed: its correlation time
    step_s: float = 0.5  # assumed: one inference per device every half second
    l2_lambda: float = 1.0  # ridge regularisation (LinUCB's usual 1)
    context: str = "size"  # the first feature: MB sent, the bandwidth unknown inside theta (ANS's); or
    # "transfer": the transfer time at the bandwidth the previous inference saw (assumed alternative)
    seeds: int = 3  # independent worlds (traces, per-device bandwidths) averaged
    check_steps: int = 400  # the mabwiser cross-check's stream length
    target: float = 50.0  # the claim's target (config/claims/cans.yaml), drawn on the figure


@dataclass
class Net:
    """One net's surfaces as the simulation reads them: device time per unit (L layers, then the
    head), split sizes (L + 1), the edge's offloading part per split (s = 0..L-1) at each client count
    (row k-1: k clients), and the arm features."""

    device: np.ndarray
    bytes: np.ndarray
    edge: np.ndarray
    X: np.ndarray

    @property
    def L(self) -> int:
        return len(self.device) - 1

    def edge_at(self, k: int) -> np.ndarray:
        return self.edge[min(max(k, 1), len(self.edge)) - 1]


def read_surfaces(path: Path, max_clients: int) -> dict[tuple[str, int], Net]:
    """(net, device threads) -> Net from the edge_load record's layers.csv, the edge at every client
    count 1..max_clients (linear between the measured counts, the last slope beyond them)."""
    layers = pd.read_csv(Path(path).parent / "layers.csv")
    out = {}
    for net, g in layers.groupby("net"):
        edge = g[g["role"] == "edge"].pivot_table(index="clients", columns="unit", values="time_s").sort_index()
        counts, times = edge.index.to_numpy(float), edge.to_numpy(float)
        ks = np.arange(1, max(max_clients, int(counts.max())) + 1)
        per_k = np.column_stack([np.interp(ks, counts, times[:, u]) for u in range(times.shape[1])])
        if len(counts) > 1:
            slope = (times[-1] - times[-2]) / (counts[-1] - counts[-2])
            beyond = ks > counts[-1]
            per_k[beyond] = times[-1] + np.outer(ks[beyond] - counts[-1], np.maximum(slope, 0.0))
        tail = np.cumsum(per_k[:, ::-1], axis=1)[:, ::-1][:, :-1]  # edge runs units s..L for s < L
        for threads, d in g[g["role"] == "device"].groupby("threads"):
            d = d.sort_values("unit")
            sizes = [int(d["in_bytes"].iloc[0]), *d["out_bytes"].iloc[:-1].astype(int)]
            out[(net, int(threads))] = Net(d["time_s"].to_numpy(float), np.asarray(sizes, float), tail,
                                           features(np.asarray(sizes), list(d["kind"]), d["flops"].to_numpy(float)))
    return out


@dataclass
class World:
    """Per device: its type index, net, the known device part per split (L + 1; the last the whole
    net), round trip, nominal and true bandwidth (bit/s, one per step)."""

    kind: list[int]
    nets: list[Net]
    known: list[np.ndarray]
    rtt: np.ndarray
    nominal_bps: np.ndarray
    bps: np.ndarray  # (steps, devices)
    order: np.ndarray  # (steps, devices): the order the devices decide in at each step
    transfer: bool = False  # the learners' context: MB sent (ANS) or the transfer time at the last bandwidth

    @property
    def n(self) -> int:
        return len(self.kind)

    def offloads(self, i: int, bps: float, clients: int) -> np.ndarray:
        """Device i's offloading delay of every split s < L: transfer, round trip, the edge's part."""
        net = self.nets[i]
        return 8.0 * net.bytes[: net.L] / bps + self.rtt[i] + net.edge_at(clients)

    def offload(self, i: int, s: int, bps: float, clients: int) -> float:
        return float(self.offloads(i, bps, clients)[s])

    def context(self, i: int, bps: float) -> np.ndarray:
        """Device i's arm features; with ``transfer``, the first column (MB sent) is replaced by the
        transfer time (ms) at ``bps``, the bandwidth its previous inference measured."""
        net = self.nets[i]
        if not self.transfer:
            return net.X
        X = net.X.copy()
        X[:, 0] = MS * 8.0 * net.bytes[: net.L] / bps
        return X

    def all_splits(self, i: int, bps: float, others: int) -> np.ndarray:
        """Latency of every split of device i when ``others`` other devices offload."""
        t = self.known[i].copy()
        t[: self.nets[i].L] += self.offloads(i, bps, others + 1)
        return t


def build_world(surfaces: dict, types: list[dict], a: Assumed, p: BanditParams, seed: int) -> World:
    if p.context not in ("size", "transfer"):
        raise ValueError(f"context: 'size' or 'transfer', got {p.context!r}")
    rng = np.random.default_rng(seed)
    steps, per_type = int(a.horizon), int(round(a.devices_per_type))
    if steps < 4 or per_type < 1:
        raise ValueError(f"need horizon >= 4 and devices_per_type >= 1, got {a.horizon} and {a.devices_per_type}")
    kind, nets, known, rtt, nominal, traces = [], [], [], [], [], []
    for t, ty in enumerate(types):
        net = surfaces[(ty["net"], int(ty["threads"]))]
        dev = net.device * ty["slowdown"] * a.device_slowdown
        prefix = np.concatenate([[0.0], np.cumsum(dev[:-1])])  # s = 0..L-1: layers before s
        k = np.append(prefix[: net.L], dev.sum())  # s = L: the whole net and its head on the device
        mean = ty["bandwidth_mbps"] * a.bandwidth_scale
        for _ in range(per_type):
            factor = float(np.exp(rng.uniform(-np.log(a.bandwidth_spread), np.log(a.bandwidth_spread))))
            prof = NetworkProfile(name=ty["name"], mean_mbps=mean * factor, cv=p.cv, corr_s=p.corr_s, step_s=p.step_s)
            traces.append(make_trace(prof, steps * p.step_s, seed=int(rng.integers(2**31))).bps[:steps])
            kind.append(t)
            nets.append(net)
            known.append(k)
            rtt.append(ty["rtt_ms"] / 1e3)
            nominal.append(mean * 1e6)
    order = np.array([rng.permutation(len(kind)) for _ in range(steps)])
    return World(kind, nets, known, np.array(rtt), np.array(nominal), np.column_stack(traces), order,
                 p.context == "transfer")


def _models(world: World, group: str, alpha: float, l2: float, warm: int) -> tuple[list[LinUCB], list[int]]:
    """The policy's models and each device's model index, warm-started where ``warm`` > 0."""
    index = {"device": list(range(world.n)), "type": list(world.kind), "all": [0] * world.n}[group]
    models = [LinUCB(world.nets[0].X.shape[1], alpha, l2) for _ in range(max(index) + 1)]
    for i in range(world.n) if warm else ():
        X = world.context(i, world.nominal_bps[i])
        y = MS * np.array([world.offload(i, s, world.nominal_bps[i], 1) for s in range(len(X))])
        for _ in range(warm):
            models[index[i]].update(X, y)
    return models, index


def simulate(world: World, policy: str, alpha: float, l2: float, warm: int,
             forced_after: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(latency, regret), each (steps, devices) in seconds; ``forced_after`` > 0: a learner that has run
    the whole net on the device that many times in a row offloads once at its least certain split."""
    steps, n = world.bps.shape
    if policy in LEARNERS:
        group, warm_start = LEARNERS[policy]
        models, index = _models(world, group, alpha, l2, warm if warm_start else 0)
    elif policy == "static":
        fixed = [int(np.argmin(world.all_splits(i, world.nominal_bps[i], 0))) for i in range(n)]
    elif policy != "oracle":
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    latency, regret = np.zeros((steps, n)), np.zeros((steps, n))
    offloading = np.zeros(n, bool)  # whether each device's latest request is on the edge
    local_run = np.zeros(n, int)  # device-only decisions in a row
    for t in range(steps):
        seen = world.bps[t - 1] if t else world.nominal_bps
        for i in world.order[t]:
            others = int(offloading.sum() - offloading[i])
            every = world.all_splits(i, world.bps[t, i], others)
            if policy in LEARNERS:
                X = world.context(i, seen[i])
                s = choose(MS * world.known[i], models[index[i]], X)
                if forced_after and s == world.nets[i].L and local_run[i] >= forced_after:
                    s = int(np.argmax(models[index[i]].width(X)))  # forced sampling
                local_run[i] = local_run[i] + 1 if s == world.nets[i].L else 0
            else:
                s = fixed[i] if policy == "static" else int(np.argmin(every))
            latency[t, i], regret[t, i] = every[s], every[s] - every.min()
            offloading[i] = s < world.nets[i].L
            if policy in LEARNERS and offloading[i]:  # the group's model takes it before the next decision
                models[index[i]].update(X[s], MS * (every[s] - world.known[i][s]))
    return latency, regret


def run_policies(surfaces: dict, types: list[dict], a: Assumed, p: BanditParams, policies, seed0: int):
    """{policy: [(latency, regret) per seed]}, every policy on the same worlds."""
    out = {q: [] for q in policies}
    for k in range(p.seeds):
        world = build_world(surfaces, types, a, p, seed0 + k)
        for q in policies:
            out[q].append(simulate(world, q, a.alpha, p.l2_lambda, int(round(a.warm_samples)),
                                   int(round(a.forced_after))))
    return out


def headline(runs: dict) -> dict[str, float]:
    mean = {q: float(np.mean([lat.mean() for lat, _ in r])) for q, r in runs.items()}
    return {"latency_reduction_pct": 100.0 * (1.0 - mean["cans"] / mean["ans"])}


@dataclass
class Headline:
    """The headline with assumed parameters overridden (``assumed.<field>``); picklable."""

    surfaces: dict
    params: BanditParams
    seed: int

    def __call__(self, overrides: dict) -> dict[str, float]:
        a = dataclasses.replace(self.params.assumed, **{k.split(".", 1)[1]: float(v) for k, v in overrides.items()})
        return headline(run_policies(self.surfaces, self.params.types, a, self.params, ("cans", "ans"), self.seed))


def mabwiser_check(net: Net, known: np.ndarray, rtt: float, bps: np.ndarray, alpha: float, l2: float) -> dict:
    """Our LinUCB against mabwiser's on one fixed stream: one device alone, every split an arm with
    its own model (disjoint features), context (1, seconds per Mbit at the previous step's bandwidth),
    reward -latency (ms). Both start from one pull of each arm. Returns the share of identical choices and
    each one's mean regret (ms)."""
    from mabwiser.mab import MAB, LearningPolicy

    arms = net.L + 1
    lat = known[None, :] + np.zeros((len(bps), 1))
    lat[:, : net.L] += 8.0 * net.bytes[None, : net.L] / bps[:, None] + rtt + net.edge_at(1)[None, :]
    ctx = np.column_stack([np.ones(len(bps)), 1e6 / np.concatenate([[bps[0]], bps[:-1]])])
    theirs = MAB(list(range(arms)), LearningPolicy.LinUCB(alpha=alpha, l2_lambda=l2), seed=0)
    first = np.arange(arms)
    lat = MS * lat
    theirs.fit(first, -lat[first, first], ctx[first])
    ours = LinUCB(arms * ctx.shape[1], alpha, l2)
    for t in first:
        ours.update(disjoint(ctx[t], t, arms), lat[t, t])
    same, regret_ours, regret_theirs = [], [], []
    for t in range(arms, len(bps)):
        a_ours = choose(np.zeros(arms), ours, np.array([disjoint(ctx[t], s, arms) for s in range(arms)]))
        a_theirs = int(theirs.predict(ctx[t:t + 1]))
        ours.update(disjoint(ctx[t], a_ours, arms), lat[t, a_ours])
        theirs.partial_fit([a_theirs], [-lat[t, a_theirs]], ctx[t:t + 1])
        same.append(a_ours == a_theirs)
        regret_ours.append(lat[t, a_ours] - lat[t].min())
        regret_theirs.append(lat[t, a_theirs] - lat[t].min())
    return {"mabwiser_choice_match": float(np.mean(same)), "mabwiser_regret_ours_ms": float(np.mean(regret_ours)),
            "mabwiser_regret_theirs_ms": float(np.mean(regret_theirs))}


@experiment(params=BanditParams, needs_gpu=False)
def bandit(p: BanditParams, ctx: Context) -> Result:
    a = p.assumed
    per_type = int(round(a.devices_per_type))
    span = p.spans.get("assumed.devices_per_type")
    most = int(round(max(a.devices_per_type, span.high if span else 0.0))) * len(p.types)
    surfaces = read_surfaces(ctx.inputs["edge_load"], most)
    runs = run_policies(surfaces, p.types, a, p, POLICIES, ctx.seed)
    metrics = headline(runs)
    steps, devices = [], []
    for q, r in runs.items():
        lat = np.mean([x.mean(axis=1) for x, _ in r], axis=0) * 1e3
        reg = np.mean([g.mean(axis=1) for _, g in r], axis=0) * 1e3
        steps.append(pd.DataFrame({"policy": q, "step": np.arange(len(lat)), "latency_ms": lat, "regret_ms": reg}))
        quarter = max(1, len(reg) // 4)
        metrics[f"{q}_latency_ms"] = float(lat.mean())
        metrics[f"{q}_regret_first_ms"] = float(reg[:quarter].mean())
        metrics[f"{q}_regret_last_ms"] = float(reg[-quarter:].mean())
        devices += [{"policy": q, "seed": k, "device": i, "type": p.types[i // per_type]["name"],
                     "latency_ms": 1e3 * x[:, i].mean(), "regret_ms": 1e3 * g[:, i].mean()}
                    for k, (x, g) in enumerate(r) for i in range(x.shape[1])]
    for q in POLICIES:
        metrics[f"{q}_reduction_vs_ans_pct"] = 100.0 * (1.0 - metrics[f"{q}_latency_ms"] / metrics["ans_latency_ms"])
    metrics["cans_reduction_vs_static_pct"] = 100.0 * (1.0 - metrics["cans_latency_ms"] / metrics["static_latency_ms"])
    first, last = metrics["cans_regret_first_ms"], metrics["cans_regret_last_ms"]
    metrics["cans_regret_drop_ms"] = first - last  # >= 0: regret per step does not rise from the first quarter to the last
    metrics["cans_regret_last_over_first"] = last / first if first > 0 else float("nan")

    world = build_world(surfaces, p.types, a, p, ctx.seed)  # the first world: its device 0 alone, a longer trace
    stream = make_trace(NetworkProfile(mean_mbps=world.nominal_bps[0] / 1e6, cv=p.cv, corr_s=p.corr_s, step_s=p.step_s),
                        p.check_steps * p.step_s, ctx.seed).bps
    metrics.update(mabwiser_check(world.nets[0], world.known[0], world.rtt[0], stream, a.alpha, p.l2_lambda))

    other = "transfer" if p.context == "size" else "size"
    metrics[f"latency_reduction_pct_{other}_context"] = Headline(surfaces, dataclasses.replace(p, context=other),
                                                                 ctx.seed)({})["latency_reduction_pct"]
    head = Headline(surfaces, p, ctx.seed)
    defaults = {f"assumed.{f.name}": float(getattr(a, f.name)) for f in dataclasses.fields(Assumed)}
    tornado, base, _ = sensitivity.tornado(head, defaults, p.spans, "latency_reduction_pct", progress=ctx.progress)
    t_metrics, t_tags = sensitivity.tornado_summary(tornado, base)
    metrics.update(t_metrics)
    return Result(metrics=metrics, tables={"steps": pd.concat(steps, ignore_index=True),
                                           "devices": pd.DataFrame(devices), "tornado": tornado},
                  tags={**t_tags, "kind": "model", **({} if first > 0 else {"cans_regret_last_over_first": "NaN: no regret in the first quarter"}), "devices": f"{per_type * len(p.types)} ({len(p.types)} types)"})
