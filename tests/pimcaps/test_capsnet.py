"""CapsNet's routing against a direct implementation, the characterisation's counts, and the
compiled routing's equality with eager (small shapes)."""

import numpy as np
import pytest
import torch

from repro.papers.pimcaps.capsnet import CONFIGS, CapsConfig, CapsNet, dynamic_routing, predictions, routing_procedure, squash


def routing_by_loops(u_hat: np.ndarray, iterations: int) -> np.ndarray:
    """Sabour et al.'s Procedure 1 written out per sample in NumPy (float64)."""
    bsz, lo, h, d = u_hat.shape
    out = np.zeros((bsz, h, d))
    for b in range(bsz):
        logits = np.zeros((lo, h))
        for r in range(iterations):
            c = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
            s = (c[:, :, None] * u_hat[b]).sum(0)
            n2 = (s * s).sum(1, keepdims=True)
            v = n2 / (1 + n2) * s / np.sqrt(n2)
            logits = logits + (u_hat[b] * v[None]).sum(-1)
        out[b] = v
    return out


def test_routing_equals_procedure_1():
    torch.manual_seed(0)
    u_hat = torch.randn(3, 40, 5, 4, dtype=torch.float64)
    np.testing.assert_allclose(dynamic_routing(u_hat, 3).numpy(), routing_by_loops(u_hat.numpy(), 3), rtol=1e-6)


def test_predictions_and_shapes():
    torch.manual_seed(0)
    u, w = torch.randn(2, 7, 3), torch.randn(7, 4, 5, 3)
    torch.testing.assert_close(predictions(u, w), torch.einsum("lhoi,bli->blho", w, u))
    for cfg, low in ((CONFIGS["mnist"], 1152), (CONFIGS["cifar"], 4096), (CONFIGS["svhn"], 1024)):
        assert cfg.low_capsules == low
        x = torch.randn(2, cfg.in_channels, cfg.image, cfg.image)
        with torch.no_grad():
            v = CapsNet(cfg)(x)
        assert v.shape == (2, cfg.classes, cfg.class_dim)
        assert float(v.norm(dim=-1).max()) < 1.0  # squashed lengths


def test_squash_keeps_direction_and_bounds_length():
    s = torch.tensor([[3.0, 4.0]])
    v = squash(s)
    assert float(v.norm()) == pytest.approx(25 / 26)
    torch.testing.assert_close(v / v.norm(), s / s.norm())


def test_characterisation_rows_on_cpu():
    from repro.papers.pimcaps.characterise import characterise

    cfg = CapsConfig("tiny", 1, 20, conv_channels=8, types=4, classes=3, class_dim=4)
    rows = characterise(cfg, 2, "cpu", repeats=1, compiled=False, power_seconds=0, gpu_uuid=None, seed=0)
    (row,) = rows
    assert row["u_hat_bytes"] == 2 * cfg.low_capsules * 3 * 4 * 4
    assert 0 < row["routing_share"] < 1
    # softmax, weighted sum, squash per iteration plus the agreement twice: dozens of operators
    assert row["routing_ops"] >= 15


def test_routing_compiles_to_one_graph_that_equals_eager():
    """The routing traces as one graph (fullgraph: no break would split the fused kernels the GPU run
    counts) whose decomposed operators give eager's result. aot_eager stops before code generation:
    inductor's C++ build costs 50 s of CPU here, and its GPU kernels are checked against eager by
    the GPU test below (max_abs_diff_vs_eager)."""
    torch.manual_seed(0)
    u, w = torch.randn(2, 16, 4), torch.randn(16, 3, 5, 4)
    fused = torch.compile(routing_procedure, dynamic=False, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(fused(u, w, 3), routing_procedure(u, w, 3), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_characterisation_on_gpu_counts_kernels_and_power():
    from repro.papers.pimcaps.characterise import characterise
    from repro.machine import device_uuid

    rows = characterise(CONFIGS["mnist"], 8, "cuda", repeats=3, compiled=True, power_seconds=0.5,
                        gpu_uuid=device_uuid(), seed=0)
    eager, compiled = rows
    assert eager["routing_kernels"] >= 10 and eager["routing_launches"] >= eager["routing_kernels"] / 2
    assert compiled["routing_kernels"] < eager["routing_kernels"]
    assert compiled["max_abs_diff_vs_eager"] < 1e-4
    assert eager["power_conv_w"] > 0
