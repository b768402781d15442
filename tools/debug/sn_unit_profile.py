"""Where a network's single-unit memory goes: the runtime's per-unit profile (liveness.profile_units)
as a table, biggest backward need first: working set (saved + input + output + parameters), the
measured backward transient beyond it (cuDNN workspace, composite ops' temporaries) and the
measured forward peak, per unit.

    python tools/debug/sn_unit_profile.py [--model alexnet] [--batch 32] [--top 12] [--device cuda] [--csv OUT]

Why: sn.peak on AlexNet is 1.63x its largest working set, the peak in its first segment's backward
(conv1 11x11/4, ReLU, LocalResponseNorm, max-pool); this says which unit's transient it is. A design
aid for docs/gpu-notes.md: it writes no record. On a CPU the transients read 0 (no allocator).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import torch

from repro.data.synthetic import synthetic_batch
from repro.models import build_model, get_entry
from repro.papers.superneurons.liveness import flatten_units, profile_units

MIB = 2**20


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="alexnet")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--image-size", type=int, default=None, help="default: the model's own input size")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--csv", type=Path, default=None, help="write every unit's row here")
    args = ap.parse_args(argv)
    entry = get_entry(args.model)
    torch.manual_seed(0)
    with torch.device(args.device):
        model = build_model(args.model, entry.num_classes)
    x, _ = synthetic_batch(args.batch, image_size=args.image_size or entry.input_size, num_classes=entry.num_classes,
                           seed=0, device=args.device)
    profiles = profile_units(flatten_units(model), x)
    rows = pd.DataFrame([dict(asdict(p), working_set=p.working_set, need=p.need) for p in profiles])
    for c in ("in_bytes", "out_bytes", "saved_bytes", "param_bytes", "transient_bytes", "forward_bytes",
              "working_set", "need"):
        rows[c.replace("_bytes", "") + "_MiB"] = rows.pop(c) / MIB
    rows = rows[["index", "name", "kind", "working_set_MiB", "transient_MiB", "need_MiB", "saved_MiB", "in_MiB",
                 "out_MiB", "param_MiB", "forward_MiB"]]
    largest = rows.working_set_MiB.max()
    print(f"{args.model}, batch {args.batch}, {args.device}: largest working set {largest:.1f} MiB "
          f"({rows.loc[rows.working_set_MiB.idxmax(), 'name']})")
    print(rows.sort_values("need_MiB", ascending=False).head(args.top).round(1).to_string(index=False))
    if args.csv:
        rows.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
