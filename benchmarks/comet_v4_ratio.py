"""Codec v4's ratio on the comet_sz3 activations, on the CPU (its NumPy twin), beside v3 and SZ3 (issue 44).

The activations: one training-mode forward (batch 128, the first CIFAR-10 test images) of a trained
ResNet-32 (``--model``: the uncompressed arm's model.pt, e.g. the H100 run behind
results/reference/nvidia-h100-80gb-hbm3/comet/comet_sz3, kept at /work/.device/6/comet_model/model.pt),
captured as comet_sz3 captures them. SZ3's bytes per tensor and bound are read from that record's
sz3.csv (``--sz3``; pysz is not needed here); v3's ratio is recomputed and must equal the record's.
Per bound: v4's ratio (a real stream: compressed, decoded, every value checked against eb), v3's, SZ3's,
v4 / SZ3, v4 / v3, how many tensors took the DIRECT mode; with ``--bounds``, entropy bounds over v4's
own symbol streams (same quantiser and blocks, the better mode per tensor, model cost not counted):
order-0 (an ideal static coder of the tensor's histogram, e.g. rANS) and order-1 (each symbol coded
given the previous one in its block: 2-symbol contexts).

  PYTHONPATH=src python benchmarks/comet_v4_ratio.py --model /work/.device/6/comet_model/model.pt \\
      --test results/data/cifar10/test.npz --out benchmarks/records/comet_v4_ratio_cpu.json --bounds
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from repro.data.arrays import read_split
from repro.models import build_model
from repro.papers.comet import codec, codec_v4
from repro.papers.comet.arms import probe_memory
from repro.papers.comet.sz3_reference import _Capture
from repro.train.augment import first_batch

REF = "results/reference/nvidia-h100-80gb-hbm3/comet/comet_sz3"


def activations(model_path: str, test: str, batch: int = 128) -> list[np.ndarray]:
    split = read_split(test)
    model = build_model("resnet32", num_classes=len(split.classes))
    model.load_state_dict(torch.load(model_path, map_location="cpu", weights_only=True))
    capture = _Capture(4096)
    capture.attach(model)
    x, y = first_batch(split, batch, "cpu")
    probe_memory(model, capture, x, y)
    return [a for _, a in capture.captured]


def entropy_bits(counts: np.ndarray) -> float:
    c = counts[counts > 0].astype(np.float64)
    return float((c * np.log2(c.sum() / c)).sum())


def bound_bytes(a: np.ndarray, eb: float) -> tuple[float, float]:
    """(order-0, order-1) bytes of v4's symbol stream (better mode each), with v4's offsets and header."""
    blocks = codec._blocks(a.reshape(-1))
    best0 = best1 = float("inf")
    for mode in codec_v4.MODES:
        z, raw = codec_v4._codes(blocks, np.float32(eb), mode)
        s = codec_v4.symbols(z, ~raw & (z != 0).any(axis=1))
        esc = 32 * int((s.sym == codec_v4.ESC_SYM).sum())
        prev = np.concatenate([[-1], s.sym[:-1]])
        prev[np.concatenate([[True], s.block[1:] != s.block[:-1]])] = -1
        _, pairs = np.unique((prev + 1) * codec_v4.NSYM + s.sym, return_counts=True)
        _, ctx = np.unique(prev, return_counts=True)
        fixed = 4 * (blocks.shape[0] + 1) + codec_v4.HEADER_BYTES + 4 * codec.BLOCK * int(raw.sum())
        best0 = min(best0, fixed + (entropy_bits(np.bincount(s.sym, minlength=codec_v4.NSYM)) + esc) / 8)
        best1 = min(best1, fixed + (entropy_bits(pairs) - entropy_bits(ctx) + esc) / 8)
    return best0, best1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--test", default="results/data/cifar10/test.npz")
    ap.add_argument("--sz3", default=f"{REF}/sz3.csv")
    ap.add_argument("--ebs", type=float, nargs="+", default=[0.01, 0.05, 0.1, 0.2, 0.5])
    ap.add_argument("--bounds", action="store_true", help="also the order-0 / order-1 entropy bounds (slower)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    acts = activations(args.model, args.test)
    ref = pd.read_csv(args.sz3)
    rows, summary = [], []
    for eb in args.ebs:
        t0 = time.time()
        for i, a in enumerate(acts):
            c = codec_v4.compress(a, eb)
            err = float(np.abs(codec_v4.decompress(c).astype(np.float64) - a.reshape(-1).astype(np.float64)).max())
            r = ref[(ref.tensor == i) & np.isclose(ref.eb, eb)].iloc[0]
            row = dict(tensor=i, eb=eb, raw=a.nbytes, v4=c.nbytes, mode=c.mode, v3=codec.compress(a, eb).nbytes,
                       v3_record=int(r.ours_bytes), sz3=int(r.sz3_bytes), v4_err_over_eb=err / eb)
            if args.bounds:
                row["order0"], row["order1"] = bound_bytes(a, eb)
            rows.append(row)
        g = pd.DataFrame([r for r in rows if r["eb"] == eb])
        if (g.v3 != g.v3_record).any():
            raise SystemExit(f"eb {eb}: v3 bytes differ from {args.sz3}: not the record's activations")
        s = dict(eb=eb, v4_ratio=g.raw.sum() / g.v4.sum(), v3_ratio=g.raw.sum() / g.v3.sum(),
                 sz3_ratio=g.raw.sum() / g.sz3.sum(), v4_over_sz3=g.sz3.sum() / g.v4.sum(),
                 v4_over_v3=g.v3.sum() / g.v4.sum(), direct_tensors=int(g["mode"].sum()), tensors=len(g),
                 v4_max_err_over_eb=float(g.v4_err_over_eb.max()), seconds=time.time() - t0)
        if args.bounds:
            s.update(order0_ratio=g.raw.sum() / g.order0.sum(), order0_over_sz3=g.sz3.sum() / g.order0.sum(),
                     order1_ratio=g.raw.sum() / g.order1.sum(), order1_over_sz3=g.sz3.sum() / g.order1.sum())
        summary.append(s)
        print(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items()), flush=True)
    if args.out:
        args.out.write_text(json.dumps(dict(model=args.model, sz3=args.sz3, summary=summary, tensors=rows), indent=1))


if __name__ == "__main__":
    main()
