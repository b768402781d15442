"""The two processors a device-edge experiment measures on, named alike in every paper's record: the
device (this CPU at each thread count: not a Raspberry Pi or a TX2) and the edge (the GPU the run
holds; without one, at smoke scale, the CPU at all its threads stands in and the tags say so)."""

from __future__ import annotations

import pandas as pd

from repro.split.profile import processor_name

STAND_IN = "CPU stand-in (no GPU: the edge here is this CPU at all its threads)"


def processors(run_device: str, device_threads: list[int], edge_threads: int = 0) -> list[tuple[str, str, int]]:
    """(role, torch device, threads): the device at each of ``device_threads``, then the edge (the GPU
    when ``run_device`` is CUDA, else the CPU at ``edge_threads``, 0 = all its threads)."""
    import torch

    if not device_threads or min(device_threads) < 1:
        raise ValueError(f"device_threads: need thread counts >= 1, got {device_threads}")
    edge = "cuda" if run_device.startswith("cuda") else "cpu"
    return [("device", "cpu", t) for t in device_threads] + [("edge", edge, edge_threads or torch.get_num_threads())]


def recorded_threads(device: str, threads: int) -> int:
    """The ``threads`` column of a profile row: the CPU's thread count, 0 on a GPU."""
    return threads if device == "cpu" else 0


def tags(runs: list[tuple[str, str, int]]) -> dict[str, str]:
    """Each device thread count's processor name, the edge's kind and name."""
    out = {f"device_{t}": processor_name(dev, t) for role, dev, t in runs if role == "device"}
    (_, edge, threads), = [r for r in runs if r[0] == "edge"]
    out.update(edge="GPU" if edge == "cuda" else STAND_IN, edge_processor=processor_name(edge, threads))
    return out


def backbone_metrics(layers: pd.DataFrame) -> dict[str, float]:
    """``<net>_device<threads>_backbone_ms`` and ``<net>_edge_backbone_ms``: the sum of the backbone
    layers' median times in profile rows (with net, role and threads columns)."""
    rows = layers[layers["where"] == "layer"]
    return {f"{net}_{role}{threads if role == 'device' else ''}_backbone_ms": float(g["time_s"].sum() * 1e3)
            for (net, role, threads), g in rows.groupby(["net", "role", "threads"])}
