"""Does ActNN 2-bit train VGG-16 with and without the ReLU's exact mask? The first epoch of the
H200 arm's schedule (batch 128, SGD momentum 0.9, weight decay 5e-4, lr warmed up linearly from 0 to
0.1 over the epoch) on the CPU, for one variant per process:

    python tools/debug/actnn_relu_mask.py {none,mask,nomask} [--train results/data/cifar10/train.npz]
        [--test results/data/cifar10/test.npz] [--images N] [--threads 1]

none: no compression; mask: ActNNHooks as they are (ReLU outputs keep their x > 0 mask); nomask:
the same quantiser with the mask turned off (the arm of sessions 5-7, which diverged on the H200).
Prints the mean training loss every tenth of the epoch and the top-1 on the first 2,000 test
images, or the step where the loss stopped being finite. A design aid for docs/gpu-notes.md (session 7): it writes no record. About 2-4 minutes per
variant on one CPU core with a 10,000-image split.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from repro.papers.comet.hooks import ActNNHooks  # noqa: E402
from repro.models import build_model  # noqa: E402


class NoMask(ActNNHooks):
    """The quantiser without the ReLU mask: ReLU's backward reads its mask from 2-bit values."""

    def encode(self, t, layer):
        kinds, self._kinds = self._kinds, {k: ("" if v == "ReLU" else v) for k, v in self._kinds.items()}
        try:
            return super().encode(t, layer)
        finally:
            self._kinds = kinds


class NoCompression(ActNNHooks):
    """The same hooks and loop, nothing encoded."""

    def eligible(self, t):
        return False


VARIANTS = {"none": NoCompression, "mask": ActNNHooks, "nomask": NoMask}


def images(path: Path, n: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    arrays = np.load(path)
    x = torch.tensor(arrays["images"][:n]).float().div(255)
    x = x.permute(0, 3, 1, 2) if x.shape[-1] == 3 else x
    return x, torch.tensor(arrays["labels"][:n]).long()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variant", choices=sorted(VARIANTS))
    ap.add_argument("--train", type=Path, default=Path("results/data/cifar10/train.npz"))
    ap.add_argument("--test", type=Path, default=Path("results/data/cifar10/test.npz"))
    ap.add_argument("--images", type=int, default=None, help="training images (default: all in --train)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x, y = images(args.train, args.images)
    mean, std = x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True)
    x = (x - mean) / std
    xt, yt = images(args.test, 2000)
    xt = (xt - mean) / std
    torch.manual_seed(0)
    model = build_model("vgg16", num_classes=10)
    hooks = VARIANTS[args.variant](seed=1)
    hooks.wrap_model(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9, weight_decay=5e-4)
    steps, every = len(x) // 128, max(1, len(x) // 1280)
    order, total, t0 = torch.randperm(len(x)), 0.0, time.time()
    for i in range(steps):
        for group in opt.param_groups:
            group["lr"] = 0.1 * (i + 1) / steps
        idx = order[i * 128:(i + 1) * 128]
        with hooks.saved_tensors_hooks():
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        hooks.after_backward(model)
        total += loss.item()
        if not np.isfinite(loss.item()):
            print(f"{args.variant}: diverged at step {i + 1}/{steps} (loss {loss.item()}, lr {0.1 * (i + 1) / steps:.3f})")
            return
        if (i + 1) % every == 0:
            print(f"{args.variant} step {i + 1}/{steps} loss {total / every:.3f} lr {0.1 * (i + 1) / steps:.3f} "
                  f"{time.time() - t0:.0f}s", flush=True)
            total = 0.0
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(xt[j:j + 500]).argmax(1) == yt[j:j + 500]).sum()) for j in range(0, len(xt), 500))
    print(f"{args.variant}: test top-1 after one epoch {100 * correct / len(xt):.2f}% ({len(xt)} images)")


if __name__ == "__main__":
    main()
