"""Where TSM2X dispatch's time goes on the shapes where it lost to cuBLAS (issue 53).

Dispatch v3's H100 run (docs/gpu-notes.md, session 23) measured matmul on fp32 10000 x 1037, n 3
and 16, at 36-39 us a call while the tuner, in the same run, had timed the variant it chose at 19-27
us and torch.mm at about 30. This benchmark times, side by side in one run (the paths' batches
interleaved, back-to-back calls, host clock to device idle, as both the tuner and the experiment
time), the links of that chain on the same operands:

  torch       A @ B (torch.mm)
  bound       tsm2.bind's closure for the tuner's choice, called with (A, B): what the tuner timed
  cublas_bound  blas.bind's closure (cuBLAS with its arguments fixed), called with (A, B)
  dispatch    tuner.dispatch(kind, A, B): route lookup + the closure
  matmul      tsm2x.matmul(A, B): what the experiment timed
and, per path, the host's cost alone (calls issued without waiting, divided by the calls), so a
path whose host cost exceeds the kernel's time shows it. Each shape is tuned afresh (in memory),
three times, so a choice that flips between tunings shows too.

  REPRO_KERNELS_DIR=results/build/kernels python benchmarks/tsm2x_dispatch_paths.py --out results/benchmarks/tsm2x_dispatch_paths.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SHAPES = [  # (dtype, m, k, n): the worst warm points of session 23, and one fallback of a small call
    ("float32", 10000, 1037, 16), ("float32", 10000, 1037, 3), ("float64", 10000, 333, 1)]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tunings", type=int, default=3, help="fresh tunings per shape")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved batches per path")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every timing, with provenance")
    return ap.parse_args(argv)


def host_cost(call, reps: int = 200) -> float:
    """Seconds of host time per call issued without waiting (the queue absorbs the kernels)."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        call()
    host = (time.perf_counter() - start) / reps
    torch.cuda.synchronize()
    return host


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from repro.papers.tsm2x import blas, tsm2
    from repro.papers.tsm2x import tuner as tuner_mod
    from repro.pipeline import provenance

    kernels_dir = Path(os.environ.get("REPRO_KERNELS_DIR", "results/build/kernels"))
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    print(f"# us per call (interleaved, median of {args.rounds} batches); host = host cost per call alone")
    for dtype, m, k, n in SHAPES:
        tdt = getattr(torch, dtype)
        gen = torch.Generator(device="cuda").manual_seed(0)
        A = torch.randn(k, m, device="cuda", dtype=tdt, generator=gen).T  # column-major, as the experiment's
        B = torch.randn(n, k, device="cuda", dtype=tdt, generator=gen).T
        kind = "r" if k > tsm2.MAX_K_L else "l"
        for t in range(args.tunings):
            tuner = tuner_mod.Tuner(None, tuner_mod.gpu_name())
            C, choice = tuner_mod.dispatch(kind, A, B, tuner=tuner, kernels_dir=kernels_dir)
            paths = {"torch": lambda: A @ B,
                     "dispatch": functools.partial(tuner_mod.dispatch, kind, A, B, tuner=tuner, kernels_dir=kernels_dir),
                     "matmul": functools.partial(tuner_mod.matmul, A, B, tuner=tuner, kernels_dir=kernels_dir)}
            if not choice.fallback and choice.choice != blas.BOUND:
                bound = tsm2.bind(kind, A, B, None, choice.choice, kernels_dir)
                paths["bound"] = functools.partial(bound, A, B)
            paths["cublas_bound"] = functools.partial(blas.bind(kind, A, B), A, B)
            times = tuner_mod.interleaved_times({k_: [f] for k_, f in paths.items()}, rounds=args.rounds,
                                                target_s=0.005)
            hosts = {k_: host_cost(f) for k_, f in paths.items()}
            tuned = {r: {c: choice.times_us[r].get(c) for c in (choice.choice, choice.best_cublas)}
                     for r in choice.times_us}
            row = dict(dtype=dtype, m=m, k=k, n=n, tuning=t, choice=choice.choice, fallback=choice.fallback,
                       tuned_us=tuned, **{f"t_{k_}_us": v * 1e6 for k_, v in times.items()},
                       **{f"host_{k_}_us": v * 1e6 for k_, v in hosts.items()})
            rows.append(row)
            cells = "  ".join(f"{k_} {times[k_] * 1e6:6.1f} (host {hosts[k_] * 1e6:5.1f})" for k_ in paths)
            print(f"{dtype} {m}x{k} n{n} #{t} {choice.choice:34s} tuned {tuned}  |  {cells}", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"benchmark": "tsm2x_dispatch_paths", "provenance": provenance.collect(),
                                        "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
