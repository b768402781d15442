"""SpTRSV's sync-free kernels against the longest __nanosleep of their flag polls (issue 43).

A profile of banded_1e5 on an H100 (docs/gpu-notes.md, session 22) put two thirds of v3's and v4's
warp time in the "sleeping" stall: the polls' back-off (kernels/sptrsv.cu ``back_off``: doubling from
16-32 ns up to ``solve.MAX_SLEEP_NS``: 256 ns, assumed, until this benchmark's H100 runs set it to
2048 ns in session 23). A warp that sleeps past the moment
its input is released loses up to that much per dependency on the critical path; one that sleeps
too little takes issue slots and L2 bandwidth from the warps it waits for. This benchmark times the
same solvers on the same matrices at several caps, side by side in one run, each solve checked
against SciPy, and prints each time as a ratio to the current cap's:

  REPRO_KERNELS_DIR=results/build/kernels python benchmarks/sptrsv_backoff.py \
      --out results/benchmarks/sptrsv_backoff.json

It needs a GPU (CuPy) and the ``sptrsv`` cubin; the cap is a kernel argument, so nothing is rebuilt.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

MATRICES = [  # one chain-bound matrix, one whose dependencies cross chunks, one power-law
    {"name": "banded_1e5", "kind": "banded", "n": 100000, "bandwidth": 16, "density": 0.25},
    {"name": "poisson2d_1000", "kind": "poisson", "shape": [1000, 1000]},
    {"name": "powerlaw_1e6", "kind": "powerlaw", "n": 1000000, "min_offset": 500},
]
METHODS = ("syncfree_pull", "syncfree_v3", "syncfree_v4")
CAPS_NS = (32, 64, 128, 256, 512, 1024)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--caps", type=int, nargs="+", default=list(CAPS_NS), help="longest sleep, ns")
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--matrices", nargs="+", default=None, help="names out of MATRICES (default: all)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None, help="JSON of every timing, with provenance")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import cupy
    import numpy as np
    import scipy.sparse.linalg as spla

    from repro.data.matrices import specs
    from repro.papers.sptrsv import solve
    from repro.pipeline import provenance
    from repro.timing import time_cuda

    kernels_dir = Path(os.environ.get("REPRO_KERNELS_DIR", "results/build/kernels"))
    wanted = [m for m in MATRICES if args.matrices is None or m["name"] in args.matrices]
    if not wanted:
        raise SystemExit(f"no matrix named {args.matrices}; known: {[m['name'] for m in MATRICES]}")
    base_cap = solve.MAX_SLEEP_NS
    print(f"# sync-free solve time (ms) against the back-off cap; ratio to the current cap ({base_cap} ns)")
    rows = []
    for spec in specs(wanted):
        L = spec.build()
        m = solve.upload(L)
        b_host = np.random.default_rng(0).standard_normal(m.n)
        b = cupy.asarray(b_host)
        ref = spla.spsolve_triangular(L.tocsr(), b_host, lower=True)
        scale = float(np.abs(ref).max())
        for cap in args.caps:
            solve.MAX_SLEEP_NS = cap  # read by each solver's constructor (its kernel argument)
            made = solve.solvers(m, b, kernels_dir, methods=tuple(args.methods))
            for name, s in made.items():
                s.analyse()
                t0 = time.perf_counter()
                ms = time_cuda(s.solve, warmup=2, repeats=args.repeats).median_s * 1e3
                s.x.fill(math.nan)
                s.solve()
                if hasattr(s, "check"):
                    s.check()
                err = float(np.abs(cupy.asnumpy(s.x) - ref).max()) / scale
                rows.append(dict(matrix=spec.name, method=name, cap_ns=cap, solve_ms=ms, rel_err=err,
                                 wall_s=time.perf_counter() - t0))
            del made
        solve.MAX_SLEEP_NS = base_cap
        for name in args.methods:
            base = next((r["solve_ms"] for r in rows if r["matrix"] == spec.name and r["method"] == name
                         and r["cap_ns"] == base_cap), math.nan)
            cells = [f"{r['cap_ns']:>5} ns {r['solve_ms']:8.3f} ({r['solve_ms'] / base:5.2f}x)"
                     for r in rows if r["matrix"] == spec.name and r["method"] == name]
            print(f"{spec.name:16} {name:14} " + "  ".join(cells), flush=True)
        del m, b
        cupy.get_default_memory_pool().free_all_blocks()
    worst = max(r["rel_err"] for r in rows)
    print(f"# worst relative error against SciPy: {worst:.2e}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"benchmark": "sptrsv_backoff", "base_cap_ns": base_cap,
                                        "provenance": provenance.collect(), "rows": rows}, indent=1))
    return 0 if worst <= 1e-8 else 1


if __name__ == "__main__":
    raise SystemExit(main())
