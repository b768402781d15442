"""The gather GEMM's kernel quality, side by side with cuBLAS in one run (issue 42).

For each shape (M, K, N) and dtype: cuBLAS dense (torch.mm, the better of the feature-major and
token-major layouts), then every gather-GEMM configuration on the *identity* packing (all of K for
every column: the dense GEMM's own work, no sparsity) and on the TW packing at ``--sparsity``
against the ideal shrunk GEMM (K and N scaled by sqrt(1 - s), rounded to multiples of 64). Prints
per shape the best configuration's ratio to cuBLAS (kernel quality) and to the ideal, and every
configuration's time; writes everything as JSON (``--out``). Timing as the sparse benchmark's
(repro.papers.sparse_gemm.bench.Timer: CUDA-graph replays over rotated X copies, median per call).

  python benchmarks/gather_gemm.py --out results/benchmarks/gather_gemm.json
  python benchmarks/gather_gemm.py --shapes 8192x4096x11008 --dtypes float16 --configs 128,64,8,4,8,0
Without a GPU it runs one tiny shape in Triton's interpreter: a check that it works, not a timing.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

from repro.papers.sparse_gemm import patterns
from repro.papers.sparse_gemm.bench import BenchParams, Timer, cublas_times, ideal_sizes, x_copies
from repro.papers.sparse_gemm.packing import pack
from repro.papers.sparse_gemm.tuner import tolerance

def _triton_dense():
    """Triton's own dense GEMM Y = A @ B (A = W^T, B = X), two ways, with the gather GEMM's program
    order: operands through TMA (host tensor descriptors), and through pointer loads. They split
    the gap to cuBLAS into what Triton's dense loop leaves, what TMA adds, and what the gather adds."""
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    @triton.jit
    def order(pid, n_m, n_n, GROUP: tl.constexpr):
        per = GROUP * n_n
        first = (pid // per) * GROUP
        rows = tl.minimum(n_m - first, GROUP)
        return first + (pid % per) % rows, (pid % per) // rows

    @triton.jit
    def dense_tma(a_desc, b_desc, c_desc, R, M, K, BR: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr,
                  GROUP: tl.constexpr):
        pm, pr = order(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(R, BR), GROUP)
        acc = tl.zeros((BR, BM), dtype=tl.float32)
        for k in range(0, K, BK):
            acc = tl.dot(a_desc.load([pr * BR, k]), b_desc.load([k, pm * BM]), acc)
        c_desc.store([pr * BR, pm * BM], acc.to(c_desc.dtype))

    @triton.jit
    def dense_ptr(a_ptr, b_ptr, c_ptr, R, M, K, BR: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr,
                  GROUP: tl.constexpr):
        pm, pr = order(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(R, BR), GROUP)
        rr = pr * BR + tl.arange(0, BR)
        rm = pm * BM + tl.arange(0, BM)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BR, BM), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rr[:, None].to(tl.int64) * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None].to(tl.int64) * M + rm[None, :])
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rr[:, None].to(tl.int64) * M + rm[None, :], acc.to(c_ptr.dtype.element_ty))

    def run(kind, a, b, c, br, bm, bk, warps, stages, group=8):
        r, k = a.shape
        m = b.shape[1]
        grid = (triton.cdiv(r, br) * triton.cdiv(m, bm),)
        if kind == "tma":
            dense_tma[grid](TensorDescriptor.from_tensor(a, [br, bk]), TensorDescriptor.from_tensor(b, [bk, bm]),
                            TensorDescriptor.from_tensor(c, [br, bm]), r, m, k, BR=br, BM=bm, BK=bk, GROUP=group,
                            num_warps=warps, num_stages=stages)
        else:
            dense_ptr[grid](a, b, c, r, m, k, BR=br, BM=bm, BK=bk, GROUP=group, num_warps=warps, num_stages=stages)
        return c

    return run


DENSE_CONFIGS = [(128, 128, 64, 4, 4), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (128, 256, 64, 8, 4),
                 (256, 128, 64, 8, 3), (128, 128, 64, 4, 3)]


SHAPES = ["12800x768x768", "12800x768x3072", "12800x3072x768", "8192x4096x4096", "8192x4096x11008",
          "8192x11008x4096"]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=None, help="MxKxN each (default: the sparse benchmark's six; "
                                                             "on a CPU one tiny shape)")
    ap.add_argument("--dtypes", nargs="+", default=["float16"], choices=["float16", "bfloat16"])
    ap.add_argument("--sparsity", type=float, default=0.75, help="TW packing's sparsity (0: identity only)")
    ap.add_argument("--configs", nargs="+", default=None,
                    help="bm,bk,warps,stages,group_m,tma each (default: gather_gemm.CANDIDATES)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--triton-dense", action="store_true",
                    help="also Triton's own dense GEMM (TMA and pointer loads; shapes multiple of the tiles)")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every timing")
    return ap.parse_args(argv)


def best(times: dict[str, float]) -> tuple[str, float]:
    ok = {k: v for k, v in times.items() if math.isfinite(v)}
    return min(ok.items(), key=lambda kv: kv[1]) if ok else ("none", math.nan)


def main(argv=None) -> int:
    args = parse_args(argv)
    from repro.papers.sparse_gemm.gather_gemm import CANDIDATES, Config, gather_gemm

    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    shapes = args.shapes or (SHAPES if cuda else ["64x128x96"])
    configs = [Config(*(int(v) for v in c.split(","))) for c in args.configs] if args.configs else list(CANDIDATES)
    if not cuda:
        configs = [Config(32, 32, 4, 1, 2, False)]
    p = BenchParams(repeats=args.repeats)
    timer = Timer(p, dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = torch.cuda.get_device_name() if cuda else "cpu"
    print(f"# gather GEMM kernel quality on {gpu} (times in us; quality = cuBLAS / ours)", flush=True)
    rows = []
    for dtype in args.dtypes:
        tdt = getattr(torch, dtype)
        for shape in shapes:
            m, k, n = (int(v) for v in shape.split("x"))
            gen = torch.Generator(device=dev).manual_seed(0)
            w = torch.randn(k, n, device=dev, generator=gen)
            copies = x_copies(p, k, m, 2, dev)
            xs = [torch.randn(k, m, device=dev, generator=gen).to(tdt) for _ in range(copies)]
            row = dict(gpu=gpu, dtype=dtype, m=m, k=k, n=n)
            row["cublas_us"] = dense_time(timer, w.to(tdt), xs, p.repeats)
            ref = torch.mm(w.to(tdt).t().contiguous(), xs[0]).float()
            if args.triton_dense and cuda:
                run = _triton_dense()
                a = w.to(tdt).t().contiguous()
                c = torch.empty(n, m, dtype=tdt, device=dev)
                for kind in ("tma", "ptr"):
                    times = {}
                    for cfg in DENSE_CONFIGS:
                        if n % cfg[0] or m % cfg[1] or k % cfg[2]:
                            continue
                        try:
                            run(kind, a, xs[0], c, *cfg)
                            err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
                            t = timer([lambda x=x, cfg=cfg: run(kind, a, x, c, *cfg) for x in xs], p.repeats)[0]
                            ok = err <= tolerance("bfloat16")  # against cuBLAS's rounded output: the looser bound
                            times["r{}_m{}_k{}_w{}_s{}".format(*cfg)] = t if ok else math.nan
                        except Exception as exc:
                            print(f"  triton {kind} {cfg}: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
                    row[f"triton_{kind}_us"] = times
                    row[f"triton_{kind}_best"], row[f"triton_{kind}_best_us"] = best(times)
                del a, c
            layouts = [("identity", patterns.identity(k, n, 128), 0.0)]
            if args.sparsity > 0:
                layouts.append(("tw", patterns.prune("tw", {"w": w.abs()}, args.sparsity, tile=128)["w"],
                                args.sparsity))
                k2, n2 = ideal_sizes(k, n, args.sparsity)
                work = (1 - args.sparsity) * k * n / (k2 * n2)  # useful work over the shrunk GEMM's
                row["ideal_us"] = work * dense_time(timer, w[:k2, :n2].to(tdt), [x[:k2].contiguous() for x in xs],
                                                    p.repeats)
                row["ideal_kn"] = [k2, n2]
            for name, layout, _ in layouts:
                packed = pack(w, layout, 128, compact=True, dtype=tdt).to(dev)
                out = torch.empty(packed.n_out, m, dtype=tdt, device=dev)
                times = {}
                for c in configs:
                    if not c.fits(packed.width):
                        continue
                    try:
                        calls = [lambda x=x, c=c: gather_gemm(x, packed, out, c) for x in xs]
                        times[c.name] = timer(calls, p.repeats)[0]
                        if name == "identity":  # against cuBLAS's own product: a fast wrong kernel is no result
                            out.fill_(math.nan)
                            gather_gemm(xs[0], packed, out, c)
                            err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
                            if not err <= tolerance(dtype):
                                print(f"  identity {c.name}: WRONG (relative error {err:.3g})", flush=True)
                                times[c.name] = math.nan
                    except Exception as exc:  # a config that fails to compile is reported, not fatal
                        times[c.name] = math.nan
                        print(f"  {name} {c.name}: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
                row[f"{name}_us"] = times
                row[f"{name}_best"], t = best(times)
                row[f"{name}_best_us"] = t
            row["quality"] = row["cublas_us"] / row["identity_best_us"]
            if "tw_best_us" in row:
                row["tw_frac_ideal"] = row["ideal_us"] / row["tw_best_us"]
                row["tw_speedup"] = row["cublas_us"] / row["tw_best_us"]
                row["ideal_speedup"] = row["cublas_us"] / row["ideal_us"]
            rows.append(row)
            tf = 2 * m * k * n / row["cublas_us"] / 1e6
            print(f"{dtype} {shape}: cuBLAS {row['cublas_us']:.1f} us ({tf:.0f} TFLOP/s); identity best "
                  f"{row['identity_best']} {row['identity_best_us']:.1f} us -> quality {row['quality']:.3f}"
                  + (f"; tw@{args.sparsity:g} best {row['tw_best']} {row['tw_best_us']:.1f} us, ideal "
                     f"{row['ideal_us']:.1f} us -> frac_ideal {row['tw_frac_ideal']:.3f}, speedup "
                     f"{row['tw_speedup']:.2f}x (ideal {row['ideal_speedup']:.2f}x)" if "tw_best_us" in row else ""),
                  flush=True)
            for kind in ("tma", "ptr"):
                if f"triton_{kind}_best_us" in row:
                    print(f"    triton dense ({kind}) best {row[f'triton_{kind}_best']} "
                          f"{row[f'triton_{kind}_best_us']:.1f} us -> "
                          f"{row['cublas_us'] / row[f'triton_{kind}_best_us']:.3f} of cuBLAS", flush=True)
            for name in ("identity", "tw", "triton_tma", "triton_ptr"):
                if f"{name}_us" in row:
                    print(f"    {name}: " + ", ".join(f"{c} {t:.1f}" for c, t in sorted(row[f'{name}_us'].items(),
                                                                                      key=lambda kv: kv[1])),
                          flush=True)
            del xs, w
            if cuda:
                torch.cuda.empty_cache()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


def dense_time(timer: Timer, w_kn: torch.Tensor, xs: list[torch.Tensor], repeats: int) -> float:
    """cuBLAS Y = W^T X, the better of the feature-major and token-major layouts (us)."""
    t_fm, t_tm, _ = cublas_times(timer, w_kn.t().contiguous(), xs, repeats)
    return min(t_fm, t_tm)


if __name__ == "__main__":
    sys.exit(main())
