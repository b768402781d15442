"""The model checked against real runs: DDP iterations on gloo CPU processes (loopback), each arm the
hook can express timed, and the model's prediction for the same timeline and a link fitted to gloo's
own all-reduce times. The record states the model's error per arm."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import pandas as pd

from repro import multigpu
from repro.experiment import Context, Result, experiment
from repro.papers.caramel import links, model as sim, plan, timeline
from repro.papers.caramel.workloads import Workload
from repro.sim.params import count

ARMS = ("no_overlap", "ddp", "caramel_ddp")  # what runs on a real DDP (the model's other arms cannot)


def _tiny() -> Workload:
    return Workload("resnet20_w16", "resnet20", batch=16, image_size=32, kw={"width": 16})


@dataclass
class GlooParams:
    processes: int = 2  # gloo CPU processes (the machine's cores bound this)
    workload: Workload = field(default_factory=_tiny)
    fit_bytes: list[int] = field(default_factory=lambda: [4096, 65536, 262144, 1048576, 4194304])
    fit_repeats: int = 10
    warmup: int = 3
    iterations: int = 10  # timed iterations per arm (median)
    caramel: plan.CaramelParams = field(default_factory=plan.CaramelParams)
    threads: int = 1  # torch threads per process: the processes share the cores


def _step_no_overlap(net, messages, params, x, loss_fn, world):
    import torch
    import torch.distributed as dist

    loss_fn(net(x)).backward()
    for m in messages:
        grads = [params[i].grad for i in m.params]
        flat = torch.cat([g.reshape(-1) for g in grads]).div_(world)
        dist.all_reduce(flat)
        for g, part in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g))


def worker(rank: int, world: int, p: GlooParams):
    import torch
    import torch.distributed as dist

    from repro.papers.caramel.hook import wrap

    torch.set_num_threads(p.threads)
    torch.manual_seed(0)
    device = torch.device("cpu")
    net = p.workload.build()
    x, loss_fn = p.workload.batch_fn(net, device, seed=rank)
    dist.barrier()
    tl = timeline.record(net, x, loss_fn, device, p.warmup + p.iterations, p.iterations, label=p.workload.name)
    fit = []
    for n in p.fit_bytes:
        buf = torch.ones(max(1, n // 4))
        for _ in range(2):
            dist.all_reduce(buf)
        dist.barrier()
        times = []
        for _ in range(p.fit_repeats):
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            times.append(time.perf_counter() - t0)
        fit.append({"bytes": n, "seconds": min(times)})  # the least-disturbed run: 2 cores are shared
    link = links.fit([f["bytes"] for f in fit], [f["seconds"] for f in fit], world, name="gloo_loopback")
    shared = [(tl, fit, link)]  # every rank plans from rank 0's timeline and link: the buckets must match
    dist.broadcast_object_list(shared, src=0)
    tl, fit, link = shared[0]
    caramel_plan = plan.caramel(tl, world, link, p.caramel)
    steps, nets = {}, {}
    for arm in ARMS:
        torch.manual_seed(0)
        base = nets[arm] = p.workload.build()
        params = list(base.parameters())
        if arm == "no_overlap":
            messages = plan.no_overlap(tl)
            steps[arm] = lambda base=base, params=params: _step_no_overlap(base, messages, params, x, loss_fn, world)
        else:
            caps = plan.bucket_caps_mb(caramel_plan) if arm == "caramel_ddp" else None
            chunk = int(max(p.caramel.chunk_mb * plan.MIB, plan.batch_bytes(world, link, p.caramel.efficiency)))
            ddp, _ = wrap(base, caps, chunk if arm == "caramel_ddp" else None, world)
            steps[arm] = lambda ddp=ddp: loss_fn(ddp(x)).backward()
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for k in range(p.warmup + p.iterations):  # arms interleaved, so drift and neighbours hit all alike
        for arm in ARMS:
            nets[arm].zero_grad(set_to_none=True)
            dist.barrier()
            t0 = time.perf_counter()
            steps[arm]()
            if k >= p.warmup:
                times[arm].append(time.perf_counter() - t0)
    measured = {arm: statistics.median(t) for arm, t in times.items()}
    return {"timeline": tl, "fit": fit, "link": link, "measured": measured}


@experiment(params=GlooParams, needs_gpu=False)
def gloo(p: GlooParams, ctx: Context) -> Result:
    """Measured vs modelled iteration time per arm on gloo loopback; the model's error."""
    count("processes", p.processes, minimum=2)
    count("iterations", p.iterations)
    out = multigpu.launch(worker, p.processes, backend="gloo", args=(p,), timeout_s=540)[0]
    tl, link = out["timeline"], out["link"]
    rows = []
    for arm in ARMS:
        # the model's iteration has no optimizer step and here starts at forward, as the timed step does
        pred = sim.run_arm(arm, tl, p.processes, link, p.caramel)["iteration_s"]
        meas = out["measured"][arm]
        rows.append({"arm": arm, "measured_s": meas, "model_s": pred, "error": pred / meas - 1})
    table = pd.DataFrame(rows)
    metrics = {"model_error_max": float(table["error"].abs().max()),
               "fitted_gbps": link.gbps, "fitted_alpha_us": link.alpha_us,
               "compute_ms": float((tl["forward_s"].iloc[0] + tl["backward_s"].iloc[0]) * 1e3)}
    for r in rows:
        metrics[f"measured_ms_{r['arm']}"] = r["measured_s"] * 1e3
        metrics[f"model_ms_{r['arm']}"] = r["model_s"] * 1e3
        metrics[f"error_{r['arm']}"] = r["error"]
    return Result(metrics=metrics, tables={"arms": table, "fit": pd.DataFrame(out["fit"]), "timeline": tl},
                  tags={"kind": "model", "backend": "gloo", "processes": str(p.processes)})
