"""Does the order in which the codec sees an activation's values matter? Our codec's ratio and ActNN
2-bit's error on a trained ResNet-32's channels-last saved activations, values in memory order
(neighbours: the channels of one pixel) vs logical NCHW order (neighbours along W).

    python tools/debug/comet_value_order.py [--pruned results/reference/nvidia-h200/clicktrain/sparse24/pruned.pt]
        [--test results/data/cifar10/test.npz] [--images 128] [--ebs 0.05 0.2 0.5]

CPU only (the NumPy codec, bit-exact with the GPU codec). The model is any arm's exported pruned.pt
(PruneTrain's is nearly dense: 1.19x); BatchNorm in training mode, as when activations are saved.
A design aid for docs/gpu-notes.md (COMET v2): it writes no record.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from repro.papers.clicktrain.experiment import load_pruned
from repro.papers.comet import codec
from repro.papers.comet.hooks import ActNNHooks
from repro.data.arrays import read_split


def saved_activations(pruned: Path, test: Path, images: int) -> list[torch.Tensor]:
    pm = load_pruned(pruned)
    model = pm.model.train().to(memory_format=torch.channels_last)
    split = read_split(test)
    x = torch.from_numpy(split.images[:images]).permute(0, 3, 1, 2).float() / 255
    mean, std = (torch.tensor(pm.meta[k]).view(1, 3, 1, 1) for k in ("mean", "std"))
    x = ((x - mean) / std).contiguous(memory_format=torch.channels_last)
    saved = []

    def pack(t):
        if t.dtype == torch.float32 and t.dim() == 4 and t.numel() >= 4096 and not isinstance(t, nn.Parameter):
            saved.append(t.detach().clone())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return saved


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pruned", type=Path, default=Path("results/reference/nvidia-h200/clicktrain/sparse24/pruned.pt"))
    ap.add_argument("--test", type=Path, default=Path("results/data/cifar10/test.npz"))
    ap.add_argument("--images", type=int, default=128)
    ap.add_argument("--ebs", type=float, nargs="+", default=[0.05, 0.2, 0.5])
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    saved = saved_activations(args.pruned, args.test, args.images)
    print(f"{len(saved)} saved 4-D float32 tensors, "
          f"{sum(t.is_contiguous(memory_format=torch.channels_last) for t in saved)} channels-last")
    orders = {"memory": lambda t: t.permute(0, 2, 3, 1).reshape(-1), "logical": lambda t: t.contiguous().reshape(-1)}
    for eb in args.ebs:
        ratio = {}
        for name, flat in orders.items():
            raw = stored = 0
            for t in saved:
                arr = flat(t).numpy()
                raw, stored = raw + arr.nbytes, stored + codec.compress(arr, eb).nbytes
            ratio[name] = raw / stored
        print(f"eb {eb}: our codec {ratio['memory']:.2f}x in memory order, {ratio['logical']:.2f}x in logical order")
    for name in orders:
        hooks = ActNNHooks(group_size=256, min_numel=4096, seed=0, value_order=name)
        rel = [float((hooks.decode(hooks.encode(t, "x")[0]) - t).pow(2).mean().sqrt() / t.pow(2).mean().sqrt())
               for t in saved]
        print(f"ActNN 2-bit relative RMS error, {name} order: {np.mean(rel):.3f} (mean over tensors)")


if __name__ == "__main__":
    main()
