"""QGTC's quantized layers against their float reference at each bit width, the exact recovery of the
float product from the integer one, the straight-through gradients, and the batched GIN on a
block-diagonal adjacency."""

from __future__ import annotations

import pytest
import torch

from repro.papers.qgtc import layers


def rand_graph(n: int, p: float, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    a = (torch.rand(n, n, generator=gen) < p).float()
    return torch.triu(a, 1) + torch.triu(a, 1).T


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8])
def test_the_twin_gives_the_exact_quantized_product(bits):
    gen = torch.Generator().manual_seed(bits)
    a, b = torch.randn(23, 70, generator=gen), torch.randn(70, 9, generator=gen) + 0.5
    twin = layers.qmatmul(a, b, bits, bits, "twin")
    exact = layers.qmatmul(a, b, bits, bits, "exact")
    torch.testing.assert_close(twin, exact, rtol=0, atol=0)
    # and the recovery formula equals the product of the dequantized operands
    qa, lo_a, s_a = layers.quantize(a, bits)
    qb, lo_b, s_b = layers.quantize(b, bits)
    torch.testing.assert_close(twin.double(), (lo_a + s_a * qa.double()) @ (lo_b + s_b * qb.double()),
                               rtol=1e-5, atol=1e-4)


def test_a_binary_adjacency_is_exact_at_one_bit():
    adj, _ = layers.with_self_loops(rand_graph(40, 0.1, 0))
    h = torch.randint(0, 16, (40, 5)).float()  # on the 4-bit grid: nothing lost
    torch.testing.assert_close(layers.qmatmul(adj, h, 1, 4, "twin"), adj @ h, rtol=0, atol=1e-5)


def test_quantized_gcn_approaches_the_float_reference_as_bits_grow():
    adj, deg_inv = layers.with_self_loops(rand_graph(60, 0.08, 1))
    x = torch.randn(60, 12, generator=torch.Generator().manual_seed(2))
    ref = layers.QGCN([12, 16, 16, 4], None, seed=3)(adj, deg_inv, x)
    errs = {}
    for bits in (1, 2, 4, 8):
        out = layers.QGCN([12, 16, 16, 4], bits, "twin", seed=3)(adj, deg_inv, x)
        errs[bits] = ((out - ref).norm() / ref.norm()).item()
    assert errs[8] < errs[4] < errs[2]
    assert errs[8] < 0.03 and errs[4] < 0.6, errs  # per-tensor min-max: 4 bits is coarse over 3 layers


def test_straight_through_gradients_and_training_step():
    adj, deg_inv = layers.with_self_loops(rand_graph(50, 0.1, 4))
    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(50, 8, generator=gen), torch.randint(0, 3, (50,), generator=gen)
    model = layers.QGCN([8, 16, 3], 8, "twin", seed=6)
    ref = layers.QGCN([8, 16, 3], None, seed=6)
    loss = torch.nn.functional.cross_entropy(model(adj, deg_inv, x), y)
    loss.backward()
    loss_ref = torch.nn.functional.cross_entropy(ref(adj, deg_inv, x), y)
    loss_ref.backward()
    for w, wr in zip(model.weights, ref.weights):  # 8-bit STE gradients close to the float ones
        assert ((w.grad - wr.grad).norm() / wr.grad.norm()).item() < 0.1
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(15):
        opt.zero_grad()
        step = torch.nn.functional.cross_entropy(model(adj, deg_inv, x), y)
        step.backward()
        opt.step()
    assert step.item() < loss.item() * 0.8


def test_batched_gin_on_a_block_diagonal_adjacency():
    blocks = [rand_graph(12, 0.3, s) for s in range(4)]
    adj, _ = layers.with_self_loops(torch.block_diag(*blocks))
    x = torch.randn(48, 6, generator=torch.Generator().manual_seed(7))
    ref = layers.QGIN([6, 16, 5], None, seed=8)(adj, x)
    for bits, tol in ((8, 0.05), (4, 0.6)):
        out = layers.QGIN([6, 16, 5], bits, "twin", seed=8)(adj, x)
        assert ((out - ref).norm() / ref.norm()).item() < tol
    # each graph's rows depend only on its own block
    x2 = x.clone()
    x2[:12] += 1.0
    out1 = layers.QGIN([6, 16, 5], None, seed=8)(adj, x2)
    torch.testing.assert_close(out1[12:], ref[12:])


def test_constant_operands_quantize_without_dividing_by_zero():
    a, b = torch.full((5, 7), 2.0), torch.randn(7, 3)
    torch.testing.assert_close(layers.qmatmul(a, b, 2, 8, "twin"), a @ layers.quantize_dequantize(b, 8),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bits", [1, 2, 8])
def test_the_adjacency_packed_once_gives_the_same_aggregation(bits):
    adj, _ = layers.with_self_loops(rand_graph(70, 0.1, bits))
    h = torch.randn(70, 6, generator=torch.Generator().manual_seed(bits), requires_grad=True)
    packed = layers.aggregate(layers.Binary(adj, "twin"), h, bits)
    torch.testing.assert_close(packed, layers.qmatmul(adj, h.detach(), 1, bits, "exact"), rtol=0, atol=1e-5)
    grad = torch.randn(70, 6)
    packed.backward(grad)
    torch.testing.assert_close(h.grad, adj.T @ grad)  # straight through the quantization of h
