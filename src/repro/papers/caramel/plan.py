"""All-reduce plans: which gradients go together, in which order, released when.

A plan is a list of :class:`Message` (one all-reduce each) built from a gradient timeline (rows of
:mod:`repro.papers.caramel.timeline`). The arms:

- ``ddp``: PyTorch DDP's default buckets: gradients in the order they became ready (DDP rebuilds its
  buckets in that order after the first iteration), a 1 MiB first bucket and 25 MiB after it, cut by
  ``torch.distributed._compute_bucket_assignment_by_size`` itself (the function DDP calls).
- ``no_overlap``: the same buckets, all released when backward ends.
- ``horovod``: Horovod's Tensor Fusion, simulated: every ``cycle_ms`` the tensors ready since the last
  cycle are fused, in ready order, into buffers of at most ``fusion_mb``.
- ``caramel``: Caramel's network half (adaptive batching of small tensors, chunked pipelining of large
  ones) in ready order. Batching: a bucket grows until its latency share of a ring all-reduce falls to
  ``1 - efficiency``, and closes early when the next gradient comes so late that the link would sit idle
  longer than the bucket's own latency cost. Chunking: a tensor larger than ``chunk_mb`` is its own
  bucket, reduced as chunks of ``chunk_mb`` (each chunk one all-reduce, so a waiting message can go
  between them). Each message carries ``need_s``, when the next forward first needs one of its tensors:
  Caramel's transfer boundaries, used by the model's ``caramel`` arm to order sends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
import torch.distributed as dist

from repro.papers.caramel.links import LinkSpec, ring_allreduce_s

MIB = 1 << 20
DDP_FIRST_BUCKET = dist._DEFAULT_FIRST_BUCKET_BYTES  # 1 MiB, DDP's own constant
DDP_BUCKET = 25 * MIB  # DDP's default bucket_cap_mb


@dataclass(frozen=True)
class Message:
    """One all-reduce: the timeline indices it carries, its bytes, when in backward it may start (its
    last gradient's ready time), when the next forward first needs it, and its chunk number."""

    params: tuple[int, ...]
    nbytes: int
    release_s: float
    need_s: float
    chunk: int = 0
    chunks: int = 1


@dataclass
class CaramelParams:
    efficiency: float = 0.9  # assumed: a batch's bandwidth share of its ring all-reduce time
    chunk_mb: float = 4.0  # assumed: chunk size for pipelining large tensors (at least the batch size)


def ready_order(tl: pd.DataFrame) -> pd.DataFrame:
    """The timeline's rows in the order their gradients become ready."""
    return tl.sort_values(["ready_s", "index"], ascending=[True, False], kind="stable").reset_index(drop=True)


def _message(rows: pd.DataFrame, release: float | None = None, chunk: int = 0, chunks: int = 1,
             nbytes: int | None = None) -> Message:
    return Message(tuple(int(i) for i in rows["index"]), int(rows["bytes"].sum()) if nbytes is None else nbytes,
                   float(rows["ready_s"].max()) if release is None else release, float(rows["need_s"].min()),
                   chunk, chunks)


def buckets_by_size(nbytes: list[int], limits: list[int]) -> list[list[int]]:
    """DDP's assignment of tensors (in the order given) to buckets with per-bucket byte limits (the
    last limit repeats): a bucket closes once it holds at least its limit."""
    tensors = [torch.empty(max(1, n // 4), device="meta") for n in nbytes]  # fp32: sizes only, no memory
    groups, _ = dist._compute_bucket_assignment_by_size(tensors, limits)
    return sorted(groups, key=min)


def ddp(tl: pd.DataFrame, first_bytes: int = DDP_FIRST_BUCKET, cap_bytes: int = DDP_BUCKET) -> list[Message]:
    rows = ready_order(tl)
    return [_message(rows.iloc[g]) for g in buckets_by_size(list(rows["bytes"]), [first_bytes, cap_bytes])]


def no_overlap(tl: pd.DataFrame) -> list[Message]:
    end = float(tl["backward_s"].iloc[0])
    return [Message(m.params, m.nbytes, end, m.need_s) for m in ddp(tl)]


def horovod(tl: pd.DataFrame, fusion_mb: float = 64.0, cycle_ms: float = 5.0) -> list[Message]:
    rows = ready_order(tl)
    cycle, cap = cycle_ms * 1e-3, fusion_mb * MIB
    out, pending, k = [], [], 1
    for i in range(len(rows)):
        while rows["ready_s"].iloc[i] > k * cycle:  # k * cycle, not a running sum: no drift across ticks
            out += _fuse(rows, pending, cap, k * cycle)
            pending, k = [], k + 1
        pending.append(i)
    return out + _fuse(rows, pending, cap, k * cycle)


def _fuse(rows: pd.DataFrame, idx: list[int], cap: float, tick: float) -> list[Message]:
    """Tensor Fusion of one cycle: ready tensors in order into buffers of at most ``cap`` bytes (a larger
    tensor alone)."""
    out, group, size = [], [], 0
    for i in idx:
        b = int(rows["bytes"].iloc[i])
        if group and size + b > cap:
            out.append(_message(rows.iloc[group], release=tick))
            group, size = [], 0
        group.append(i)
        size += b
    if group:
        out.append(_message(rows.iloc[group], release=tick))
    return out


def batch_bytes(world: int, link: LinkSpec, efficiency: float) -> float:
    """The smallest all-reduce whose bandwidth term is ``efficiency`` of its ring time:
    n / (p B) >= e / (1 - e) * alpha."""
    return world * link.bandwidth * link.alpha * efficiency / (1 - efficiency)


def caramel(tl: pd.DataFrame, world: int, link: LinkSpec, p: CaramelParams) -> list[Message]:
    rows = ready_order(tl)
    target = batch_bytes(world, link, p.efficiency)
    chunk = max(p.chunk_mb * MIB, target)
    out: list[Message] = []
    free = 0.0  # when the link would be free, by the alpha-beta estimate
    group: list[int] = []
    size = 0  # the open group's bytes

    def send(msgs: list[Message]) -> None:
        nonlocal free
        for m in msgs:
            free = max(free, m.release_s) + ring_allreduce_s(m.nbytes, world, link)
        out.extend(msgs)

    for i in range(len(rows)):
        b = int(rows["bytes"].iloc[i])
        if b > chunk:  # a large tensor: its own bucket, pipelined as chunks
            if group:
                send([_message(rows.iloc[group])])
                group, size = [], 0
            n = math.ceil(b / chunk)
            sizes = [int(chunk)] * (n - 1) + [b - int(chunk) * (n - 1)]
            send([_message(rows.iloc[[i]], chunk=k, chunks=n, nbytes=s) for k, s in enumerate(sizes)])
            continue
        group.append(i)
        size += b
        last = i + 1 == len(rows)
        idle = (not last and rows["ready_s"].iloc[i + 1] - max(free, rows["ready_s"].iloc[i])
                > 2 * (world - 1) * link.alpha)
        if size >= target or last or idle:
            send([_message(rows.iloc[group])])
            group, size = [], 0
    return out


def bucket_caps_mb(plan: list[Message]) -> list[float]:
    """The plan as DDP's ``bucket_cap_mb_list``: one limit per bucket in ready order (a chunked tensor's
    chunks are one bucket; the hook cuts the chunks)."""
    caps, seen = [], set()
    for m in plan:
        if m.params in seen:
            continue
        seen.add(m.params)
        caps.append(sum(x.nbytes for x in plan if x.params == m.params) / MIB)
    return caps


def summary(plan: list[Message]) -> dict[str, float]:
    sizes = [m.nbytes for m in plan]
    return {"messages": float(len(plan)), "bytes": float(sum(sizes)),
            "mean_message_bytes": float(sum(sizes) / len(sizes)) if sizes else math.nan,
            "chunked_tensors": float(len({m.params for m in plan if m.chunks > 1}))}
