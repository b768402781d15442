"""Codec v4 with a cached code book per saved-activation slot (repro.papers.comet.books), on the CPU
(its NumPy twin): the ratio beside a fresh book per tensor, and the host time per tensor of building
a book beside reusing one.

The activations: a ResNet-32 (``--model``: a state dict; default: a fresh one, seed 0) trained by SGD
(lr ``--lr``, momentum 0.9) on CIFAR-10 training images in order, batch 128, no augmentation; every
``--every`` steps the step's saved activations are captured (the 64 tensors comet_sz3 captures, in
the hooks' slot order), ``--steps`` steps in all. Per bound, per capture, the total ratio of:

  fresh   each tensor with its own book (the two-sync path: codec_v4.choose per tensor)
  cached  the hooks' policy (books.SlotBooks): each slot's covering book built at the first
          capture, refreshed when its payload bits pass (1 + ``--tol``) x a new book's estimate
          (codec_v4.Book.drift); every stream decoded and checked against eb
  stale   the first capture's covering books, never refreshed
and, at the first capture, ``covering``: each tensor with the covering book of its own histograms
(what a cached book costs before any drift). Host time per tensor, measured side by side on every
tensor's histograms (median of ``--repeat``): the host work the two-sync path does per tensor
(codec_v4.choose and canonical_codes at compress, decode_tables at decompress), building a covering
book (codec_v4.make_book: a slot's first step or a refresh), and reusing one (Book.drift: the drift
check). The H2D copies the GPU path also saves are not in these numbers. In training the hooks check
every step; captures ``--every`` steps apart let a book drift further before its check.

  PYTHONPATH=src python benchmarks/comet_v4_books.py --train results/data/cifar10/train.npz \\
      --out benchmarks/records/comet_v4_books_cpu.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from repro.data.arrays import read_split
from repro.models import build_model
from repro.papers.comet import books, codec_v4
from repro.papers.comet.arms import hooked_step
from repro.papers.comet.sz3_reference import _Capture
from repro.train.augment import first_batch


def host_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def old_host_path(hists: np.ndarray) -> None:
    """What the two-sync path computes on the host per tensor (compress, then decompress)."""
    _, lengths = codec_v4.choose(hists)
    codec_v4.canonical_codes(lengths)
    codec_v4.decode_tables(codec_v4._stored(lengths))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a ResNet-32 state dict (default: a fresh model, seed 0)")
    ap.add_argument("--train", default="results/data/cifar10/train.npz")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--ebs", type=float, nargs="+", default=[0.05, 0.2])
    ap.add_argument("--tol", type=float, default=0.05)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.manual_seed(0)
    split = read_split(args.train)
    model = build_model("resnet32", num_classes=len(split.classes))
    if args.model:
        model.load_state_dict(torch.load(args.model, map_location="cpu", weights_only=True))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    x_all, y_all = first_batch(split, 128 * (args.steps + 1), "cpu")
    capture = _Capture(4096)
    capture.attach(model)
    slot_books = {eb: books.SlotBooks(args.tol) for eb in args.ebs}
    first_books: dict[float, list[codec_v4.Book]] = {}
    rows, timing = [], []
    for step in range(args.steps + 1):
        x, y = x_all[128 * step:128 * (step + 1)], y_all[128 * step:128 * (step + 1)]
        if step % args.every:
            hooked_step(model, None, x, y, opt)
            continue
        capture.captured = []
        t0 = time.time()
        hooked_step(model, capture, x, y, opt)
        acts = [a for _, a in capture.captured]
        for eb in args.ebs:
            sb = slot_books[eb]
            sb.begin_step()
            refreshes = sb.counts["book_refreshes"]
            raw = fresh = cached = stale = covering = 0
            worst = 0.0
            for i, a in enumerate(acts):
                c, hists = codec_v4.encode(a, eb)
                cb = sb.compress(torch.from_numpy(a.reshape(-1)), eb)
                y_c = codec_v4.decompress(cb)
                worst = max(worst, float(np.abs(y_c.astype(np.float64) - a.reshape(-1).astype(np.float64)).max()) / eb)
                raw, fresh, cached = raw + a.nbytes, fresh + c.nbytes, cached + cb.nbytes
                book = sb.books[i][1]
                if step == 0:  # the slot's book was built from this tensor: its covering book
                    first_books.setdefault(eb, []).append(book)
                    covering += codec_v4.compress(a, eb, book).nbytes
                else:
                    stale += codec_v4.compress(a, eb, first_books[eb][i]).nbytes
                timing.append(dict(step=step, eb=eb, tensor=i,
                                   old_path_s=host_seconds(lambda: old_host_path(hists), args.repeat),
                                   build_s=host_seconds(lambda: codec_v4.make_book(hists), args.repeat),
                                   reuse_s=host_seconds(lambda: book.drift(hists), args.repeat)))
            row = dict(step=step, eb=eb, tensors=len(acts), fresh_ratio=raw / fresh, cached_ratio=raw / cached,
                       cached_over_fresh=fresh / cached, refreshes=sb.counts["book_refreshes"] - refreshes,
                       cached_max_err_over_eb=worst)
            if step == 0:
                row.update(covering_ratio=raw / covering, covering_over_fresh=fresh / covering)
            else:
                row.update(stale_ratio=raw / stale, stale_over_fresh=fresh / stale)
            rows.append(row)
            print(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
                  f"({time.time() - t0:.0f} s)", flush=True)
    t = {k: 1e3 * float(np.median([r[k] for r in timing])) for k in ("old_path_s", "build_s", "reuse_s")}
    summary = dict(old_path_ms=t["old_path_s"], build_ms=t["build_s"], reuse_ms=t["reuse_s"],
                   old_over_reuse=t["old_path_s"] / t["reuse_s"], tensors_timed=len(timing))
    print(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()))
    if args.out:
        args.out.write_text(json.dumps(dict(model=args.model or "fresh resnet32, seed 0", train=args.train,
                                            steps=args.steps, every=args.every, lr=args.lr, tol=args.tol,
                                            host_time_median_per_tensor=summary, captures=rows, timing=timing),
                                       indent=1))


if __name__ == "__main__":
    main()
