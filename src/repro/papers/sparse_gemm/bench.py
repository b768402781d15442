"""The sparse-GEMM benchmark (claims tw.speedup, sbw.speedup): every method side by side on one
problem, in one run.

Problems: BERT-base GEMMs (M = 12800 tokens; K x N = 768x768, 768x3072, 3072x768) and 4096x4096,
4096x11008, 11008x4096 at M = 8192; sparsity 50, 75, 87.5 %; fp16 and bf16 (fp32 accumulate). Every
method computes Y = W^T X for X (K, M) random normal and W (K, N) random normal pruned by magnitude
to its own pattern at the point's sparsity:

  dense          cuBLAS (torch.mm), the better of the feature-major (W^T X) and token-major (X^T W) layouts
  ideal          cuBLAS on the physically shrunk matrices: K and N both scaled by sqrt(1 - s) (the
                 same useful work as every pattern at sparsity s), better layout
  nm24           2:4 on the sparse tensor cores (torch.sparse.to_sparse_semi_structured), 50 % whatever s
  bsr            torch BSR (blocks of bsr_block, the blocks with the largest L2 norm) @ dense
  csr            cuSPARSE through torch CSR (unstructured magnitude) @ dense
  identity       ours on the unpruned layer (patterns.identity: tiles of ``tile`` columns, all of K): the
                 dense GEMM's own work through our kernel, so dense / identity is the kernel's quality,
                 the ceiling of what any of our packings can reach before sparsity enters
  tw, sbw        ours: the Triton gather GEMM on the TW / Shfl-BW packing (tuned per problem)
  tvw            TW at 2(1 - s) density + 2:4 inside the tiles, cuSPARSELt per tile (semi_structured.TVW)
  tvw_dense_mma  the TVW packing through the gather GEMM (dense tensor cores: what 2:4 adds)

Timing (GPU): CUDA events around one replay of a CUDA graph that holds enough calls to fill
sample_ms (launch overhead gone for every method alike), median of ``repeats`` replays
(repro.timing.time_cuda) divided by the calls; calls rotate over copies of X holding >= rotate_bytes
(> the 60 MB L2). A method a graph cannot capture is timed as the same calls queued eagerly
(``timing`` says which). On the CPU the same harness runs tiny shapes in Triton's interpreter:
times are CPU wall clock, for correctness only.

Correctness: every method's output (outputs ours writes are NaN-poisoned first) against the fp32
product of its own dense-equivalent pruned weight; ok = max |Y - ref| / max |ref| <= tolerance.

Table ``points``: one row per (dtype, shape, sparsity, method): density (kept share of W), t_us,
tflops (useful: 2 M nnz / t), speedup (dense / method), frac_ideal (ideal / method), kernel_quality
(dense / identity of the shape, beside every point), err, ok, timing, note (why a method did not run).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from repro.experiment import Context, Result, experiment
from repro.papers.sparse_gemm import patterns
from repro.papers.sparse_gemm.packing import Packed, pack
from repro.papers.sparse_gemm.tuner import Tuner, shape_key, tolerance
from repro.timing import cuda_graph, time_cpu, time_cuda

MIB = 1 << 20
METHODS = ("dense", "ideal", "identity", "nm24", "bsr", "csr", "tw", "sbw", "tvw", "tvw_dense_mma")
BIG = 2 ** 32  # M * K * N from which the kernel-quality target holds (issue 42)
OURS = ("tw", "sbw", "tvw", "tvw_dense_mma")


@dataclass
class BenchParams:
    shapes: list = field(default_factory=lambda: [[12800, 768, 768], [12800, 768, 3072], [12800, 3072, 768],
                                                  [8192, 4096, 4096], [8192, 4096, 11008], [8192, 11008, 4096]])
    sparsities: list = field(default_factory=lambda: [0.5, 0.75, 0.875])
    dtypes: list = field(default_factory=lambda: ["float16", "bfloat16"])
    tile: int = 128  # TW / TVW tile width along N (the paper's 128)
    vector: int = 64  # Shfl-BW group: output columns sharing their kept K rows (assumed; the paper tries 32-128)
    bsr_block: int = 64  # BSR block edge
    configs: list = field(default_factory=list)  # gather-GEMM candidates [bm, bk, warps, stages]; [] = built-in
    warmup: int = 3
    repeats: int = 20  # timed samples per method
    tune_repeats: int = 5  # timed samples per candidate while tuning
    sample_ms: float = 2.0  # GPU time per sample: calls captured together
    max_inner: int = 200  # at most this many calls per sample
    rotate_bytes: int = 128 * MIB  # rotate over copies of X until they hold this many bytes
    max_copies: int = 8
    tuner_cache: str = ""  # JSON cache of tuned configurations; "" = <run dir>/tuning.json


def validate(p: BenchParams) -> None:
    for i, shape in enumerate(p.shapes):
        if len(shape) != 3 or any(int(v) < 1 for v in shape):
            raise ValueError(f"shapes[{i}] must be [M, K, N] with positive sizes, got {shape}")
    for s in p.sparsities:
        if not 0.5 <= s < 1:
            raise ValueError(f"sparsities: {s} is outside [0.5, 1) (TVW needs >= 0.5: TW at 2(1 - s) plus 2:4)")
    for d in p.dtypes:
        if d not in ("float16", "bfloat16"):
            raise ValueError(f"dtypes: {d!r} is not float16 or bfloat16")
    for name in ("tile", "vector", "bsr_block", "repeats", "tune_repeats", "max_inner", "max_copies"):
        if getattr(p, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(p, name)}")
    for c in p.configs:
        if not 4 <= len(c) <= 6:
            raise ValueError(f"configs: each is [bm, bk, warps, stages(, group_m(, tma))], got {c}")


def ideal_sizes(k: int, n: int, s: float, align: int = 64) -> tuple[int, int]:
    """The ideal shrunk GEMM's K and N at sparsity s: each scaled by sqrt(1 - s) and rounded to the
    nearest multiple of ``align`` (at least one; sizes under ``align`` just rounded), so cuBLAS runs it
    at full tile efficiency (K = 543, the unrounded sqrt(0.5) x 768, ran at 0.87x the per-FLOP rate
    of dense: a poor ceiling). The benchmark scales its time by the useful work over K2 x N2."""
    scale = math.sqrt(1 - s)

    def one(v: int) -> int:
        exact = v * scale
        return max(align, round(exact / align) * align) if v >= align else max(1, round(exact))

    return one(k), one(n)


def label(s: float) -> str:
    return f"{s * 100:g}".replace(".", "p")


class Timer:
    """Per-call time in us of a list of calls (rotated), and how it was taken."""

    def __init__(self, p: BenchParams, device: str):
        self.p, self.device = p, device

    def __call__(self, calls: list[Callable[[], object]], repeats: int) -> tuple[float, str]:
        if self.device != "cuda":
            return time_cpu(calls[0], warmup=1, repeats=repeats).median_s * 1e6, "CPU wall clock (interpreter)"
        one = time_cuda(calls[0], warmup=self.p.warmup, repeats=3).median_s
        inner = max(1, min(self.p.max_inner, math.ceil(self.p.sample_ms / 1e3 / max(one, 1e-7))))
        seq = [calls[i % len(calls)] for i in range(inner)]

        def run() -> None:
            for call in seq:
                call()

        fn, how = run, "eager queue"
        try:
            fn, how = cuda_graph(run, warmup=1)[0], "CUDA graph"
        except Exception as exc:  # some libraries cannot be captured: time the queue instead
            torch.cuda.synchronize()
            how = f"eager queue ({type(exc).__name__} in capture)"
        t = time_cuda(fn, warmup=self.p.warmup, repeats=repeats)
        return t.median_s / inner * 1e6, how


def x_copies(p: BenchParams, k: int, m: int, itemsize: int, device: str) -> int:
    """How many (K, M) X copies the timed calls rotate over: enough to hold p.rotate_bytes (past L2),
    at most p.max_copies; one on a CPU."""
    return 1 if device != "cuda" else max(1, min(p.max_copies, math.ceil(p.rotate_bytes / (k * m * itemsize))))


def cublas_times(timer: Timer, wt: torch.Tensor, xs: list[torch.Tensor], repeats: int) -> tuple[float, float, str]:
    """cuBLAS Y = W^T X both ways for a (N, K) wt: (feature-major torch.mm(wt, x) us, token-major
    torch.mm(x^T, W) us, how the first was timed). A method's dense time is the better of the two."""
    w_km = wt.t().contiguous()
    t_fm, how = timer([lambda x=x: torch.mm(wt, x) for x in xs], repeats)
    xts = [x.t().contiguous() for x in xs]
    t_tm, _ = timer([lambda x=x: torch.mm(x, w_km) for x in xts], repeats)
    return t_fm, t_tm, how


def _rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    scale = ref.abs().max().item()
    if y.shape != ref.shape:
        return math.inf
    err = (y.float() - ref).abs().max().item() / max(scale, 1e-30)
    return err if math.isfinite(err) else math.inf


class Point:
    """One (dtype, M, K, N): its operands, and the measurement of each method at each sparsity."""

    def __init__(self, p: BenchParams, ctx: Context, dtype: str, m: int, k: int, n: int, seed: int,
                 timer: Timer, tuner: Tuner, configs: list):
        self.p, self.ctx, self.timer, self.tuner, self.configs = p, ctx, timer, tuner, configs
        self.dtype, self.tdt, self.m, self.k, self.n = dtype, getattr(torch, dtype), m, k, n
        dev = ctx.device
        gen = torch.Generator(device=dev).manual_seed(seed)
        self.w = torch.randn(k, n, device=dev, generator=gen)  # fp32 master, GEMM form (K, N)
        itemsize = torch.finfo(self.tdt).bits // 8
        copies = x_copies(p, k, m, itemsize, dev)
        self.xs = [torch.randn(k, m, device=dev, generator=gen).to(self.tdt) for _ in range(copies)]
        self.scores = {"w": self.w.abs()}
        self.rows: list[dict] = []
        self.tuned: list[str] = []

    # -- helpers --------------------------------------------------------------------------------
    def reference(self, w_eff_t: torch.Tensor) -> torch.Tensor:
        """fp32 Y = W_eff^T X of a dense-equivalent (N, K) weight, on copy 0."""
        return w_eff_t.float() @ self.xs[0].float()

    def record(self, sparsity: float, method: str, density: float, fn: Callable | None,
               check: Callable[[], float] | None, note: str = "") -> None:
        """Time fn(x) over the X copies and check it once; a failure becomes a row with its note."""
        row = dict(dtype=self.dtype, m=self.m, k=self.k, n=self.n, sparsity=sparsity, method=method,
                   density=density, t_us=math.nan, err=math.nan, tol=tolerance(self.dtype), timing="", note=note)
        if fn is not None:
            try:
                row["err"] = check() if check is not None else math.nan
                row["t_us"], row["timing"] = self.timer([lambda x=x: fn(x) for x in self.xs], self.p.repeats)
            except Exception as exc:  # a baseline the library refuses here is reported, not fatal
                row["note"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}" if str(exc) else type(exc).__name__
                self.ctx.log.warning("%s %s %dx%dx%d s=%g: %s", method, self.dtype, self.m, self.k, self.n,
                                     sparsity, row["note"])
        self.rows.append(row)

    def torch_method(self, sparsity: float, method: str, mask: torch.Tensor, make: Callable) -> None:
        """A library method on the masked weight: make(masked W^T (N, K) in dtype) -> fn(x) -> Y."""
        w_eff_t = (self.w * mask).t().contiguous().to(self.tdt)
        try:
            fn = make(w_eff_t)
        except Exception as exc:
            self.record(sparsity, method, float(mask.float().mean()), None, None,
                        f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
            return
        ref = self.reference(w_eff_t)
        self.record(sparsity, method, float(mask.float().mean()), fn, lambda: _rel_err(fn(self.xs[0]), ref))

    # -- methods --------------------------------------------------------------------------------
    def dense(self, sparsities) -> None:
        wt = self.w.t().contiguous().to(self.tdt)
        t_fm, t_tm, how = cublas_times(self.timer, wt, self.xs, self.p.repeats)
        err = _rel_err(torch.mm(wt, self.xs[0]), self.reference(wt))
        for s in sparsities:
            self.rows.append(dict(dtype=self.dtype, m=self.m, k=self.k, n=self.n, sparsity=s, method="dense",
                                  density=1.0, t_us=min(t_fm, t_tm), err=err, tol=tolerance(self.dtype), timing=how,
                                  note=f"feature-major {t_fm:.1f} us, token-major {t_tm:.1f} us"))

    def ideal(self, s: float) -> None:
        k2, n2 = ideal_sizes(self.k, self.n, s)
        wt = self.w[:k2, :n2].t().contiguous().to(self.tdt)
        xs = [x[:k2].contiguous() for x in self.xs]
        t_fm, t_tm, how = cublas_times(self.timer, wt, xs, self.p.repeats)
        err = _rel_err(torch.mm(wt, xs[0]), wt.float() @ xs[0].float())
        work = (1 - s) * self.k * self.n / (k2 * n2)  # the pattern's useful work over the shrunk GEMM's
        self.rows.append(dict(dtype=self.dtype, m=self.m, k=self.k, n=self.n, sparsity=s, method="ideal",
                              density=1 - s, t_us=min(t_fm, t_tm) * work, err=err, tol=tolerance(self.dtype),
                              timing=how, note=f"shrunk to K={k2}, N={n2}: {min(t_fm, t_tm):.1f} us x {work:.4f} "
                                               f"(the useful work at this sparsity over K*N)"))

    def nm24(self, sparsities) -> None:
        from repro.papers.sparse_gemm import semi_structured

        if self.ctx.device != "cuda":
            for s in sparsities:
                self.record(s, "nm24", 0.5, None, None, "needs CUDA (sparse tensor cores)")
            return
        mask = patterns.prune("nm", self.scores, 0.5)["w"].mask  # 2:4 along K: each row of W^T
        start = len(self.rows)
        self.torch_method(sparsities[0], "nm24", mask, lambda wt: semi_structured.Dense24(wt))
        first = self.rows[start]
        first["note"] = first["note"] or f"backend {semi_structured.backend()}"
        for s in sparsities[1:]:
            self.rows.append(dict(first, sparsity=s))

    def bsr(self, s: float) -> None:
        b = self.p.bsr_block
        if self.k % b or self.n % b:
            self.record(s, "bsr", math.nan, None, None, f"K and N must be multiples of the block ({b})")
            return
        mask = patterns.prune("block", self.scores, s, block_size=b)["w"].mask
        self.torch_method(s, "bsr", mask, lambda wt: (lambda x, a=wt.to_sparse_bsr((b, b)): torch.mm(a, x)))

    def csr(self, s: float) -> None:
        mask = patterns.prune("unstructured", self.scores, s)["w"].mask
        self.torch_method(s, "csr", mask, lambda wt: (lambda x, a=wt.to_sparse_csr(): torch.mm(a, x)))

    def gather(self, s: float, method: str, packed: Packed) -> None:
        """Our kernel on a packing: tuned (cached), then timed and checked like every method."""
        from repro.papers.sparse_gemm.gather_gemm import Config, gather_gemm

        from repro.papers.sparse_gemm.packing import unpack

        packed = packed.to(self.ctx.device)
        w_eff_t = unpack(packed).t().to(self.ctx.device)
        ref = self.reference(w_eff_t)[packed.y_cols.to(self.ctx.device)]
        out = torch.empty(packed.n_out, self.m, dtype=self.tdt, device=self.ctx.device)

        def check(config: Config) -> float:
            out.fill_(math.nan)
            gather_gemm(self.xs[0], packed, out, config)
            return _rel_err(out, ref)

        def time_config(config: Config) -> float:
            calls = [lambda x=x: gather_gemm(x, packed, out, config) for x in self.xs]
            return self.timer(calls, self.p.tune_repeats)[0] / 1e6

        key = shape_key(method, self.dtype, self.m, self.k, self.n, s)
        configs = [c for c in self.configs if c.fits(packed.width)]
        try:
            choice = self.tuner.choose(key, configs, time_config, check, tolerance(self.dtype))
        except RuntimeError as exc:
            self.record(s, method, packed.nnz / (self.k * self.n), None, None, str(exc)[:200])
            return
        self.tuned.append(key)
        config = Config(**choice.config)
        self.record(s, method, packed.nnz / (self.k * self.n), lambda x: gather_gemm(x, packed, out, config),
                    lambda: check(config), f"config {choice.name}")

    def tvw(self, s: float, packed: Packed) -> None:
        from repro.papers.sparse_gemm import semi_structured
        from repro.papers.sparse_gemm.packing import unpack

        density = packed.nnz / (self.k * self.n)
        if self.ctx.device != "cuda":
            self.record(s, "tvw", density, None, None, "needs CUDA (sparse tensor cores)")
            return
        packed = packed.to(self.ctx.device)
        ref = self.reference(unpack(packed).t().to(self.ctx.device))[packed.y_cols.to(self.ctx.device)]
        out = torch.empty(packed.n_out, self.m, dtype=self.tdt, device=self.ctx.device)
        try:
            run = semi_structured.TVW(packed)
        except Exception as exc:
            self.record(s, "tvw", density, None, None, f"{type(exc).__name__}: {str(exc)[:200]}")
            return

        def check() -> float:
            out.fill_(math.nan)
            return _rel_err(run(self.xs[0], out), ref)

        self.record(s, "tvw", density, lambda x: run(x, out), check,
                    f"{packed.n_groups} tiles, backend {semi_structured.backend()}")

    def identity(self, sparsities) -> None:
        """Our kernel on the unpruned layer, once per shape (the same row at every sparsity)."""
        start = len(self.rows)
        self.gather(sparsities[0], "identity", pack(self.w, patterns.identity(self.k, self.n, self.p.tile),
                                                     self.p.tile, compact=True, dtype=self.tdt))
        for s in sparsities[1:]:
            self.rows.append(dict(self.rows[start], sparsity=s))

    def measure(self, sparsities) -> list[dict]:
        self.dense(sparsities)
        self.identity(sparsities)
        self.nm24(sparsities)
        for s in sparsities:
            self.ideal(s)
            self.bsr(s)
            self.csr(s)
            scores = {"w": self.scores["w"]}
            tw = patterns.prune("tw", scores, s, tile=self.p.tile)["w"]
            self.gather(s, "tw", pack(self.w, tw, self.p.tile, compact=True, dtype=self.tdt))
            sbw = patterns.prune("sbw", scores, s, vector=self.p.vector)["w"]
            self.gather(s, "sbw", pack(self.w, sbw, self.p.vector, compact=False, dtype=self.tdt))
            tvw = patterns.prune("tvw", scores, s, tile=self.p.tile)["w"]
            tvw_packed = pack(self.w, tvw, self.p.tile, compact=True, dtype=self.tdt)
            self.tvw(s, tvw_packed)
            self.gather(s, "tvw_dense_mma", tvw_packed)
            for layout in (tw, sbw, tvw):
                problems = patterns.check(layout)
                if problems:
                    raise AssertionError(f"{layout.pattern} mask breaks its pattern: {problems}")
        return self.rows


def derive(df: pd.DataFrame) -> pd.DataFrame:
    """Per row: useful TFLOP/s, speedup over dense, fraction of the ideal, ok."""
    key = ["dtype", "m", "k", "n", "sparsity"]
    base = df[df.method.isin(["dense", "ideal", "identity"])].pivot_table(index=key, columns="method", values="t_us")
    df = df.join(base.rename(columns={"dense": "t_dense_us", "ideal": "t_ideal_us", "identity": "t_identity_us"}),
                 on=key)
    df["kernel_quality"] = df.t_dense_us / df.t_identity_us  # of the shape: beside every point
    df["tflops"] = 2 * df.m * df.density * df.k * df.n / (df.t_us * 1e-6) / 1e12
    df["speedup"] = df.t_dense_us / df.t_us
    df["frac_ideal"] = df.t_ideal_us / df.t_us
    df["ok"] = df.err <= df.tol
    return df


def _geomean(xs) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return float(math.exp(statistics.fmean(math.log(x) for x in xs))) if xs else math.nan


def summarize(df: pd.DataFrame, sparsities) -> dict[str, float]:
    """The claims' metrics (see the experiment's docstring and config/claims/sparse_gemm.yaml)."""
    ran = df[df.t_us.notna()]
    metrics: dict[str, float] = {"n_points": int(df.groupby(["dtype", "m", "k", "n", "sparsity"]).ngroups),
                                 "n_incorrect": int((~ran.ok).sum()), "n_not_run": int(df.t_us.isna().sum())}
    key = ["dtype", "m", "k", "n", "sparsity"]
    t = ran.pivot_table(index=key, columns="method", values="t_us")
    ideal_speedup = t["dense"] / t["ideal"]
    if "identity" in t:
        quality = (t["dense"] / t["identity"]).groupby(level=["dtype", "m", "k", "n"]).first().dropna()
        big = quality[[m * k * n >= BIG for _, m, k, n in quality.index]]
        metrics["identity_geomean_quality"] = _geomean(quality)
        metrics["identity_min_quality"] = float(quality.min()) if len(quality) else math.nan
        if len(big):
            metrics["identity_min_quality_big"] = float(big.min())
    for s in sparsities:
        at = t.xs(s, level="sparsity")
        lab = label(s)
        isp = ideal_speedup.xs(s, level="sparsity")
        metrics[f"ideal_geomean_speedup_{lab}"] = _geomean(isp)
        metrics[f"ideal_min_speedup_{lab}"] = float(isp.min())
        for method in ("nm24", "bsr", "csr", *OURS):
            if method not in at or at[method].isna().all():
                continue
            speedup = (at["dense"] / at[method]).dropna()
            metrics[f"{method}_geomean_speedup_{lab}"] = _geomean(speedup)
            metrics[f"{method}_min_speedup_{lab}"] = float(speedup.min())
            if method in OURS:
                metrics[f"{method}_min_frac_ideal_{lab}"] = float((at["ideal"] / at[method]).min())
                big = speedup[isp.reindex(speedup.index) >= 2.5]
                if len(big):
                    metrics[f"{method}_min_speedup_{lab}_where_ideal_2p5"] = float(big.min())
                for rival in ("bsr", "nm24"):
                    if rival in at and at[rival].notna().any():
                        metrics[f"{method}_min_vs_{rival}_{lab}"] = float((at[rival] / at[method]).min())
    bert = ran[(ran.m == 12800) & (ran.dtype == "float16") & (ran.sparsity == 0.75)]
    if len(bert):
        bt = bert.pivot_table(index=["k", "n"], columns="method", values="t_us")
        for method in ("tw", "sbw"):
            if method in bt:
                metrics[f"{method}_geomean_speedup_75_bert_fp16"] = _geomean(bt["dense"] / bt[method])
        metrics.update(bert_layer_speedups(bt))
    return metrics


# One BERT-base encoder layer's GEMMs at 12800 tokens as (K, N): count. Q, K, V and the attention
# output are 768 x 768 each, then the feed-forward's 768 -> 3072 and 3072 -> 768.
BERT_LAYER = {(768, 768): 4, (768, 3072): 1, (3072, 768): 1}


def bert_layer_speedups(bt: pd.DataFrame) -> dict[str, float]:
    """The papers' own statistic: the speedup of the computation-intensive layers of a Transformer
    (Shfl-BW: "accelerate the computation-intensive layers of Transformer by 1.81, 4.18 and 1.90x";
    TW: "1.95x speedup over the dense model", BERT): one encoder layer's GEMM time, dense over the
    method's, each GEMM counted as often as the layer runs it. ``bt``: t_us by (k, n) x method, fp16,
    75 %. Absent unless every GEMM of the layer ran for dense and the method."""
    out = {}
    if any(kn not in bt.index for kn in BERT_LAYER) or "dense" not in bt:
        return out
    layer = bt.loc[list(BERT_LAYER)].mul(pd.Series(BERT_LAYER.values(), index=bt.loc[list(BERT_LAYER)].index), axis=0)
    for method in ("ideal", "identity", "tw", "sbw", "tvw", "nm24", "bsr"):
        if method in layer and layer[method].notna().all():
            out[f"{method}_bert_layer_speedup_75_fp16"] = float(layer["dense"].sum() / layer[method].sum())
    return out


@experiment(params=BenchParams, needs_gpu=False)
def gemm_bench(p: BenchParams, ctx: Context) -> Result:
    """Dense, ideal, 2:4, BSR, CSR, TW, Shfl-BW and TVW on the paper's GEMMs, side by side."""
    validate(p)
    from repro.papers.sparse_gemm.gather_gemm import CANDIDATES, Config

    configs = [Config(*c) for c in p.configs] if p.configs else list(CANDIDATES)
    gpu = torch.cuda.get_device_name() if ctx.device == "cuda" else "cpu"
    cache = Path(p.tuner_cache) if p.tuner_cache else ctx.out_dir / "tuning.json"
    tuner = Tuner(cache, gpu)
    timer = Timer(p, ctx.device)
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 references in fp32
    rows, tuned = [], []
    try:
        grid = [(d, *shape) for d in p.dtypes for shape in p.shapes]
        for i, (dtype, m, k, n) in enumerate(ctx.progress(grid, desc="gemm_bench")):
            point = Point(p, ctx, dtype, int(m), int(k), int(n), ctx.seed + i, timer, tuner, configs)
            rows += point.measure(list(p.sparsities))
            tuned += point.tuned
            del point
            if ctx.device == "cuda":
                torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    df = derive(pd.DataFrame(rows))
    for r in df[df.t_us.notna() & ~df.ok].itertuples():
        ctx.log.error("%s %s %dx%dx%d s=%g: error %.3g > tol %.3g", r.method, r.dtype, r.m, r.k, r.n, r.sparsity,
                      r.err, r.tol)
    tags = {"gpu": gpu, "timing": ("CUDA events around CUDA-graph replays, median per call" if ctx.device == "cuda"
                                   else "CPU wall clock, Triton interpreter: correctness only, not a speed result"),
            "layout": "feature-major Y = W^T X (X: K x M, each input feature a contiguous row)",
            "importance": "weight magnitude |w| (the TW artifact's VGG setting)"}
    return Result(metrics=summarize(df, p.sparsities), tables={"points": df, "tuning": tuner.table(tuned)},
                  artifacts={"tuning": cache}, tags=tags)
