"""CANS's latency surfaces (``edge_load``): per-layer latency of each net on the device and on the
edge, the edge measured while N clients share it.

- device: repro.split.profile at batch 1 on this CPU at each of ``device_threads`` (not a phone or a
  Jetson: the bandit's device types scale these times by an assumed slowdown);
- edge under load: ``clients`` threads, each a client with its own input (and its own CUDA stream on
  the GPU) running the net unit by unit at batch 1, all started together; each unit's time is the
  wall time from its launch to its stream's completion, as the client sees it; the median over the
  clients and the repeats. The GPU at paper scale; at smoke scale, without a GPU, the CPU stands in
  (each client one thread) and the record says so.
A unit is a backbone layer of the net's last exit, or its classifier head as a whole; the weights are
untrained (latency does not depend on their values)."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from dataclasses import dataclass, field

import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.split import exits, profile


def _nets() -> list[dict]:
    return [{"name": "alexnet", "kw": {"width": 1.0}}, {"name": "resnet", "kw": {"depth": 20, "width": 16}}]


@dataclass
class EdgeLoadParams:
    nets: list[dict] = field(default_factory=_nets)  # name (repro.split.exits) and kw
    device_threads: list[int] = field(default_factory=lambda: [1])  # the device: this CPU at each count
    clients: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 6, 8, 12, 16])  # concurrent clients on the edge
    warmup: int = 5
    repeats: int = 30  # forward passes per client and client count


def units(net: exits.ExitNet) -> list:
    """The backbone layers of the last exit, then its head as one unit."""
    return [*net.layers[: net.attach[-1]], net.heads[-1]]


def concurrent_times(net: exits.ExitNet, device: str, clients: int, warmup: int, repeats: int) -> list[float]:
    """Per unit, the median time (s) a client sees while ``clients`` clients run the net together."""
    import torch

    dev = torch.device(device)
    net = net.to(dev).eval()
    parts = units(net)
    samples: list[list[float]] = [[] for _ in parts]
    lock, start = threading.Lock(), threading.Barrier(clients)
    errors: list[BaseException] = []

    def client(k: int):
        try:
            stream = torch.cuda.Stream(dev) if dev.type == "cuda" else None
            x0 = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(k)).to(dev)
            if stream is not None:
                stream.wait_stream(torch.cuda.current_stream(dev))  # x0 was copied on the default stream
            mine: list[list[float]] = [[] for _ in parts]
            with torch.no_grad(), (torch.cuda.stream(stream) if stream else contextlib.nullcontext()):
                start.wait()
                for r in range(warmup + repeats):
                    h = x0
                    for i, unit in enumerate(parts):
                        t0 = time.perf_counter()
                        h = unit(h)
                        if stream is not None:
                            stream.synchronize()
                        if r >= warmup:
                            mine[i].append(time.perf_counter() - t0)
            with lock:
                for i, m in enumerate(mine):
                    samples[i] += m
        except BaseException as e:  # noqa: BLE001 (re-raised in the caller's thread)
            errors.append(e)
            start.abort()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [statistics.median(s) for s in samples]


def device_rows(df: pd.DataFrame, exit_index: int) -> pd.DataFrame:
    """repro.split.profile's rows of a net reduced to CANS's units: the backbone layers, then the last
    exit's head parts summed into one unit (kind 'head')."""
    layers = df[df["where"] == "layer"].sort_values("index")
    head = df[df["where"] == f"head{exit_index}"]
    head_row = dict(kind="head", flops=head["flops"].sum(), in_bytes=int(head["in_bytes"].iloc[0]),
                    out_bytes=int(head["out_bytes"].iloc[-1]), time_s=head["time_s"].sum())
    out = pd.concat([layers[list(head_row)], pd.DataFrame([head_row])], ignore_index=True)
    return out.assign(unit=range(len(out)))


@experiment(params=EdgeLoadParams, needs_gpu=False)
def edge_load(p: EdgeLoadParams, ctx: Context) -> Result:
    import torch

    if not p.clients or min(p.clients) < 1 or sorted(set(p.clients)) != list(p.clients):
        raise ValueError(f"clients: need increasing counts >= 1, got {p.clients}")
    gpu = ctx.device.startswith("cuda")
    rows, metrics, tags = [], {}, {}
    for spec in p.nets:
        torch.manual_seed(ctx.seed)
        net = exits.build(spec["name"], **spec["kw"]).eval()
        for threads in p.device_threads:
            df = profile.profile(net, "cpu", threads, p.warmup, p.repeats)
            dev = device_rows(df, len(net.heads) - 1)
            rows.append(dev.assign(net=spec["name"], role="device", threads=threads, clients=0))
            tags[f"device_{threads}"] = profile.processor_name("cpu", threads)
            metrics[f"{spec['name']}_device{threads}_ms"] = float(dev["time_s"].sum() * 1e3)
        with profile.threads(1) if not gpu else contextlib.nullcontext():  # the CPU stand-in: each client one thread
            for k in ctx.progress(p.clients, desc=f"{spec['name']} edge clients"):
                times = concurrent_times(net, ctx.device, k, p.warmup, p.repeats)
                rows.append(dev.drop(columns="time_s").assign(time_s=times, net=spec["name"], role="edge",
                                                              threads=0, clients=k))
                metrics[f"{spec['name']}_edge_c{k}_ms"] = float(sum(times) * 1e3)
        lo, hi = p.clients[0], p.clients[-1]
        metrics[f"{spec['name']}_edge_slowdown_c{hi}"] = metrics[f"{spec['name']}_edge_c{hi}_ms"] / metrics[
            f"{spec['name']}_edge_c{lo}_ms"]
    tags.update(edge="GPU" if gpu else "CPU stand-in (no GPU: the edge here is this CPU, one thread per client)",
                edge_processor=profile.processor_name(ctx.device if gpu else "cpu", 1))
    return Result(metrics=metrics, tables={"layers": pd.concat(rows, ignore_index=True)}, tags=tags)
