"""The fused LRN (repro.models.lrn) against torch.nn.LocalResponseNorm: values, gradients (gradcheck in
float64) and what autograd keeps for backward."""

import pytest
import torch
import torch.nn as nn

from repro.models.lrn import FusedLocalResponseNorm, LRNFunction


@pytest.mark.parametrize("size", [5, 4, 1, 3])
@pytest.mark.parametrize("shape", [(2, 7, 5, 3), (3, 6, 4), (1, 3, 2, 2, 2)])
def test_matches_torch_local_response_norm(size, shape):
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=torch.float64) * 3
    ref, ours = nn.LocalResponseNorm(size, alpha=0.3, beta=0.75, k=2.0), FusedLocalResponseNorm(size, 0.3, 0.75, 2.0)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ref(a), ours(b)
    torch.testing.assert_close(yb, ya)
    g = torch.randn_like(ya)
    ya.backward(g)
    yb.backward(g)
    torch.testing.assert_close(b.grad, a.grad)


@pytest.mark.parametrize("size,beta", [(5, 0.75), (2, 0.5), (3, 1.3)])
def test_gradcheck(size, beta):
    torch.manual_seed(1)
    x = torch.randn(2, 6, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: LRNFunction.apply(t, size, 0.5, beta, 1.5), (x,))


def test_saves_only_its_input():
    """The composite saves several input-sized tensors; the Function only its input."""
    x = torch.randn(2, 8, 6, 6, requires_grad=True)
    inp = x * 1  # a non-leaf input, as a ReLU's output in AlexNet
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = FusedLocalResponseNorm(5)(inp)
    assert len(saved) == 1 and saved[0].untyped_storage().data_ptr() == inp.untyped_storage().data_ptr()
    assert y.grad_fn.saved_tensors[0] is not None
    composite = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: composite.append(t) or t, lambda t: t):
        nn.LocalResponseNorm(5)(inp)
    big = {t.untyped_storage().data_ptr() for t in composite if t.numel() >= inp.numel()}
    assert len(big) >= 3  # the composite keeps at least three input-sized tensors (its input among them)
