"""SuperNeurons experiments: synthetic ImageNet-shaped batches, SGD (momentum 0.9), batch 32.

peak_memory  peak memory per network (AlexNet, VGG-16, ResNet-50/101/152) for plain, liveness,
             +pool, +recompute, all, all+wscap (arms.py), split into static (parameters, optimizer
             state and the gradients torch.optim keeps between steps) and dynamic, against the
             largest single-layer working set (liveness.py). Metric peak_dynamic_over_largest_layer:
             the largest ratio over the networks of the full runtime, all+wscap (all four
             mechanisms; "all" when all+wscap is not among the configs) (-> sn.peak); the "all"
             ratio stays in peak_dynamic_over_largest_layer_all. The same ratios with the workspace
             in the denominator too (issue 45): ..._ws keys over the largest layer *need*, its working
             set plus its measured backward transients (cuDNN workspace, a block's inner
             gradients; liveness.UnitProfile.need; equal to the working set on the CPU, where nothing
             is measured). The workspace cap (probe.py,
             WSCAP_ENV) is ``workspace_cap_mib`` MiB, or "auto": ``workspace_cap_fraction`` (10%)
             of the network's largest single-layer working set, about what the 1.3x target leaves
             on the ResNets beside the working set and the prefetched checkpoint (their estimate
             is 1.17x); it is applied only with isolate: true (an environment variable of the
             probe's process), and cuDNN 9 ignores it (probe.py: what else was tried).
depth        deepest network of a family (DEPTH_FAMILIES: bottleneck ResNet blocks, stages 3:4:6:3
             scaled to N blocks, 3N+5 conv layers; ViT encoder layers; GPT decoder layers) that
             trains a few steps under a per-process GPU memory cap, per arm (plain,
             checkpoint_sequential, save_on_cpu, ours, sac, amb_<v>); exponential then bisection
             search with a time budget per search; a capped search reports a lower bound and says so.
             Metrics depth_ratio (ours / plain, -> sn.depth), max_conv_layers_ours (-> sn.resnet2500);
             with networks, depth_ratio_<net> (-> sn.depth_vit, sn.depth_gpt).
max_batch    largest batch per network (PAPER_NETWORKS: AlexNet, VGG-16, ResNet-50/101/152) that trains
             a few steps under the per-process cap, per arm (plain and ours; checkpoint and save_on_cpu
             where they apply: checkpoint_sequential cannot run VGG-16, whose segments start at in-place
             ReLUs, arms.unsupported); the depth search over the batch size (at paper scale steps
             of x1.25 from a start near the answer: seconds per probe leave ~3 probes a search),
             a time budget per (network, arm). Metrics max_batch_<net>_<arm>, batch_ratio_<net>
             (ours / plain) and its min / max over the networks.
throughput   images/s of the four arms at one depth all of them train under the cap, and of ours vs
             checkpointing at the checkpointing arm's maximum depth (inputs.depth, the depth record,
             or the parameter). Metrics speed_vs_plain (-> sn.speed), speed_vs_checkpoint. Ours' rows
             say what limited it: its plan (segments recomputed, units recomputed, the largest
             speed-centric working set, checkpoint bytes and the pool's resident budget) and per timed
             step the bytes offloaded / prefetched, late fetches, host seconds waiting for copies and
             in SGDInBackward.
peak_memory, depth and max_batch resume: their finished probes go to probe_cache.jsonl in the run folder
(superneurons.probe.ProbeCache), so a run killed part-way (a device call's time limit) takes them
from there when it runs again with the same code, torch and GPU, and tags how many it took; the
file goes when the record is written. Throughput never resumes: its speeds compare side by side.

Static memory at 10x depth (why ours applies SGD inside backward and may keep momentum on the host):
a 3:4:6:3 bottleneck ResNet with N blocks has about 1.33M x N parameters (N = 840: 1.12e9, 4.5 GB in
fp32); parameters + gradients + momentum = 13.4 GB, over the 12 GiB cap before any activation.
With SGDInBackward the gradients never coexist (4.5 GB + one layer's gradient), and with momentum on
the host (probe.py: when 2 x parameters > 40% of the cap) the device holds 4.5 GB of static memory,
leaving ~7 GiB for activations, checkpoints and working sets.

On the CPU (smoke scale) no CUDA allocator measures memory: peak_memory, depth and max_batch record the
liveness model's estimates under ``est_`` keys (the claims then show not-run-here with the H200
reference), throughput records real CPU timings of the code path.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import pandas as pd
import torch

from repro import records
from repro.experiment import Context, Result, experiment
from repro.models import build_model
from repro.search import largest_fit
from repro.papers.superneurons.arms import (ARMS, LAYER_ARMS, LAYER_CONFIGS, PEAK_CONFIGS, WSCAP_CONFIGS,
                                           check_arm_names, unsupported)
from repro.papers.superneurons.liveness import flatten_units
from repro.papers.superneurons.probe import (MIB, ProbeCache, ProbeSpec, largest_working_set_estimate, probe_fingerprint,
                                     run_isolated, run_probe)

GIB = 2**30
PAPER_NETWORKS = [
    {"name": "alexnet", "model": "alexnet"},
    {"name": "vgg16", "model": "vgg16_imagenet"},
    {"name": "resnet50", "model": "resnet50"},
    {"name": "resnet101", "model": "resnet101"},
    {"name": "resnet152", "model": "resnet152"},
]


PROBE_CACHE = "probe_cache.jsonl"  # finished probes of an unfinished run (superneurons.probe.ProbeCache)

@dataclass
class BenchParams:
    batch_size: int = 32
    image_size: int | None = None  # None: each model's own (224; AlexNet 227)
    num_classes: int | None = None  # None: the model's (1000)
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 1e-4
    warmup: int = 1  # untimed steps per probe
    steps: int = 2  # timed steps per probe
    lookahead: int = 2  # checkpoints prefetched ahead in backward
    max_inflight_bytes: float = 512 * 2**20  # offload copies in flight before forward waits for one
    plan_margin: float = 0.125  # share of the cap the runtime's plan leaves free (probe.py)
    host_fraction: float = 0.7  # share of available host memory a probe may pin
    isolate: bool = True  # each probe in its own process (clean memory state)
    probe_timeout_s: float = 120.0

    def spec(self, arm: str, ctx: Context, **kw) -> ProbeSpec:
        return ProbeSpec(arm=arm, batch_size=self.batch_size, image_size=self.image_size,
                         num_classes=self.num_classes, device=ctx.device, warmup=self.warmup, steps=self.steps,
                         lookahead=self.lookahead, max_inflight_bytes=self.max_inflight_bytes,
                         plan_margin=self.plan_margin,
                         host_fraction=self.host_fraction, lr=self.lr, momentum=self.momentum,
                         weight_decay=self.weight_decay, seed=ctx.seed, **kw)

    def probe(self, spec: ProbeSpec, ctx: Context, cache: ProbeCache | None = None) -> dict:
        """One probe; with a ``cache`` (memory experiments only: timings from another call would not
        compare side by side), a probe an interrupted run of the same code finished is not rerun."""
        if cache is not None and (hit := cache.get(spec)) is not None:
            return hit
        start = time.perf_counter()
        result = run_isolated(spec, self.probe_timeout_s, ctx.log) if self.isolate else run_probe(spec)
        result["wall_s"] = time.perf_counter() - start
        if cache is not None:
            cache.put(spec, result)
        return result


def probe_cache(ctx: Context) -> ProbeCache:
    return ProbeCache(ctx.out_dir / PROBE_CACHE, probe_fingerprint(ctx.device))


def finish_cache(cache: ProbeCache, tags: dict) -> None:
    """The record is complete: say how many probes came from an interrupted run, drop the cache."""
    if cache.reused:
        tags["resumed_probes"] = (f"{cache.reused} probes measured by an interrupted run of this experiment "
                                  f"(same code, torch and GPU: {cache.fingerprint})")
    cache.remove()


def _check_arms(arms, allowed, what):
    """Arms of ``allowed``, or today's alternatives (sac, amb_<v>: arms.py)."""
    check_arm_names(arms, allowed, what)


# ---- peak memory ------------------------------------------------------------------------------
@dataclass
class PeakParams(BenchParams):
    networks: list = field(default_factory=lambda: [dict(n) for n in PAPER_NETWORKS])  # name, model, kw, image_size
    configs: list = field(default_factory=lambda: list(PEAK_CONFIGS))
    pool_budget_bytes: float = 0.0  # resident pool bytes of the pool / all configs (0: offload all)
    workspace_cap_mib: float | str | None = "auto"  # all+wscap's cuDNN workspace cap: MiB, or "auto"
    workspace_cap_fraction: float = 0.1  # "auto": this share of the largest single-layer working set
    isolate: bool = False  # uncapped: one process is fine (peaks are per allocation, reset per run)

    def workspace_cap(self, model: str, kw: dict, image_size: int | None) -> int:
        """all+wscap's workspace cap for a network, in MiB (at least 1)."""
        if self.workspace_cap_mib is None:
            raise ValueError("configs include all+wscap but workspace_cap_mib is null; give MiB or 'auto'")
        if self.workspace_cap_mib == "auto":
            largest = largest_working_set_estimate(model, kw, self.batch_size, image_size or self.image_size,
                                                   self.num_classes)
            return max(1, int(self.workspace_cap_fraction * largest / MIB))
        if isinstance(self.workspace_cap_mib, str) or self.workspace_cap_mib < 1:
            raise ValueError(f"workspace_cap_mib must be 'auto', >= 1 MiB or null; got {self.workspace_cap_mib!r}")
        return int(self.workspace_cap_mib)


def _network(net: dict, batch: bool = False) -> tuple[str, str, dict, int | None]:
    """(name, model, kw, image_size) of a networks entry; ``batch``: the entry may carry its own
    batch_size (peak_memory, throughput), read by _batch."""
    unknown = set(net) - {"name", "model", "kw", "image_size"} - ({"batch_size"} if batch else set())
    if unknown or "model" not in net:
        extra = ", batch_size" if batch else ""
        raise ValueError(f"networks entries need model (and optional name, kw, image_size{extra}); got {dict(net)}")
    return net.get("name", net["model"]), net["model"], dict(net.get("kw") or {}), net.get("image_size")


@experiment(params=PeakParams)
def peak_memory(p: PeakParams, ctx: Context) -> Result:
    _check_arms(p.configs, PEAK_CONFIGS + LAYER_CONFIGS, "configs")
    measured = ctx.device == "cuda"
    rows, cache = [], probe_cache(ctx)
    for net in p.networks:
        name, model, kw, size = _network(net, batch=True)
        cap = p.workspace_cap(model, kw, size) if set(p.configs) & set(WSCAP_CONFIGS) else None
        for config in p.configs:
            spec = p.spec(config, ctx, model=model, model_kw=kw, momentum_on_host="no",
                          pool_budget_bytes=p.pool_budget_bytes,
                          workspace_cap_mib=cap if config in WSCAP_CONFIGS else None)
            spec.batch_size = net.get("batch_size", spec.batch_size)
            if size is not None:
                spec.image_size = size
            r = p.probe(spec, ctx, cache)
            ctx.log.info("peak %s/%s: %s dynamic %.3g GiB (est %.3g GiB)", name, config, r["reason"],
                         r.get("dynamic_bytes", float("nan")) / GIB, r.get("est_dynamic_bytes", float("nan")) / GIB)
            cudnn = r.get("cudnn") or {}
            rows.append(dict(network=name, config=config, fits=r["fits"], reason=r["reason"], measured=measured,
                             peak_bytes=r.get("peak_bytes"), static_bytes=r.get("static_bytes"),
                             dynamic_bytes=r.get("dynamic_bytes"), est_dynamic_bytes=r.get("est_dynamic_bytes"),
                             est_static_bytes=r.get("est_static_bytes"),
                             largest_working_set=r.get("largest_working_set"),
                             largest_working_set_ws=r.get("largest_working_set_ws"), step_s=r.get("step_s"),
                             offloaded_bytes_per_step=(r.get("per_step") or {}).get("offloaded_bytes", 0),
                             workspace_cap_mib=spec.workspace_cap_mib, workspace_cap_env=cudnn.get("wscap_env"),
                             cudnn_benchmark=cudnn.get("benchmark"),
                             **{f"mark_{k}": v for k, v in (r.get("memory_marks") or {}).items()}))
    table = pd.DataFrame(rows)
    for ws, suffix in (("largest_working_set", ""), ("largest_working_set_ws", "_ws")):
        table[ws] = table.groupby("network")[ws].transform("max").astype(float)
        table[f"dynamic_over_largest_layer{suffix}"] = table.dynamic_bytes.astype(float) / table[ws]
        table[f"est_dynamic_over_largest_layer{suffix}"] = table.est_dynamic_bytes.astype(float) / table[ws]
    prefix, column = ("", "dynamic_over_largest_layer") if measured else ("est_", "est_dynamic_over_largest_layer")
    dyn = "dynamic_bytes" if measured else "est_dynamic_bytes"
    full = next((c for c in ("all+wscap", "all") if c in p.configs), None)
    metrics = {}
    for name, rows_net in table.groupby("network", sort=False):
        by = rows_net.set_index("config")
        for config in ("all", "all+wscap"):
            if config in by.index and bool(by.loc[config, "fits"]):
                for suffix in ("", "_ws"):
                    metrics[f"{prefix}ratio_{config.replace('+', '_')}_{name}{suffix}"] = \
                        float(by.loc[config, column + suffix])
        if full and {full, "plain"} <= set(by.index) and by.loc[full, "fits"] and by.loc["plain", "fits"]:
            metrics[f"{prefix}dynamic_reduction_{name}"] = float(by.loc["plain", dyn]) / float(by.loc[full, dyn])
    for config, key in ((full, "peak_dynamic_over_largest_layer"), ("all", "peak_dynamic_over_largest_layer_all")):
        done = table[(table.config == config) & table.fits]
        if config and len(done) == len(p.networks):  # the claim is over every network, so it needs every one
            metrics[f"{prefix}{key}"] = float(done[column].max())
            metrics[f"{prefix}{key}_ws"] = float(done[column + "_ws"].max())
    tags = {"memory_source": "cuda allocator" if measured else "liveness estimate (CPU)",
            "cudnn": f"cudnn.benchmark {'on' if table.cudnn_benchmark.any() else 'off'}"}
    if table.workspace_cap_mib.notna().any():
        caps = table.dropna(subset=["workspace_cap_mib"]).groupby("network", sort=False).workspace_cap_mib.first()
        applied = table.workspace_cap_env.notna().any()
        tags["workspace_cap"] = ("workspace cap " + ", ".join(f"{n} {int(c)} MiB" for n, c in caps.items())
                                 + ("" if applied else " (not applied: in-process probes)"))
    finish_cache(cache, tags)
    return Result(metrics=metrics, tables={"peak_memory": table}, tags=tags)


# ---- depth ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DepthFamily:
    """A model family the depth search deepens: its builder in repro.models and its depth knob."""
    model: str  # repro.models name
    knob: str  # the builder's keyword that sets the depth
    unit: str  # what one unit of depth is
    min_depth: int  # the smallest depth the builder takes


DEPTH_FAMILIES = {
    "resnet": DepthFamily("bottleneck_resnet", "blocks", "bottleneck blocks", 4),  # one per stage
    "vit": DepthFamily("vit_b16", "depth", "encoder layers", 1),  # ViT-B/16 width unless kw says
    "gpt": DepthFamily("gpt2_small", "depth", "decoder layers", 1),  # GPT-2-small width unless kw says
}
DEPTH_NETWORK_KEYS = {"name", "family", "kw", "image_size", "batch_size", "max_depth"}


@dataclass
class DepthParams(BenchParams):
    """``start_blocks`` and ``arm_budget_s`` are per arm ({arm: n}) and may name a network for
    per-(network, arm) values ({network: {arm: n}}), which win; every searched arm needs both."""

    arms: list = field(default_factory=lambda: list(ARMS))
    model_kw: dict = field(default_factory=dict)  # extra bottleneck_resnet arguments (e.g. width at smoke)
    networks: list = field(default_factory=list)  # empty: the bottleneck ResNet (model_kw); else entries
    # {name, family (DEPTH_FAMILIES), kw, image_size, batch_size, max_depth}, metrics suffixed _<name>
    cap_gib: float = 12.0  # per-process memory cap (on the CPU: the liveness estimate's cap)
    start_blocks: dict = field(default_factory=lambda: {"plain": 32, "checkpoint": 128, "save_on_cpu": 64,
                                                        "ours": 256})
    min_blocks: int = 4  # one per stage (the ResNet; another family's floor is its min_depth)
    max_blocks: int = 1400  # search ceiling (a hit is reported as a lower bound); a network's max_depth wins
    resolution: float = 0.04  # bisection stops when (fail - fit) <= resolution * fit (and >= 1 block)
    growth: float = 2.0  # first phase: x growth from the start while it fits (/ growth while it fails)
    arm_budget_s: dict = field(default_factory=lambda: {"plain": 40, "checkpoint": 60, "save_on_cpu": 60,
                                                        "ours": 150})

    def searches(self) -> list[tuple[str | None, DepthFamily, dict]]:
        """(name, family, entry) per network; name None: the ResNet of the original record (its metrics
        keep their names). Refuses an unknown family or key, duplicate names, a search without a
        start or a budget, before any probe runs."""
        out = [(None, DEPTH_FAMILIES["resnet"], {"kw": self.model_kw})] if not self.networks else []
        for net in self.networks:
            if set(net) - DEPTH_NETWORK_KEYS or "family" not in net:
                raise ValueError(f"depth networks entries need family (one of {sorted(DEPTH_FAMILIES)}) and optional "
                                 f"{sorted(DEPTH_NETWORK_KEYS - {'family'})}; got {dict(net)}")
            if net["family"] not in DEPTH_FAMILIES:
                raise ValueError(f"depth networks: unknown family {net['family']!r}; known: {sorted(DEPTH_FAMILIES)}")
            out.append((net.get("name", net["family"]), DEPTH_FAMILIES[net["family"]], net))
        names = [n for n, _, _ in out]
        if len(set(names)) < len(names):
            raise ValueError(f"depth networks: names must be unique (they key the metrics); got {names}")
        for table in ("start_blocks", "arm_budget_s"):
            for key, value in getattr(self, table).items():
                if isinstance(value, dict) and key not in names:
                    raise ValueError(f"{table}.{key}: not a network of networks ({names})")
        for name in names:  # every (search, arm) has a start and a budget (per_search names a missing one)
            for arm in self.arms:
                self.per_search("start_blocks", name, arm), self.per_search("arm_budget_s", name, arm)
        return out

    def per_search(self, table: str, network: str | None, arm: str) -> float:
        return _per_search(getattr(self, table), table, network, arm)


def _per_search(values: dict, table: str, network: str | None, arm: str) -> float:
    """A per-search parameter (start, budget): ``values[network][arm]``, else ``values[arm]``."""
    by_network = values.get(network) if network is not None else None
    if isinstance(by_network, dict) and arm in by_network:
        return by_network[arm]
    if arm not in values or isinstance(values[arm], dict):
        where = f" (network {network})" if network is not None else ""
        raise ValueError(f"{table}: no value for arm {arm!r}{where}; give {{{arm}: n}}"
                         + (f" or {{{network}: {{{arm}: n}}}}" if network is not None else ""))
    return values[arm]


def conv_layers(blocks: int) -> int:
    """Conv layers of a bottleneck ResNet with ``blocks`` >= 4 blocks: 3 per block, the stem, 4 projections."""
    return 3 * blocks + 5


def search_largest(probe, start: int, lo_limit: int, hi_limit: int, resolution: float, budget_s: float, key: str,
                   log=None, what: str = "", growth: float = 2.0) -> tuple[int | None, str, list[dict]]:
    """Largest n in [lo_limit, hi_limit] with probe(n)["fits"] (repro.search.largest_fit: doubling
    from ``start``, or steps of ``growth``, then bisection to ``resolution`` of n, within ``budget_s``
    seconds). Every probe's result gets n under ``key`` (blocks, batch_size). Returns (best or None,
    bound, probes) where bound is 'exact' (a failing n within resolution above), 'ceiling' (hi_limit
    fit) or 'time' (budget ran out first). The depth and max-batch searches are this one with another n."""
    probes = []

    def fits(n):
        r = probe(n)
        r[key] = n
        probes.append(r)
        if log:
            log.info("%s probe %s=%d: %s (%.1fs)", what or key, key, n, r["reason"], r.get("wall_s", 0.0))
        return r["fits"]

    best, bound = largest_fit(fits, start, lo_limit, hi_limit, rel_tol=resolution, budget_s=budget_s, growth=growth)
    return best, bound, probes


def search_depth(probe, start: int, lo_limit: int, hi_limit: int, resolution: float, budget_s: float, log=None,
                 what: str = "depth", growth: float = 2.0):
    """search_largest over a family's depth knob (each probe's result gets the depth under ``depth``)."""
    return search_largest(probe, start, lo_limit, hi_limit, resolution, budget_s, "depth", log, what, growth)


def search_bracket(probes: list[dict], key: str) -> tuple[int, str]:
    """What a search left above its best: the smallest failing n (0: none failed) and the last
    failing probe's reason (what limited it; "" when none failed)."""
    fails = [r for r in probes if not r["fits"]]
    return min((r[key] for r in fails), default=0), (fails[-1]["reason"] if fails else "")


def probe_row(r: dict, measured: bool) -> dict:
    """The columns of a search's per-probe table that say how the probe went (depth, max_batch)."""
    return dict(fits=r["fits"], reason=r["reason"], measured=measured, peak_bytes=r.get("peak_bytes"),
                est_peak_bytes=(r.get("est_static_bytes") or 0) + (r.get("est_dynamic_bytes") or 0),
                step_s=r.get("step_s"), wall_s=r.get("wall_s"), momentum_on_host=r.get("momentum_on_host"),
                recomputed_segments=(r.get("plan") or {}).get("recomputed"),
                offloaded_bytes_per_step=(r.get("per_step") or {}).get("offloaded_bytes"))


@experiment(params=DepthParams)
def depth(p: DepthParams, ctx: Context) -> Result:
    """The deepest network of each family (DEPTH_FAMILIES: the bottleneck ResNet's blocks, the ViT's
    encoder layers, the GPT decoder's layers) each arm trains under the cap: one search per
    (network, arm) over the family's depth knob; the family changes only the builder and the unit.
    Metrics (prefix est_ on the CPU), with ``_<name>`` after the network's part for networks entries:
    max_blocks_<arm> / max_depth_<name>_<arm>; depth_ratio(_<name>) = ours / plain and
    depth_ratio_vs_<arm>(_<name>) = ours / another arm (the checkpoint one feeds throughput), each
    with a _low version over the arm's smallest failing depth (a time-capped baseline's true maximum
    lies below it); max_conv_layers_ours for the ResNet."""
    _check_arms(p.arms, ARMS + LAYER_ARMS, "arms")
    searches = p.searches()
    measured = ctx.device == "cuda"
    prefix = "" if measured else "est_"
    cap = p.cap_gib * GIB
    rows, summary, cache, metrics, tags = [], [], probe_cache(ctx), {}, {}
    for name, fam, net in searches:
        resnet = fam.model == "bottleneck_resnet"
        kw, lo = dict(net.get("kw") or {}), (p.min_blocks if resnet else fam.min_depth)
        hi = int(net.get("max_depth", p.max_blocks))
        table = []
        for arm in p.arms:
            def probe(n, arm=arm, kw=kw, net=net, fam=fam):
                spec = p.spec(arm, ctx, model=fam.model, model_kw={fam.knob: n, **kw}, cap_bytes=cap)
                spec.batch_size = net.get("batch_size", spec.batch_size)
                spec.image_size = net.get("image_size", spec.image_size)
                return p.probe(spec, ctx, cache)
            start = time.perf_counter()
            what = f"depth {name}/{arm}" if name else f"depth {arm}"
            best, bound, probes = search_depth(probe, int(p.per_search("start_blocks", name, arm)), lo, hi,
                                               p.resolution, p.per_search("arm_budget_s", name, arm), ctx.log, what,
                                               p.growth)
            extra = (lambda n: dict(blocks=n, conv_layers=conv_layers(n))) if resnet else (lambda n: {})
            rows += [dict(network=name or "resnet", family=fam.model, arm=arm, depth=r["depth"], **extra(r["depth"]),
                          **probe_row(r, measured)) for r in probes]
            min_fail, last_fail = search_bracket(probes, "depth")
            row = dict(network=name or "resnet", family=fam.model, unit=fam.unit, arm=arm, max_depth=best or 0,
                       min_fail_depth=min_fail, bound=bound, limited_by=last_fail, probes=len(probes),
                       search_s=time.perf_counter() - start)
            if resnet:
                row.update(max_blocks=best or 0, max_conv_layers=conv_layers(best) if best else 0,
                           min_fail_blocks=min_fail)
            table.append(row)
            ctx.log.info("%s: max %s %s (%s; failing probe: %s)", what, best, fam.unit, bound, last_fail)
        summary += table
        by = pd.DataFrame(table).set_index("arm")
        suffix = f"_{name}" if name else ""
        for a in by.index:
            key = f"max_blocks_{a}" if name is None else f"max_depth_{name}_{a}"
            metrics[prefix + key] = float(by.loc[a, "max_depth"])
            tags[f"bound_{a}{suffix}"] = by.loc[a, "bound"]
        if "ours" in by.index:
            if resnet:
                metrics[f"{prefix}max_conv_layers_ours{suffix}"] = float(conv_layers(by.loc["ours", "max_depth"])
                                                                         if by.loc["ours", "max_depth"] else 0)
            for base in (a for a in by.index if a != "ours"):
                key = ("depth_ratio" if base == "plain" else f"depth_ratio_vs_{base}") + suffix
                if by.loc[base, "max_depth"] > 0:
                    metrics[prefix + key] = float(by.loc["ours", "max_depth"] / by.loc[base, "max_depth"])
                    low = by.loc[base, "min_fail_depth"] or by.loc[base, "max_depth"]
                    metrics[f"{prefix}{key}_low"] = float(by.loc["ours", "max_depth"] / low)
    tags = {"memory_source": "cuda allocator under the cap" if measured else "liveness estimate vs the cap (CPU)",
            **tags}
    finish_cache(cache, tags)
    return Result(metrics=metrics, tables={"depth": pd.DataFrame(summary), "depth_probes": pd.DataFrame(rows)},
                  tags=tags)


# ---- largest batch ----------------------------------------------------------------------------
@dataclass
class MaxBatchParams(BenchParams):
    """The search sets every probe's batch size (``batch_size`` is not used). ``start_batch`` and
    ``budget_s`` are per arm ({arm: n}) and may name a network for per-(network, arm) values
    ({network: {arm: n}}), which win."""

    networks: list = field(default_factory=lambda: [dict(n) for n in PAPER_NETWORKS])  # name, model, kw, image_size
    arms: list = field(default_factory=lambda: ["plain", "ours"])
    cap_gib: float = 12.0  # per-process memory cap (on the CPU: the liveness estimate's cap)
    start_batch: dict = field(default_factory=lambda: {"plain": 64, "checkpoint": 128, "save_on_cpu": 64,
                                                       "ours": 128})
    min_batch: int = 1
    max_batch: int = 4096  # search ceiling (a hit is reported as a lower bound)
    resolution: float = 0.1  # bisection stops when (fail - fit) <= resolution * fit (and >= 1)
    growth: float = 2.0  # first phase: x growth from the start while it fits (/ growth while it fails)
    budget_s: dict = field(default_factory=lambda: {"plain": 30, "checkpoint": 40, "save_on_cpu": 40, "ours": 45})
    steps: int = 1

    def per_search(self, table: str, network: str, arm: str) -> float:
        """start_batch / budget_s of one (network, arm) search: its network's entry, else its arm's."""
        return _per_search(getattr(self, table), table, network, arm)

    def check(self, names: list[str]) -> None:
        """Keys of start_batch / budget_s are arms or networks: of ``networks``, or of PAPER_NETWORKS,
        whose entries the smoke block inherits (dicts merge); a misspelt network would silently take
        the per-arm value. Network names are unique, every search has a start and a budget, the search
        bounds are sane."""
        known = list(dict.fromkeys([*names, *(n["name"] for n in PAPER_NETWORKS)]))
        for table in ("start_batch", "budget_s"):
            for key, value in getattr(self, table).items():
                if isinstance(value, dict):
                    if key not in known or set(value) - set(ARMS):
                        raise ValueError(f"{table}.{key}: per-network entries need a network ({known}) and "
                                         f"arms of {list(ARMS)}; got {{{key}: {dict(value)}}}")
                elif key not in ARMS:
                    raise ValueError(f"{table}: {key!r} is neither an arm ({list(ARMS)}) nor a network ({known})")
        if len(set(names)) < len(names):
            raise ValueError(f"networks: names must be unique (they key the metrics); got {names}")
        for table in ("start_batch", "budget_s"):  # every search has both (per_search names a missing one)
            for name in names:
                for arm in self.arms:
                    self.per_search(table, name, arm)
        if not 1 <= self.min_batch <= self.max_batch or self.resolution < 0 or self.growth <= 1:
            raise ValueError(f"need 1 <= min_batch <= max_batch, resolution >= 0 and growth > 1; got min_batch="
                             f"{self.min_batch}, max_batch={self.max_batch}, resolution={self.resolution}, "
                             f"growth={self.growth}")


def check_arms_apply(arms: list[str], networks: list[dict], num_classes: int | None) -> None:
    """Refuse an arm that cannot train one of the networks (arms.unsupported: checkpoint_sequential
    on VGG-16's in-place ReLUs) before any probe runs, naming both: in a probe it would fail every
    batch size and spend its search's budget finding nothing. Models are built on the meta device
    (no memory, no initialisation cost)."""
    for net in networks:
        name, model, kw, _ = _network(net)
        with torch.device("meta"):
            units = flatten_units(build_model(model, num_classes, **kw))
        for arm in arms:
            if (why := unsupported(arm, units)) is not None:
                raise ValueError(f"arms: {arm!r} does not apply to network {name} ({model}): {why}; "
                                 f"drop {arm!r} from arms or {name} from networks")


@experiment(params=MaxBatchParams)
def max_batch(p: MaxBatchParams, ctx: Context) -> Result:
    _check_arms(p.arms, ARMS + LAYER_ARMS, "arms")
    networks = [_network(net) for net in p.networks]
    check_arms_apply(p.arms, p.networks, p.num_classes)
    p.check([name for name, *_ in networks])
    measured = ctx.device == "cuda"
    cap = p.cap_gib * GIB
    rows, summary, cache = [], [], probe_cache(ctx)
    for name, model, kw, size in networks:
        for arm in p.arms:
            def probe(n, arm=arm, model=model, kw=kw, size=size):
                spec = dataclasses.replace(p.spec(arm, ctx, model=model, model_kw=kw, cap_bytes=cap), batch_size=n,
                                           image_size=size or p.image_size)
                return p.probe(spec, ctx, cache)
            start = time.perf_counter()
            best, bound, probes = search_largest(probe, int(p.per_search("start_batch", name, arm)), p.min_batch,
                                                 p.max_batch, p.resolution, p.per_search("budget_s", name, arm),
                                                 "batch_size", ctx.log, f"max_batch {name}/{arm}", p.growth)
            rows += [dict(network=name, arm=arm, batch_size=r["batch_size"], **probe_row(r, measured)) for r in probes]
            min_fail, last_fail = search_bracket(probes, "batch_size")
            summary.append(dict(network=name, arm=arm, max_batch=best or 0, min_fail_batch=min_fail, bound=bound,
                                limited_by=last_fail, probes=len(probes), search_s=time.perf_counter() - start))
            ctx.log.info("max_batch %s/%s: %s (%s; failing probe: %s)", name, arm, best, bound, last_fail)
    table = pd.DataFrame(summary)
    prefix = "" if measured else "est_"
    metrics = {f"{prefix}max_batch_{r.network}_{r.arm}": float(r.max_batch) for r in table.itertuples()}
    ratios = {}
    for name, by in table.set_index("arm").groupby("network", sort=False):
        if {"plain", "ours"} <= set(by.index) and by.loc["plain", "max_batch"] > 0:
            ratios[name] = float(by.loc["ours", "max_batch"] / by.loc["plain", "max_batch"])
            metrics[f"{prefix}batch_ratio_{name}"] = ratios[name]
    if ratios and len(ratios) == len(networks):  # over the networks, so it needs every one
        metrics[f"{prefix}batch_ratio_min"] = min(ratios.values())
        metrics[f"{prefix}batch_ratio_max"] = max(ratios.values())
    tags = {"memory_source": "cuda allocator under the cap" if measured else "liveness estimate vs the cap (CPU)",
            **{f"bound_{r.network}_{r.arm}": r.bound for r in table.itertuples()}}
    finish_cache(cache, tags)
    return Result(metrics=metrics, tables={"max_batch": table, "max_batch_probes": pd.DataFrame(rows)}, tags=tags)


# ---- throughput -------------------------------------------------------------------------------
@dataclass
class ThroughputParams(BenchParams):
    arms: list = field(default_factory=lambda: list(ARMS))
    model_kw: dict = field(default_factory=dict)
    cap_gib: float = 12.0
    equal_depth_blocks: int = 64  # a depth every arm trains under the cap
    checkpoint_depth_blocks: int = 0  # ours vs checkpointing here; 0: max_blocks_checkpoint of inputs.depth
    warmup: int = 2
    steps: int = 5
    rounds: int = 1  # every arm measured this many times, in reversed order every other round:
    # the metrics take each arm's median, the table keeps every round (its spread is the run's noise)
    networks: list = field(default_factory=list)  # given: each network (name, model, kw, image_size,
    # batch_size) at its own size instead of the bottleneck ResNet at two depths (throughput_networks)
    matched: list = field(default_factory=list)  # arms ours is also run against at equal peak memory:
    # ours' budget = that arm's measured dynamic peak (CUDA only)


def _throughput_row(arm: str, rnd: int, r: dict, **where) -> dict:
    plan, per_step = r.get("plan") or {}, r.get("per_step") or {}
    return dict(arm=arm, **where, round=rnd + 1, fits=r["fits"], reason=r["reason"],
                images_per_s=r.get("images_per_s"), step_s=r.get("step_s"), peak_bytes=r.get("peak_bytes"),
                dynamic_bytes=r.get("dynamic_bytes"),
                est_peak_bytes=(r.get("est_static_bytes") or 0) + (r.get("est_dynamic_bytes") or 0),
                segments=plan.get("segments"), recomputed_segments=plan.get("recomputed"),
                recomputed_units=plan.get("recomputed_units"), memory_centric=plan.get("memory_centric"),
                speed_working_set=plan.get("speed_working_set"),
                checkpoint_bytes=plan.get("est_checkpoints"), pool_budget_bytes=plan.get("pool_budget_bytes"),
                peak_resident_bytes=(r.get("pool") or {}).get("peak_resident_bytes"), sgd=r.get("sgd"),
                **{f"{k}_per_step": v for k, v in per_step.items()})


def matched_budget(r: dict) -> float | None:
    """Ours' dynamic-memory budget to match an arm's peak: the arm's measured dynamic peak (None where
    nothing was measured: CPU, or the arm did not fit)."""
    return float(r["dynamic_bytes"]) if r.get("fits") and r.get("dynamic_bytes") is not None else None


def throughput_networks(p: ThroughputParams, ctx: Context) -> Result:
    """Every arm on each network at its own size, side by side in one run: images/s and peak memory;
    then, per arm of ``matched`` (torch.compile under activation_memory_budget), ours again with its
    budget set to that arm's measured dynamic peak: the issue's comparison at equal peak memory.
    Metrics per network: images_per_s_<net>_<arm>, peak_bytes_<net>_<arm>, speed_vs_<arm>_<net>
    (ours / arm, same batch), speed_vs_<arm>_matched_<net> and peak_ratio_vs_<arm>_matched_<net>
    (ours' peak / the arm's: at most ~1 for the speed ratio to be at equal peak), and over the
    networks speed_vs_amb_matched_min (the smallest matched ratio over every network and amb arm)."""
    _check_arms(p.matched, (), "matched")
    bad = [a for a in p.matched if a not in p.arms or a == "ours"]
    if bad or (p.matched and "ours" not in p.arms):
        raise ValueError(f"matched: arms {bad or p.matched} must be in arms (with ours), not ours itself")
    cap, rows, measured = p.cap_gib * GIB, [], ctx.device == "cuda"
    metrics, matched_ratios = {}, []
    for net in p.networks:
        name, model, kw, size = _network(net, batch=True)

        def spec(arm, **extra):
            s = p.spec(arm, ctx, model=model, model_kw=kw, cap_bytes=cap, **extra)
            s.batch_size, s.image_size = net.get("batch_size", s.batch_size), size or p.image_size
            return s

        results: dict[str, list] = {}
        schedule = [(rnd, arm) for rnd in range(p.rounds) for arm in (p.arms[::-1] if rnd % 2 else p.arms)]
        for rnd, arm in schedule:
            r = p.probe(spec(arm), ctx)
            ctx.log.info("throughput %s/%s (round %d): %s, %.1f images/s", name, arm, rnd + 1, r["reason"],
                         r.get("images_per_s", float("nan")))
            results.setdefault(arm, []).append(r)
            rows.append(_throughput_row(arm, rnd, r, network=name, matched_to=None))
        for target in p.matched:
            budgets = [b for r in results[target] if (b := matched_budget(r)) is not None]
            if not budgets:
                ctx.log.info("throughput %s: no measured peak of %s to match (CPU, or it did not fit)", name, target)
                continue
            budget = min(budgets)  # the arm's lowest peak over rounds: ours gets no more than that
            for rnd in range(p.rounds):
                r = p.probe(spec("ours", budget_bytes=budget), ctx)
                ctx.log.info("throughput %s/ours at %s's peak (%.3g GiB dynamic): %s, %.1f images/s", name, target,
                             budget / GIB, r["reason"], r.get("images_per_s", float("nan")))
                rows.append(_throughput_row("ours", rnd, r, network=name, matched_to=target))
        table = pd.DataFrame(rows)
        here = table[(table.network == name) & table.fits]

        def median(arm, column, matched_to=None):
            hit = here[(here.arm == arm) & (here.matched_to.isna() if matched_to is None
                                            else here.matched_to == matched_to)][column].dropna()
            return float(hit.median()) if len(hit) else None

        for arm in p.arms:
            if (v := median(arm, "images_per_s")) is not None:
                metrics[f"images_per_s_{name}_{arm}"] = v
            if (v := median(arm, "peak_bytes")) is not None:
                metrics[f"peak_bytes_{name}_{arm}"] = v
            ours, other = median("ours", "images_per_s"), median(arm, "images_per_s")
            if arm != "ours" and ours is not None and other:
                metrics[f"speed_vs_{arm}_{name}"] = ours / other
        for target in p.matched:
            ours, other = median("ours", "images_per_s", target), median(target, "images_per_s")
            if ours is not None and other:
                metrics[f"speed_vs_{target}_matched_{name}"] = ours / other
                if target.startswith("amb_"):
                    matched_ratios.append(ours / other)
            peak_ours, peak_other = median("ours", "peak_bytes", target), median(target, "peak_bytes")
            if peak_ours is not None and peak_other:
                metrics[f"peak_ratio_vs_{target}_matched_{name}"] = peak_ours / peak_other
    amb = [a for a in p.matched if a.startswith("amb_")]
    if amb and len(matched_ratios) == len(amb) * len(p.networks):  # "on every network": needs every one
        metrics["speed_vs_amb_matched_min"] = min(matched_ratios)
    table = pd.DataFrame(rows)
    if p.rounds > 1 and len(table[table.fits]):
        fitted = table[table.fits].fillna({"matched_to": ""})
        spread = fitted.groupby(["network", "arm", "matched_to"]).images_per_s.agg(lambda s: s.max() / s.min() - 1)
        metrics["round_spread_max"] = float(spread.max())
    tags = {"timing": "cuda" if measured else "cpu (smoke: code path only)",
            "matched_peak": "ours at each matched arm's measured dynamic peak" if measured else
            "not run: matching needs the CUDA allocator's measured peaks"}
    return Result(metrics=metrics, tables={"throughput": table}, tags=tags)


@experiment(params=ThroughputParams)
def throughput(p: ThroughputParams, ctx: Context) -> Result:
    _check_arms(p.arms, ARMS + LAYER_ARMS, "arms")
    if p.rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {p.rounds}")
    if p.networks:
        return throughput_networks(p, ctx)
    if p.matched:
        raise ValueError("matched needs networks (the bottleneck-ResNet mode compares at equal depth)")
    cap = p.cap_gib * GIB
    deep = p.checkpoint_depth_blocks
    if deep <= 0:
        if "depth" not in ctx.inputs:
            raise ValueError("throughput: set checkpoint_depth_blocks > 0 or pass inputs.depth=<depth record.json>")
        depth_metrics = records.read(ctx.inputs["depth"].parent)["metrics"]
        key = next((k for k in ("max_blocks_checkpoint", "est_max_blocks_checkpoint") if k in depth_metrics), None)
        if key is None or depth_metrics[key] <= 0:
            raise ValueError(f"inputs.depth ({ctx.inputs['depth']}) has no positive max_blocks_checkpoint metric")
        deep = int(depth_metrics[key])
    runs = [(arm, p.equal_depth_blocks) for arm in p.arms]
    runs += [(arm, deep) for arm in ("checkpoint", "ours", *LAYER_ARMS)
             if arm in p.arms and deep != p.equal_depth_blocks]
    schedule = [(rnd, run) for rnd in range(p.rounds) for run in (runs[::-1] if rnd % 2 else runs)]
    rows = []
    for rnd, (arm, blocks) in schedule:
        r = p.probe(p.spec(arm, ctx, model="bottleneck_resnet", model_kw={"blocks": blocks, **p.model_kw},
                           cap_bytes=cap), ctx)
        ctx.log.info("throughput %s at %d blocks (round %d): %s, %.1f images/s", arm, blocks, rnd + 1, r["reason"],
                     r.get("images_per_s", float("nan")))
        rows.append(_throughput_row(arm, rnd, r, blocks=blocks))
    table = pd.DataFrame(rows)

    def ips(arm, blocks):  # the median over rounds
        hit = table[(table.arm == arm) & (table.blocks == blocks) & table.fits]
        return float(hit.images_per_s.median()) if len(hit) else None

    metrics = {f"images_per_s_{a}": v for a in p.arms if (v := ips(a, p.equal_depth_blocks)) is not None}
    ours_eq, ours_deep = ips("ours", p.equal_depth_blocks), ips("ours", deep)
    for key, num, den in (("speed_vs_plain", ours_eq, ips("plain", p.equal_depth_blocks)),
                          ("speed_vs_checkpoint_equal_depth", ours_eq, ips("checkpoint", p.equal_depth_blocks)),
                          ("speed_vs_save_on_cpu", ours_eq, ips("save_on_cpu", p.equal_depth_blocks)),
                          ("speed_vs_checkpoint", ours_deep, ips("checkpoint", deep)),
                          # issue 45: the layer plan's arm at checkpointing's maximum depth, where it is an arm
                          ("speed_vs_checkpoint_ours_layer", ips("ours_layer", deep), ips("checkpoint", deep))):
        if num is not None and den:
            metrics[key] = num / den
    fitted = table[table.fits]
    if p.rounds > 1 and len(fitted):  # the largest max/min - 1 of one arm's rounds: the run's own noise
        spread = fitted.groupby(["arm", "blocks"]).images_per_s.agg(lambda s: s.max() / s.min() - 1)
        metrics["round_spread_max"] = float(spread.max())
    return Result(metrics=metrics, tables={"throughput": table},
                  tags={"equal_depth_blocks": p.equal_depth_blocks, "checkpoint_depth_blocks": deep,
                        "timing": "cuda" if ctx.device == "cuda" else "cpu (smoke: code path only)"})
