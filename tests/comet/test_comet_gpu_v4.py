"""Codec v4 on a CUDA GPU (kernels/comet_huffman.cu): streams bit-identical to the NumPy twin on every
property-test input and at several sizes, GPU round trips within the bound, the GPU decoder on the
twin's streams, NaN/Inf refused, the hooks with codec v4.

Kernels come from $REPRO_KERNELS_DIR (a `snakemake build_kernels` output) or are compiled here
with nvcc into a temporary folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
cupy = pytest.importorskip("cupy")

from cases import cases  # noqa: E402
from repro.papers.comet import codec_v4, gpu_codec_v4  # noqa: E402
from repro.papers.comet.hooks import make_hooks  # noqa: E402
from conftest import built_kernels  # noqa: E402

pytestmark = pytest.mark.gpu

KERNELS = Path(gpu_codec_v4.__file__).resolve().parent / "kernels"
CASES = cases()


@pytest.fixture(scope="session")
def kernels_dir(tmp_path_factory) -> Path:
    return built_kernels(tmp_path_factory, [KERNELS / "comet_huffman.cu"])


def assert_same_stream(x: np.ndarray, eb: float, kernels_dir: Path) -> None:
    ref = codec_v4.compress(x, eb)
    got_dev = gpu_codec_v4.compress(torch.from_numpy(x.reshape(-1)).cuda(), eb, kernels_dir)
    got = gpu_codec_v4.to_cpu(got_dev)
    assert got.mode == ref.mode
    np.testing.assert_array_equal(got.lengths, ref.lengths)
    np.testing.assert_array_equal(got.offsets, ref.offsets)
    np.testing.assert_array_equal(got.payload, ref.payload)
    assert got_dev.nbytes == ref.nbytes
    y = gpu_codec_v4.decompress(got_dev, kernels_dir=kernels_dir).cpu().numpy()
    np.testing.assert_array_equal(y.view(np.uint32), codec_v4.decompress(ref).view(np.uint32))
    assert np.abs(x.reshape(-1).astype(np.float64) - y).max(initial=0) <= np.float32(eb)
    back = gpu_codec_v4.to_gpu(ref, "cuda")  # the GPU decoder reads the twin's stream
    np.testing.assert_array_equal(gpu_codec_v4.decompress(back, kernels_dir=kernels_dir).cpu().numpy(), y)


@pytest.mark.parametrize("name,x,ebs", CASES, ids=[c[0] for c in CASES])
def test_gpu_stream_equals_twin_stream(name, x, ebs, kernels_dir):
    for eb in ebs + [0.0]:
        assert_same_stream(x, eb, kernels_dir)


@pytest.mark.parametrize("n", [1, 3, 4, 127, 1023, 1024, 1025, 4097, 3 * 2**20 + 5])
def test_sizes(n, kernels_dir):
    rng = np.random.default_rng(n)
    x = np.maximum(rng.standard_normal(n), 0).astype(np.float32)
    for eb in (0.02, 0.5):
        assert_same_stream(x, eb, kernels_dir)


def test_escapes_and_both_modes(kernels_dir):
    n = 8 * 1024
    x = np.zeros(n, dtype=np.float32)
    x[10], x[11] = 5000.0, -3000.0  # escapes
    x[2048:4096] = np.linspace(-40, 40, 2048)
    assert_same_stream(x, 0.01, kernels_dir)
    rng = np.random.default_rng(2)
    spiky = np.where(rng.random(n) < 0.3, 0.25, 0.0).astype(np.float32)
    assert codec_v4.compress(spiky, 0.5).mode == codec_v4.DIRECT
    assert_same_stream(spiky, 0.5, kernels_dir)


def test_empty_and_non_finite(kernels_dir):
    c = gpu_codec_v4.compress(torch.zeros(0, device="cuda"), 0.1, kernels_dir)
    assert c.n == 0 and gpu_codec_v4.decompress(c, kernels_dir=kernels_dir).numel() == 0
    for bad in (float("nan"), float("inf"), float("-inf")):
        x = torch.ones(5000, device="cuda")
        x[4321] = bad
        with pytest.raises(ValueError, match="non-finite"):
            gpu_codec_v4.compress(x, 0.1, kernels_dir)


def test_large_round_trip_holds_the_bound(kernels_dir):
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.relu(torch.randn(2**24 + 77, generator=gen, device="cuda"))
    for eb in (0.01, 0.2):
        c = gpu_codec_v4.compress(x, eb, kernels_dir)
        y = gpu_codec_v4.decompress(c, kernels_dir=kernels_dir)
        assert float((x.double() - y.double()).abs().max()) <= eb
        assert c.ratio > 4


def test_hooks_with_codec_v4_keep_gradients_close(kernels_dir):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.Flatten(),
                                torch.nn.Linear(16 * 32 * 32, 10)).cuda()
    x = torch.randn(8, 3, 32, 32, device="cuda")
    model(x).square().sum().backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    hooks = make_hooks("fixed", eb=1e-3, kernels_dir=kernels_dir, codec_version="v4")
    hooks.wrap_model(model)
    with hooks.saved_tensors_hooks():
        model(x).square().sum().backward()
    assert 0 < hooks.step_stored_bytes < hooks.step_raw_bytes / 2
    g0, g1 = torch.cat([g.flatten() for g in ref]), torch.cat([p.grad.flatten() for p in model.parameters()])
    assert ((g1 - g0).norm() / g0.norm()).item() < 0.05
