"""Why do the SuperNeurons GPU gradient twins fail under `pool_saved` (every saved tensor offloaded)?

Session 13's H200 run of `pytest -m gpu tests/superneurons`: lstm fp32/bf16 (max rel diff 0.45),
tv_resnet bf16 (0.45), vit bf16 (0.014) off plain autograd; vit/gpt fp32 crashed (a CPU scalar
saved by SDPA reached record_stream). The CPU twins pass (the pool is a pass-through there). This
script runs the failing cases under pool variants, each telling one hypothesis apart:
  as_is      the pool as it is;
  sync       torch.cuda.synchronize() after every offload and prefetch (a stream race?);
  no_recycle pinned buffers never reused (a buffer overwritten before its copy back?);
  keep       the pool's bookkeeping with no copies (the hooks themselves?);
  clone_get  get() returns a fresh copy (a restored tensor that something writes in place?);
  no_contig  `keep` without put()'s .contiguous() of strided tensors (listed with their strides);
and for `as_is` compares every tensor handed back with a copy taken when it was put (corruption of
the data itself, with its shape and dtype). Run: `python tools/debug/sn_pool_diag.py` on a GPU."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import os

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "superneurons"), str(ROOT / "src")]

from any_models import GPU  # noqa: E402
from sn_helpers import max_rel_diff  # noqa: E402
from test_any_model import CONFIGS, one_step  # noqa: E402
from repro.papers.superneurons import tensor_pool as tp  # noqa: E402

Pool = tp.TensorPool
DEVICE = os.environ.get("DIAG_DEVICE", "cuda")  # "cpu": a dry run of the script itself
SIZES = GPU if DEVICE == "cuda" else None
ORIG = {k: getattr(Pool, k) for k in ("_offload", "_prefetch", "_recycle", "put", "get")}


def variant_patches(name):
    """The patches of a variant that needs no log (for reuse by others)."""
    with variant(name, {}) as patches:
        return dict(patches)


@contextlib.contextmanager
def variant(name, log):
    patches = {}
    if name == "sync":
        def _offload(self, e):
            ORIG["_offload"](self, e)
            torch.cuda.synchronize()

        def _prefetch(self, e):
            ORIG["_prefetch"](self, e)
            torch.cuda.synchronize()
        patches = {"_offload": _offload, "_prefetch": _prefetch}
    elif name == "no_recycle":
        def _recycle(self, e):
            e.host = None
        patches = {"_recycle": _recycle}
    elif name == "keep":
        def _offload(self, e):
            self.resident_bytes -= e.nbytes
            self.stats.offloads += 1
            e.state = tp.HOST

        def _prefetch(self, e):
            self.stats.prefetches += 1
            self.prefetching_bytes += e.nbytes
            e.state = tp.PREFETCHING

        def get(self, handle):
            e = self.entries[handle.id]
            if e.state != tp.RESIDENT:
                if e.state == tp.HOST:
                    self.prefetching_bytes += e.nbytes
                self.prefetching_bytes -= e.nbytes
                e.state = tp.RESIDENT
                self.lru[handle.id] = None
                self.resident_bytes += e.nbytes
            return e.tensor
        patches = {"_offload": _offload, "_prefetch": _prefetch, "get": get}
    elif name == "clone_get":
        def get(self, handle):
            return ORIG["get"](self, handle).clone()
        patches = {"get": get}
    elif name == "no_contig":  # put() as it is, less its .contiguous() for strided tensors
        def put(self, t):
            if not (t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)):
                log.setdefault("strided", []).append(f"{tuple(t.shape)} {t.stride()} {t.dtype}")
            cuda, self.cuda = self.cuda, False
            try:
                return ORIG["put"](self, t)
            finally:
                self.cuda = cuda
        patches = {"put": put, **{k: v for k, v in variant_patches("keep").items() if k != "put"}}
    elif name == "as_is":
        def put(self, t):
            h = ORIG["put"](self, t)
            log.setdefault("put", {})[h.id] = (t.detach().clone(), str(tuple(t.shape)), str(t.dtype), str(t.device))
            return h

        def get(self, handle):
            out = ORIG["get"](self, handle)
            log.setdefault("got", {})[handle.id] = out.detach().clone()
            return out
        patches = {"put": put, "get": get}
    for k, f in patches.items():
        setattr(Pool, k, f)
    try:
        yield patches
    finally:
        for k in patches:
            setattr(Pool, k, ORIG[k])


def case(name, dtype, var):
    log = {}
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    with variant(var, log):
        try:
            ref, model, wrapped, (loss_ref, loss) = one_step(name, CONFIGS["pool_saved"], dtype, DEVICE, steps=2,
                                                             sizes=SIZES, batch=8)
        except Exception as exc:  # noqa: BLE001 - a diagnostic: report and go on
            return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    names = [n for n, _ in ref.named_parameters()]
    diffs = sorted(((max_rel_diff([a.grad], [b.grad]), n) for n, a, b in
                    zip(names, ref.parameters(), model.parameters())), reverse=True)
    out = {"max_rel_diff": diffs[0][0], "worst": [f"{n} {d:.3g}" for d, n in diffs[:4]],
           "loss": [float(loss_ref), float(loss)], "offloads": wrapped.pool.stats.offloads}
    if "strided" in log:
        out["strided"] = sorted(set(log["strided"]))[:12]
        out["n_strided"] = len(log["strided"])
    if var == "as_is":
        bad = []
        for i, (t0, shape, dt, dev) in log.get("put", {}).items():
            got = log.get("got", {}).get(i)
            if got is None:
                continue
            if not torch.equal(t0.to(got.device), got):
                bad.append(f"{shape} {dt} {dev} maxabs {(t0.to(got.device).float() - got.float()).abs().max().item():.3g}")
        out["puts"], out["gets"], out["corrupt"] = len(log.get("put", {})), len(log.get("got", {})), bad[:12]
        out["n_corrupt"] = len(bad)
        out["devices"] = sorted({v[3] for v in log.get("put", {}).values()})
    return out


def main():
    cases = [("lstm", None), ("tv_resnet", torch.bfloat16), ("vit", torch.bfloat16), ("vit", None),
             ("gpt", None), ("lstm", torch.bfloat16)]
    variants = sys.argv[1:] or ["as_is", "sync", "no_recycle", "keep", "clone_get", "no_contig"]
    res = {}
    for name, dtype in cases:
        for var in variants:
            key = f"{name}-{'bf16' if dtype else 'fp32'}-{var}"
            res[key] = case(name, dtype, var)
            print(key, json.dumps(res[key]), flush=True)
    return res


if __name__ == "__main__":
    main()
