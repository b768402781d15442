"""GPU twins of test_any_model's gradient tests (skipped without CUDA; run with
``pytest -m gpu tests/superneurons``): the same ordinary nn.Modules (ViT, GPT decoder, DenseNet,
torchvision-style ResNet, LSTM) at a realistic small size (any_models.GPU, batch 8), every kind of
plan with real offloads to pinned host memory and prefetches on the side stream (the unit plans and
the layer plan's forced actions), in fp32 and under bf16 autocast. Gradients, losses and batch-norm statistics equal plain autograd's to the GPU's own
noise floor (plain against plain from the same init: atomics in some backward kernels) or the CPU
tests' tolerance, whichever is larger."""

from __future__ import annotations

import pytest
import torch

from any_models import ANY, GPU
from sn_helpers import max_rel_diff
from test_any_model import CONFIGS, TOLERANCE, one_step
from repro.papers.superneurons.plan import RuntimeConfig
from sn_helpers import deterministic  # noqa: F401  (an autouse fixture: cuDNN deterministic)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
BATCH = 8
# fp32 on the GPU: a recomputed forward rounds differently from the first (measured on the H200: ViT,
# `memory` plan, 3.6e-5 after two steps, against 0 for plain against plain); a wrong layout, mask or
# stale tensor is O(1) off (0.45 before the pool kept saved tensors' strides)
GPU_TOLERANCE = {None: 1e-4, torch.bfloat16: TOLERANCE[torch.bfloat16]}
# the layer plan inside units (recompute the cheap layers, offload the rest) with every pooled tensor
# really leaving the GPU (pool budget 0), as test_layer_plan forces it on the CPU
LAYER = dict(granularity="layer", pool_budget_bytes=0, max_inflight_bytes=0, min_offload_bytes=0)
GPU_CONFIGS = {**CONFIGS, **{f"layer_{a}": RuntimeConfig(**LAYER, layer_actions=a)
                             for a in ("recompute", "offload", "both")}}




def _noise_floor(name, dtype) -> float:
    """Plain autograd against itself (two runs from the same init and RNG): the GPU's rounding noise."""
    plain = RuntimeConfig(recompute="off", pool=False)
    a, _, _, _ = one_step(name, plain, dtype, "cuda", steps=1, sizes=GPU, batch=BATCH)
    b, _, _, _ = one_step(name, plain, dtype, "cuda", steps=1, sizes=GPU, batch=BATCH)
    return max_rel_diff([p.grad for p in a.parameters()], [p.grad for p in b.parameters()])


@pytest.mark.parametrize("dtype", [None, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("config", list(GPU_CONFIGS))
@pytest.mark.parametrize("name", list(ANY))
def test_gradients_equal_plain_on_the_gpu(name, config, dtype):
    ref, model, wrapped, (loss_ref, loss) = one_step(name, GPU_CONFIGS[config], dtype, "cuda", steps=2, sizes=GPU,
                                                     batch=BATCH)
    torch.cuda.synchronize()
    floor = _noise_floor(name, dtype)
    tol = max(10 * floor, GPU_TOLERANCE[dtype])
    diff = max_rel_diff([p.grad for p in ref.parameters()], [p.grad for p in model.parameters()])
    print(name, config, dtype, "max rel diff", diff, "plain vs plain", floor)
    assert torch.allclose(loss, loss_ref, rtol=tol, atol=1e-5)
    assert all(p.grad is not None for p in model.parameters())
    assert diff <= tol
    for b_ref, b in zip(ref.buffers(), model.buffers()):  # BN running statistics: updated once per step
        assert torch.allclose(b_ref.float(), b.float(), rtol=1e-4, atol=1e-5)
    stats = wrapped.pool.stats
    if config in ("speed", "memory", "pool_saved", "layer_offload", "layer_both"):  # pool budget 0: every pooled tensor really leaves
        assert stats.offloads > 0 and stats.prefetches > 0 and stats.pinned_bytes > 0
    assert len(wrapped.pool) == 0
