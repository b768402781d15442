"""The Caramel plan on a real DDP over 2-4 gloo CPU processes: every rank's gradients equal one
process's on the whole batch, and DDP's rebuilt buckets and the hook's chunks are the plan's."""

from __future__ import annotations

import pytest
import torch

from repro import multigpu
from repro.papers.caramel import plan
from repro.papers.caramel.links import LinkSpec
from timelines import synthetic
from workers import ddp_grads, reference_grads, tiny_net

CHUNK = 16384


def _plan():
    sizes = [p.numel() * 4 for p in tiny_net().parameters()]
    # a link whose batching threshold is 11 KiB, gradients all ready at once: the small tensors batch,
    # the 64 KiB weight is chunked
    link = LinkSpec("test", gbps=1.0, alpha_us=5.0)
    return plan.caramel(synthetic(sizes, backward_s=1e-9), 2, link, plan.CaramelParams(efficiency=0.9, chunk_mb=CHUNK / plan.MIB))


def test_the_test_plan_batches_and_chunks():
    p = _plan()
    assert any(m.chunks == 4 for m in p)  # the 64 KiB weight as 4 chunks of 16 KiB
    assert any(len(m.params) > 1 for m in p)  # some small tensors batched


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_ranks_gradients_equal_one_process(world):
    p = _plan()
    caps = plan.bucket_caps_mb(p)
    results = multigpu.launch(ddp_grads, world, backend="gloo", args=(caps, CHUNK), timeout_s=120)
    ref = reference_grads()
    for rank, (grads, log) in enumerate(results):
        for step, (got, want) in enumerate(zip(grads, ref)):
            for name in want:
                torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6,
                                           msg=lambda m: f"rank {rank} step {step} {name}: {m}")
        # after DDP's rebuild (iteration 2 on), its buckets are the plan's, and the hook chunks the big one
        per_step = len(caps)
        later = log[-per_step:]
        assert sorted(b for _, b, _ in later) == sorted(round(c * plan.MIB) for c in caps)
        assert max(c for _, _, c in later) == 4
