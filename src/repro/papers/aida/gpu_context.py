"""Context for AIDA's rows, no verdict: EIE's benchmark layers (ap_model.EIE_LAYERS) at batch 1 on
the GPU, measured as a GPU runs them today: the pruned layer as a CSR SpMV (torch's sparse CSR
matrix-vector product, cuSPARSE on a GPU) and the unpruned layer as a dense GEMV (cuBLAS), in fp32
and fp16, beside the model's EIE and AIDA times for the same layer.

The weights are random with each layer's pruned density (Han et al.'s, as EIE's Table III lists),
placed uniformly (a pruned layer's rows are not uniform; cuSPARSE's SpMV is little sensitive to it
at these densities); the activation vector is dense (cuSPARSE does not skip zero activations, EIE
does: the modelled EIE counts only the nonzero activations' columns). Useful operations are
EIE's: 2 x nonzero weights x the activation density. Each time is the median over repeats of the
mean of ``calls`` back-to-back calls between two CUDA events (one call of a few microseconds is at
the event's resolution)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.papers.aida import ap_model
from repro.timing import time_cpu, time_cuda


@dataclass
class ContextParams:
    layers: list[str] = field(default_factory=lambda: [layer.name for layer in ap_model.EIE_LAYERS])  # EIE_LAYERS names
    scale: float = 1.0          # both dimensions of every layer times this (smoke: small layers)
    dtypes: list[str] = field(default_factory=lambda: ["float32", "float16"])
    calls: int = 50             # back-to-back calls per timing
    warmup: int = 3
    repeats: int = 20
    seed: int = 0
    ap: ap_model.APParams = field(default_factory=ap_model.APParams)
    eie: ap_model.EIEParams = field(default_factory=ap_model.EIEParams)


def scaled_layers(p: ContextParams) -> list[ap_model.Layer]:
    """The named EIE layers, each dimension times ``scale`` (at least 8)."""
    known = {layer.name: layer for layer in ap_model.EIE_LAYERS}
    unknown = [n for n in p.layers if n not in known]
    if unknown:
        raise ValueError(f"layers: unknown {unknown}; known: {', '.join(known)}")
    if not (p.scale > 0 and math.isfinite(p.scale)):
        raise ValueError(f"scale must be a positive finite number, got {p.scale!r}")
    return [ap_model.Layer(n, max(8, round(known[n].n_in * p.scale)), max(8, round(known[n].n_out * p.scale)),
                           known[n].weight_density) for n in p.layers]


def pruned_csr(layer: ap_model.Layer, rng: np.random.Generator):
    """(crow, col, values) of a layer with round(n_in x n_out x density) nonzeros placed uniformly
    (sorted, distinct positions)."""
    total = layer.n_in * layer.n_out
    nnz = max(1, round(total * layer.weight_density))
    flat = np.sort(rng.choice(total, size=nnz, replace=False))
    rows, cols = np.divmod(flat, layer.n_in)
    crow = np.zeros(layer.n_out + 1, dtype=np.int64)
    np.add.at(crow, rows + 1, 1)
    return np.cumsum(crow), cols.astype(np.int64), rng.standard_normal(nnz).astype(np.float32)


def _timer(device: str, p: ContextParams):
    if device == "cuda":
        return lambda fn: time_cuda(fn, warmup=p.warmup, repeats=p.repeats).median_s / p.calls
    return lambda fn: time_cpu(fn, warmup=1, repeats=max(1, p.repeats // 4)).median_s / p.calls


def measure_layer(layer: ap_model.Layer, dtype: str, device: str, p: ContextParams, rng) -> dict:
    """One layer, one dtype: CSR SpMV and dense GEMV seconds per call, checked against each other."""
    import torch

    tdt = getattr(torch, dtype)
    crow, col, val = pruned_csr(layer, rng)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        csr = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col), torch.from_numpy(val),
                                      size=(layer.n_out, layer.n_in), check_invariants=True).to(device=device, dtype=tdt)
    dense = csr.to_dense()
    x = torch.from_numpy(rng.standard_normal((layer.n_in, 1)).astype(np.float32)).to(device=device, dtype=tdt)
    y_sparse, y_dense = (csr @ x).float(), (dense @ x).float()
    scale = y_dense.abs().max().item() or 1.0
    err = (y_sparse - y_dense).abs().max().item() / scale
    tol = 2e-2 if dtype == "float16" else 1e-4
    if not err <= tol:
        raise AssertionError(f"{layer.name} {dtype}: CSR SpMV and dense GEMV differ by {err:.3g} (relative)")

    def repeat(op):
        def run():
            for _ in range(p.calls):
                op()
        return run

    timer = _timer(device, p)
    spmv_s = timer(repeat(lambda: csr @ x))
    gemv_s = timer(repeat(lambda: dense @ x))
    nnz = int(crow[-1])
    useful = 2.0 * nnz * p.eie.act_density
    return dict(layer=layer.name, dtype=dtype, n_in=layer.n_in, n_out=layer.n_out, nnz=nnz,
                weight_density=layer.weight_density, spmv_s=spmv_s, gemv_s=gemv_s,
                spmv_useful_gops=useful / spmv_s / 1e9, gemv_gops=2.0 * layer.n_in * layer.n_out / gemv_s / 1e9,
                spmv_over_gemv=gemv_s / spmv_s, rel_err=err)


def _geomean(values) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


@experiment(params=ContextParams, needs_gpu=False)
def gpu_context(p: ContextParams, ctx: Context) -> Result:
    """layers.csv: per layer and dtype the measured SpMV / GEMV times beside the modelled EIE and AIDA
    times of the same layer; metrics: geomeans of the modelled EIE time over the GPU's SpMV time."""
    import torch

    if p.calls < 1 or p.repeats < 1:
        raise ValueError("calls and repeats must be at least 1")
    torch.manual_seed(p.seed)
    rng = np.random.default_rng(p.seed)
    rows = []
    for layer in ctx.progress(scaled_layers(p), desc="EIE layers"):
        model = {**ap_model.eie_layer(layer, p.eie), **ap_model.ap_layer(layer, p.ap, p.eie.act_density)}
        for dtype in p.dtypes:
            if ctx.device == "cpu" and dtype == "float16":
                continue  # CPU sparse CSR has no fp16 product
            r = measure_layer(layer, dtype, ctx.device, p, rng)
            rows.append({**r, "eie_model_s": model["eie_s"], "aida_model_s": model["ap_s"],
                         "eie_over_spmv": model["eie_s"] / r["spmv_s"], "aida_over_spmv": model["ap_s"] / r["spmv_s"]})
    df = pd.DataFrame(rows)
    metrics = {}
    for dtype, g in df.groupby("dtype"):
        metrics[f"{dtype}_eie_model_over_spmv_geomean"] = _geomean(g["eie_over_spmv"])
        metrics[f"{dtype}_aida_model_over_spmv_geomean"] = _geomean(g["aida_over_spmv"])
        metrics[f"{dtype}_spmv_over_gemv_geomean"] = _geomean(g["spmv_over_gemv"])
        metrics[f"{dtype}_spmv_us_max"] = float(g["spmv_s"].max() * 1e6)
    tags = {"kind": "context", "processor": torch.cuda.get_device_name() if ctx.device == "cuda" else "CPU",
            "note": "no verdict: a GPU at batch 1 beside the modelled EIE and AIDA"}
    return Result(metrics=metrics, tables={"layers": df}, tags=tags)
