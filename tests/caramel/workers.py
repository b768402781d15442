"""Module-level gloo workers for the Caramel tests (spawned processes pickle them by name)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def tiny_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8))


def batch(n: int = 24):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 16, generator=g), torch.randint(0, 8, (n,), generator=g)


def reference_grads(steps: int = 3) -> list[dict[str, torch.Tensor]]:
    """One process, the whole batch, SGD: each step's gradients."""
    net = tiny_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = batch()
    out = []
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        out.append({n: p.grad.clone() for n, p in net.named_parameters()})
        opt.step()
    return out


def ddp_grads(rank: int, world: int, caps_mb, chunk_bytes, steps: int = 3):
    """Each rank its shard of the batch through DDP with the Caramel buckets and hook: every step's
    gradients, the hook's log and DDP's bucket sizes after its rebuild."""
    from repro.papers.caramel.hook import wrap

    ddp, state = wrap(tiny_net(), caps_mb, chunk_bytes, world)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    x, y = batch()
    xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
    out = []
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(ddp(xs), ys).backward()
        out.append({n.removeprefix("module."): p.grad.clone() for n, p in ddp.named_parameters()})
        opt.step()
    dist.barrier()
    return out, list(state.log) if state else []
