"""Caramel's plan on a real DDP: the bucket assignment as ``bucket_cap_mb_list`` and a communication
hook that pipelines a large bucket as chunks.

DDP rebuilds its buckets after the first iteration in the order gradients became ready, cutting them
with the per-bucket limits of ``bucket_cap_mb_list``, so the limits of a plan made in ready order
(``plan.bucket_caps_mb``) reproduce the plan's buckets. The hook averages each bucket and all-reduces it
as asynchronous chunks of at most ``chunk_bytes`` (issued back to back; the backend runs them in order,
so a chunk's reduction overlaps the next chunk's transfer where the backend pipelines), and logs what it
sent. What DDP cannot express: it launches buckets strictly in bucket order and the optimizer waits for
all of them, so the model's transfer-boundary ordering (``model.ARMS``'s ``caramel``) has no hook
counterpart; the ``caramel_ddp`` arm is what this hook does."""

# no `from __future__ import annotations`: DDP checks the hook's annotations as objects

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


@dataclass
class HookState:
    chunk_bytes: int  # a bucket larger than this is reduced as chunks of at most this many bytes
    world: int
    log: list[tuple[int, int, int]] = field(default_factory=list)  # (bucket index, bytes, chunks) per call


def caramel_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buf = bucket.buffer()
    buf.div_(state.world)
    per = max(1, state.chunk_bytes // buf.element_size())
    chunks = list(buf.split(per))
    state.log.append((bucket.index(), buf.numel() * buf.element_size(), len(chunks)))
    futures = [dist.all_reduce(c, async_op=True).get_future() for c in chunks]
    if len(futures) == 1:
        return futures[0].then(lambda fut: buf)
    return torch.futures.collect_all(futures).then(lambda fut: buf)


def wrap(model: nn.Module, caps_mb: list[float] | None, chunk_bytes: int | None, world: int) -> tuple[DDP, HookState | None]:
    """DDP over ``model``: with ``caps_mb`` its per-bucket limits (else DDP's default 25 MiB), with
    ``chunk_bytes`` the Caramel hook (else DDP's built-in all-reduce)."""
    ddp = DDP(model, bucket_cap_mb_list=caps_mb) if caps_mb else DDP(model)
    state = None
    if chunk_bytes:
        state = HookState(chunk_bytes=chunk_bytes, world=world)
        ddp.register_comm_hook(state, caramel_hook)
    return ddp, state
