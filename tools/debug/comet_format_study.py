"""Compression ratios of candidate COMET format variants on real ResNet-32 activations (CPU).

    python tools/debug/comet_format_study.py STEPS     # e.g. 300 (about 11 minutes on 2 cores)

Trains ResNet-32 for STEPS SGD steps on the prepared CIFAR-10 train split
(results/data/cifar10/train.npz), dumps the activations one training step saves (batch 128), and
prints raw / compressed size per error bound and memory layout (NCHW; NHWC = channels-last, the
GPU training layout) for: v1 (the current format, codec.compress), g32 (v1's deltas with one
width per 32-value group instead of per 1024-value block), g32bitmap (a zero bitmap plus
per-group widths of the nonzero magnitudes, no delta), and sz3like (the order-0 entropy of v1's
zigzagged deltas: what an ideal entropy coder of the same residuals would reach). A design aid:
it writes nothing, and its numbers are estimates for choosing the next format.
"""
import sys
import numpy as np, torch, time, torch.nn as nn
from repro.data.arrays import read_split
from repro.models import build_model
from repro.papers.comet import codec
from repro.papers.comet.arms import probe_memory
from repro.papers.comet.sz3_reference import _Capture
from repro.train.augment import first_batch
from repro.train.augment import DeviceAugment, channel_stats
torch.manual_seed(0)
tr = read_split("results/data/cifar10/train.npz")
m = build_model("resnet32")
opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
mean, std = channel_stats(tr.images)
aug = DeviceAugment(mean, std, 32, 32, "cpu", channels_last=False)
t0=time.time()
for step in range(int(sys.argv[1])):
    idx = torch.randint(0, len(tr.labels), (128,))
    x = aug.normalize(torch.from_numpy(tr.images[idx.numpy()])); y = torch.from_numpy(tr.labels[idx.numpy()]).long()
    loss = nn.functional.cross_entropy(m(x), y); opt.zero_grad(); loss.backward(); opt.step()
print("trained", time.time()-t0, "s, loss", loss.item())
cap = _Capture(4096); cap.attach(m)
x, y = first_batch(tr, 128, "cpu")
probe_memory(m, cap, x, y)
for layout in ("NCHW", "NHWC"):
  for eb in (0.05, 0.1, 0.2):
    tot = dict(raw=0, v1=0, g32=0, g32bitmap=0, sz3like=0)
    for layer, arr in cap.captured:
        a = arr if layout == "NCHW" or arr.ndim != 4 else arr.transpose(0, 2, 3, 1)
        flat = np.ascontiguousarray(a).reshape(-1).astype(np.float32)
        tot["raw"] += flat.size * 32
        tot["v1"] += codec.compress(flat, eb).nbytes * 8
        q = codec.quantize(codec._blocks(flat), codec.check_eb(eb))[0]
        z = codec.zigzag(np.diff(q, axis=1, prepend=q[:, :1]))
        # groups of 32 values in v1's bit-plane order (chunk, sub-value, lane)
        zg = codec._plane_order(z).reshape(-1, 32)
        w = codec.bit_length(zg.max(1)).astype(np.int64)
        tot["g32"] += int((32 * w).sum() + 6 * len(w) + 32 * len(q))
        # bitmap of zeros + per-32 width over nonzero magnitudes (no delta)
        qg = codec._plane_order(np.abs(q)).reshape(-1, 32)
        nzc = (qg != 0).sum(1); wm = codec.bit_length(qg.max(1).astype(np.uint32)).astype(np.int64)
        signs = (q.reshape(-1) < 0).sum()
        tot["g32bitmap"] += int(32 * len(qg) + (nzc * wm).sum() + 6 * len(qg) + signs)
        # empirical entropy of the zigzag deltas (what an ideal entropy coder of d would take)
        vals, cnt = np.unique(z, return_counts=True); p = cnt / cnt.sum()
        tot["sz3like"] += float(-(cnt * np.log2(p)).sum())
    print(layout, "eb", eb, {k: round(tot["raw"] / v, 2) for k, v in tot.items() if k != "raw"})
