"""Pin down the TSM2R split-K fault seen on the H200 (docs/gpu-notes.md): for shapes with a
partial last row block, run every split variant with vector or scalar A loads and C stores
(leading dimensions padded by one element force the scalar paths) and print the errors."""
import math
from pathlib import Path

import torch

from repro.papers.tsm2x import tsm2

KD = Path("results/build/kernels")


def colmajor(rows, cols, dtype, ld=None, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(cols, ld or rows, device="cuda", dtype=dtype, generator=g).T[:rows]


def err(C, A, B):
    ref = torch.mm(A.double(), B.double())
    return ((C.double() - ref).abs().max() / ref.abs().max()).item()


for m, k, n, dt in [(5000, 100, 7, torch.float64), (20000, 300, 8, torch.float32), (1000, 370, 3, torch.float32),
                    (4096, 370, 3, torch.float32), (1000, 512, 3, torch.float32)]:
    tag = "f32" if dt == torch.float32 else "f64"
    for a_pad in (0, 1):
        for c_pad in (0, 1):
            A = colmajor(m, k, dt, m + a_pad, seed=1)
            B = colmajor(k, n, dt, seed=2)
            bad = []
            for v in tsm2.candidates("r", tag, k, n):
                C = torch.full((n, m + c_pad), math.nan, device="cuda", dtype=dt).T[:m]
                tsm2.tsm2r(A, B, out=C, variant=v.name, kernels_dir=KD)
                torch.cuda.synchronize()
                e = err(C, A, B)
                if not e < 1e-4:
                    bad.append(f"{v.name}={e:.2g}")
            print(f"m={m} k={k} n={n} {tag} a_pad={a_pad} c_pad={c_pad}: {len(bad)} bad {bad}")
